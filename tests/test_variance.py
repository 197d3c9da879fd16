"""Tests of adloco.variance against closed forms, brute force and the tiny data set."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from adloco.config import model_config
from adloco.variance import (
    SPREAD_DRAWS,
    analyse_gradient_variance,
    compare_reductions,
    draw_partitions,
    trace_std_ratio_iid,
)

REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")


class LinearRegression(torch.nn.Module):
    """ŷ = xᵀw, called like a causal LM: rows are [x, y], the output has ``.logits``."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = torch.nn.Parameter(w.clone())

    def forward(self, input_ids, use_cache=False):
        return SimpleNamespace(logits=input_ids[:, :-1] @ self.w)


def squared_loss(prediction, rows):
    """(Σ ½(ŷ − y)², number of rows): one 'token' per row."""
    residual = prediction - rows[:, -1]
    return 0.5 * (residual * residual).sum(), torch.tensor(rows.shape[0])


def regression_sample(n: int, d: int, noise: float, delta_norm: float, seed: int):
    """Rows [x, y] with x ~ N(0, I), y = xᵀw* + ε, and w = w* + δ."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    w_star = torch.randn(d, generator=gen, dtype=torch.float64)
    y = x @ w_star + noise * torch.randn(n, generator=gen, dtype=torch.float64)
    delta = torch.randn(d, generator=gen, dtype=torch.float64)
    delta = delta * (delta_norm / delta.norm())
    return torch.cat([x, y[:, None]], dim=1), w_star + delta


def closed_form_grads(rows: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """g_i = (x_iᵀw − y_i) x_i, by hand."""
    x, y = rows[:, :-1], rows[:, -1]
    return (x @ w - y)[:, None] * x


def test_figures_match_the_closed_form_of_the_sample():
    rows, w = regression_sample(n=300, d=6, noise=0.5, delta_norm=0.4, seed=1)
    g = closed_form_grads(rows, w)
    n = rows.shape[0]
    mean = g.mean(0)
    trace_cov = float(((g - mean) ** 2).sum() / (n - 1))
    grad_sqnorm = float(mean @ mean)
    result = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=10,
        num_batches=50,
        eta=0.5,
        seed=0,
        loss_fn=squared_loss,
        chunk_size=64,
    ).summary
    assert result["trace_cov"] == pytest.approx(trace_cov, rel=1e-10)
    assert result["grad_sqnorm"] == pytest.approx(grad_sqnorm, rel=1e-10)
    assert result["grad_sqnorm_unbiased"] == pytest.approx(grad_sqnorm - trace_cov / n, rel=1e-9)
    assert result["b_simple"] == pytest.approx(trace_cov / grad_sqnorm, rel=1e-9)
    assert result["norm_test_batch"] == pytest.approx(trace_cov / (0.25 * grad_sqnorm), rel=1e-9)
    assert result["norm_test_batch_ceil"] == math.ceil(trace_cov / (0.25 * grad_sqnorm))
    assert result["expected_sq_deviation"] == pytest.approx(trace_cov * (1 - 10 / n) / 10, rel=1e-9)
    assert result["full_loss"] == pytest.approx(
        float(0.5 * ((rows[:, :-1] @ w - rows[:, -1]) ** 2).mean()), rel=1e-12
    )
    assert result["tokens_per_sequence"] == 1


def test_figures_match_the_population_closed_form():
    # x ~ N(0, I_d), ε ~ N(0, σ²), δ = w − w*: g = x xᵀδ − ε x, so
    # ∇F = δ and tr Σ = E[(xᵀδ)²‖x‖²] + σ² d − ‖δ‖² = (d + 1)‖δ‖² + σ² d.
    n, d, noise, delta_norm = 20000, 4, 0.5, 0.3
    rows, w = regression_sample(n=n, d=d, noise=noise, delta_norm=delta_norm, seed=2)
    result = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=4,
        num_batches=4,
        eta=0.8,
        seed=0,
        loss_fn=squared_loss,
        chunk_size=5000,
    ).summary
    trace_cov = (d + 1) * delta_norm**2 + noise**2 * d
    grad_sqnorm = delta_norm**2
    # Four standard errors of the sample estimates: tr Σ̂ is a mean of the
    # ‖g_i − ḡ‖²; ‖ḡ‖² − tr Σ̂/n moves by 2⟨δ, ḡ − δ⟩, of std ≤ ‖δ‖ √(tr Σ / n).
    g = closed_form_grads(rows, w)
    sq_dev = ((g - g.mean(0)) ** 2).sum(1)
    tol_trace = 4 * float(sq_dev.std()) / math.sqrt(n)
    tol_grad = 4 * 2 * delta_norm * math.sqrt(trace_cov / n)
    assert abs(result["trace_cov"] - trace_cov) < tol_trace
    assert abs(result["grad_sqnorm_unbiased"] - grad_sqnorm) < tol_grad
    rel = tol_trace / trace_cov + tol_grad / grad_sqnorm
    assert result["b_simple"] == pytest.approx(trace_cov / grad_sqnorm, rel=rel)


def test_deviations_and_cheap_estimator_match_their_expectations():
    rows, w = regression_sample(n=200, d=5, noise=1.0, delta_norm=0.5, seed=3)
    b, k = 8, 3000
    analysis = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=b,
        num_batches=k,
        eta=0.8,
        seed=7,
        loss_fn=squared_loss,
        chunk_size=200,
    )
    s = analysis.summary
    dev_sq = torch.tensor([r["deviation_sq"] for r in analysis.per_batch], dtype=torch.float64)
    # Without replacement within a batch: E‖g_B − ∇F‖² = tr Σ (1 − b/n) / b.
    expected = s["trace_cov"] * (1 - b / 200) / b
    assert s["expected_sq_deviation"] == pytest.approx(expected, rel=1e-12)
    tolerance = 4 * float(dev_sq.std()) / math.sqrt(k)
    assert abs(s["mean_sq_deviation"] - expected) < tolerance
    # The cheap estimator: b/(k−1) Σ‖g_B − mean‖², expectation tr Σ (1 − b/n).
    cheap = s["cheap"]
    assert cheap["groups"] == k and cheap["samples"] == k * b
    assert cheap["expected_trace_cov"] == pytest.approx(s["trace_cov"] * (1 - b / 200))
    assert abs(cheap["trace_cov"] - cheap["expected_trace_cov"]) < b * tolerance
    # Its norm-test batch uses the pooled batch gradient, as the engine's test.
    assert cheap["norm_test_batch"] == pytest.approx(
        cheap["trace_cov"] / (0.8**2 * cheap["batch_grad_sqnorm"]), rel=1e-12
    )
    rows_deviation = [r["deviation"] for r in analysis.per_batch]
    assert s["mean_deviation"] == pytest.approx(sum(rows_deviation) / k, rel=1e-12)
    assert s["rms_deviation"] == pytest.approx(math.sqrt(s["mean_sq_deviation"]), rel=1e-12)


def test_expected_deviation_formula_against_every_subset():
    # Brute force over all C(n, b) batches of a small sample: the exact mean of
    # ‖g_B − ∇F‖² equals the reported tr Σ (1 − b/n) / b.
    rows, w = regression_sample(n=9, d=3, noise=0.7, delta_norm=0.5, seed=4)
    g = closed_form_grads(rows, w)
    full = g.mean(0)
    for b in (1, 2, 4, 9):
        subsets = list(itertools.combinations(range(9), b))
        brute = sum(float(((g[list(s)].mean(0) - full) ** 2).sum()) for s in subsets)
        brute /= len(subsets)
        s = analyse_gradient_variance(
            LinearRegression(w),
            rows,
            batch_size=b,
            num_batches=2,
            eta=1.0,
            seed=0,
            loss_fn=squared_loss,
        ).summary
        assert s["expected_sq_deviation"] == pytest.approx(brute, rel=1e-10, abs=1e-15)
    # b = n: every batch is the whole sample, so it has no deviation at all.
    assert s["mean_deviation"] == pytest.approx(0.0, abs=1e-12)


def test_rejects_bad_settings():
    rows, w = regression_sample(n=10, d=2, noise=1.0, delta_norm=0.1, seed=5)
    model = LinearRegression(w)
    with pytest.raises(ValueError, match="batch_size"):
        analyse_gradient_variance(
            model, rows, batch_size=11, num_batches=4, eta=1.0, seed=0, loss_fn=squared_loss
        )
    with pytest.raises(ValueError, match="num_batches"):
        analyse_gradient_variance(
            model, rows, batch_size=2, num_batches=1, eta=1.0, seed=0, loss_fn=squared_loss
        )


def test_language_model_figures_agree_with_the_exact_reference():
    from adloco.algo.exact import exact_estimate, per_sample_grads
    from adloco.config import load_config_dict
    from adloco.model import build_model

    config = load_config_dict(REPO / "config" / "test.yaml")
    model = build_model(model_config(config["model"]), 97, 12, seed=0)
    sample = torch.randint(97, (10, 12), generator=torch.Generator().manual_seed(0))
    s = analyse_gradient_variance(
        model, sample, batch_size=3, num_batches=4, eta=0.8, seed=0, chunk_size=4
    ).summary
    reference = exact_estimate(per_sample_grads(model, sample))
    assert s["trace_cov"] == pytest.approx(reference.trace_cov, rel=1e-5)
    # The token-weighted full gradient equals the mean of per-sequence gradients.
    assert s["grad_sqnorm"] == pytest.approx(reference.batch_grad_sqnorm, rel=1e-5)
    assert s["per_sample_mean_shift_sqnorm"] < 1e-8 * s["grad_sqnorm"]
    assert s["tokens_per_sequence"] == 11
    assert s["parameters"] == sum(p.numel() for p in model.parameters())


def _reference_draw(x: np.ndarray, index: np.ndarray, n: int, eta: float) -> dict:
    """Both estimators of one draw from the group gradients x[index] (deviation form)."""
    g = x[index]  # [M, k, D]
    nodes, k = index.shape
    node_mean = g.mean(1)
    total_mean = node_mean.mean(0)
    k_all, n_all = nodes * k, nodes * k * n
    trace_p = n * ((g - total_mean) ** 2).sum() / (k_all - 1)
    trace_s = n * ((g - node_mean[:, None]) ** 2).sum() / (k_all - nodes)
    grad_s = (k * n * (node_mean**2).sum() - nodes * trace_s) / n_all
    batch_s = trace_s / n_all + max(grad_s, 0.0)
    batch_p = float(total_mean @ total_mean)
    return {
        "trace_cov_pooled": trace_p,
        "grad_sqnorm_pooled": batch_p - trace_p / n_all,
        "batch_grad_sqnorm_pooled": batch_p,
        "norm_test_batch_pooled": trace_p / (eta**2 * batch_p),
        "trace_cov_scalars": trace_s,
        "grad_sqnorm_scalars": grad_s,
        "batch_grad_sqnorm_scalars": batch_s,
        "norm_test_batch_scalars": trace_s / (eta**2 * batch_s),
    }


def test_compare_reductions_against_brute_force_and_in_expectation():
    """Every draw against numpy on the group gradients themselves; the means over
    draws against the exact expectation over subsets of the pool, which is the
    same for both estimators: tr Σ̂ → n·s² and ‖∇F‖²̂ → ‖x̄‖² − s²/K, with s² the
    pool's variance of group gradients (divisor K − 1)."""
    rng = np.random.default_rng(0)
    pool, dim, n, nodes, k, eta = 24, 5, 3, 3, 2, 0.7
    x = rng.normal(0.4, 1.0, (pool, dim)) * rng.uniform(0.5, 2.0, dim)
    x[:4] += 3.0  # a skewed pool
    draws = 4000
    summary, rows = compare_reductions(
        x @ x.T, group_size=n, nodes=nodes, groups_per_node=k, draws=draws, eta=eta, seed=5
    )
    index = draw_partitions(pool, nodes, k, draws, 5)
    assert index.shape == (draws, nodes, k)
    assert all(len(set(i.reshape(-1))) == nodes * k for i in index[:50])
    for r in range(20):
        reference = _reference_draw(x, index[r], n, eta)
        for key, value in reference.items():
            assert rows[r][key] == pytest.approx(value, rel=1e-9), (r, key)
    s2 = float(((x - x.mean(0)) ** 2).sum() / (pool - 1))
    expected = {"trace_cov": n * s2, "grad_sqnorm": float(x.mean(0) @ x.mean(0)) - s2 / pool}
    for name in ("pooled", "scalars"):
        for quantity, target in expected.items():
            values = np.array([row[f"{quantity}_{name}"] for row in rows])
            stderr = values.std(ddof=1) / math.sqrt(draws)
            assert abs(values.mean() - target) < 4 * stderr, (name, quantity)
            assert summary[name][quantity]["mean"] == pytest.approx(values.mean())
            assert summary[name][quantity]["rel_std"] == pytest.approx(
                values.std(ddof=1) / abs(values.mean())
            )
    ratio = summary["std_ratio"]["trace_cov"]
    assert ratio == pytest.approx(
        summary["scalars"]["trace_cov"]["std"] / summary["pooled"]["trace_cov"]["std"]
    )
    assert ratio > 1.0  # fewer degrees of freedom: 6 - 3 = 3 against 6 - 1 = 5
    assert summary["gaussian_std_ratio_trace_cov"] == pytest.approx(math.sqrt(5 / 3))
    # The i.i.d. prediction from the pool's ζ1 = Var E[h | x], ζ2 = Var h, h = ‖x − y‖²/2.
    pairs = [(i, j) for i in range(pool) for j in range(i + 1, pool)]
    h = np.array([((x[i] - x[j]) ** 2).sum() / 2 for i, j in pairs])
    h1 = np.array(
        [
            np.mean([((x[i] - x[j]) ** 2).sum() / 2 for j in range(pool) if j != i])
            for i in range(pool)
        ]
    )
    zeta1, zeta2 = h1.var(), h.var()
    var_pooled = (2 * 4 * zeta1 + zeta2) / (6 * 5)
    var_scalar = (2 * 0 * zeta1 + zeta2) / (3 * 2 * 1)
    assert summary["iid_std_ratio_trace_cov"] == pytest.approx(
        math.sqrt(var_scalar / var_pooled), rel=1e-9
    )
    # Gaussian groups: ζ2 = 4 ζ1, and the prediction is the Gaussian ratio.
    gauss = np.random.default_rng(1).normal(size=(400, 30))
    assert trace_std_ratio_iid(gauss @ gauss.T, 4, 4) == pytest.approx(math.sqrt(15 / 12), rel=0.03)
    assert (summary["groups"], summary["samples"], summary["draws"]) == (6, 18, draws)


def test_analysis_compares_the_reductions_on_its_own_batch_gradients():
    rows, w = regression_sample(n=60, d=4, noise=0.8, delta_norm=0.5, seed=6)
    b, k, seed = 5, 12, 3
    analysis = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=b,
        num_batches=k,
        eta=0.8,
        seed=seed,
        loss_fn=squared_loss,
        chunk_size=60,
        nodes=2,
        groups_per_node=3,
        draws=200,
    )
    # The stage's batches, drawn again: the comparison must use exactly those gradients.
    generator = torch.Generator().manual_seed(seed)
    g = closed_form_grads(rows, w)
    batches = np.stack(
        [g[torch.randperm(60, generator=generator)[:b]].mean(0).numpy() for _ in range(k)]
    )
    summary, draw_rows = compare_reductions(
        batches @ batches.T, group_size=b, nodes=2, groups_per_node=3, draws=200, eta=0.8, seed=4
    )
    assert len(analysis.draws) == 200
    for mine, theirs in zip(analysis.draws, draw_rows, strict=True):
        for key, value in theirs.items():
            assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-12), key
    got = analysis.summary["scalar_vs_pooled"]
    assert got["std_ratio"]["trace_cov"] == pytest.approx(summary["std_ratio"]["trace_cov"], 1e-4)

    # Skipped, with the reason, when a draw needs more groups than there are batches.
    skipped = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=b,
        num_batches=4,
        eta=0.8,
        seed=seed,
        loss_fn=squared_loss,
        nodes=2,
        groups_per_node=3,
    )
    assert "num_batches" in skipped.summary["scalar_vs_pooled"]["skipped"]
    assert skipped.draws == []


def _write_config(tmp_path: Path, seq_len: int) -> Path:
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    raw["data"]["seq_len_tokens"] = seq_len
    raw["model"]["source"] = "config"  # the seeded initial model (no base here)
    raw["variance"] = {"num_batches": 6, "batch_size": 3, "eval_sequences": 12, "eta": 0.8}
    # 2 slots x 2 groups: a draw of 4 of the 6 batch gradients.
    raw["cluster"]["nodes_per_device"] = 1
    raw["train"]["stats_microbatches"] = 2
    raw["train"]["stats_steps"] = 1
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_cli_writes_json_csv_and_figure(tmp_path, tiny_tokenized):
    from adloco.cli import main

    manifest = json.loads((tiny_tokenized / "manifest.json").read_text())
    config_path = _write_config(tmp_path, manifest["seq_len_tokens"])
    out = tmp_path / "variance"
    argv = ["variance", "--config", str(config_path), "--data", str(tiny_tokenized)]
    assert main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "variance.json").read_text())
    assert summary["eval_sequences"] == 12 and summary["batch_size"] == 3
    assert summary["vocab_size"] == manifest["vocab_size"]
    assert summary["trace_cov"] > 0 and summary["grad_sqnorm"] > 0
    assert summary["b_simple"] == pytest.approx(summary["trace_cov"] / summary["grad_sqnorm"])
    with (out / "per_batch.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["batch"]) for r in rows] == list(range(6))
    mean_dev = sum(float(r["deviation"]) for r in rows) / 6
    assert summary["mean_deviation"] == pytest.approx(mean_dev)
    assert (out / "deviations.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    comparison = summary["scalar_vs_pooled"]
    assert (comparison["nodes"], comparison["groups_per_node"]) == (2, 2)
    assert comparison["draws"] == SPREAD_DRAWS
    with (out / "draws.csv").open() as fh:
        draws = list(csv.DictReader(fh))
    assert len(draws) == SPREAD_DRAWS and "norm_test_batch_scalars" in draws[0]
    # Deterministic: the same command gives the same figures.
    assert main([*argv, "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "variance.json").read_text())
    assert again["trace_cov"] == summary["trace_cov"]
    assert again["mean_deviation"] == summary["mean_deviation"]


def test_cli_loads_a_saved_model_and_rejects_bad_inputs(tmp_path, tiny_tokenized):
    from adloco.cli import main
    from adloco.config import load_config_dict
    from adloco.model import build_model

    manifest = json.loads((tiny_tokenized / "manifest.json").read_text())
    config_path = _write_config(tmp_path, manifest["seq_len_tokens"])
    config = load_config_dict(config_path)
    saved = tmp_path / "saved"
    model = build_model(
        model_config(config["model"]), manifest["vocab_size"], manifest["seq_len_tokens"], 0
    )
    model.save_pretrained(saved)
    argv = ["variance", "--config", str(config_path), "--data", str(tiny_tokenized)]
    out = tmp_path / "from-saved"
    assert main([*argv, "--model", str(saved), "--out", str(out)]) == 0
    from_saved = json.loads((out / "variance.json").read_text())
    assert main([*argv, "--out", str(tmp_path / "initial")]) == 0
    initial = json.loads((tmp_path / "initial" / "variance.json").read_text())
    # The saved model is the seed-0 initial model: same figures.
    assert from_saved["trace_cov"] == pytest.approx(initial["trace_cov"], rel=1e-6)
    assert from_saved["model"] == str(saved)
    assert main([*argv, "--model", str(tmp_path / "nothing"), "--out", str(out)]) == 1
    raw = yaml.safe_load(config_path.read_text())
    raw["variance"]["eval_sequences"] = 10**6
    config_path.write_text(yaml.safe_dump(raw))
    assert main([*argv, "--out", str(out)]) == 1
