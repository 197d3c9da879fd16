"""Tests of adloco.variance.experiment: the command on the tiny data set, the fixed sample,
the model it starts from."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from adloco.config import load_config
from adloco.model.llama import build_model
from adloco.variance import SPREAD_DRAWS, load_model
from adloco.variance.experiment import sample_indices

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("one_thread")


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

    manifest = json.loads((tiny_tokenized / "manifest.json").read_text())
    config_path = _write_config(tmp_path, manifest["seq_len_tokens"])
    config = load_config(config_path)
    saved = tmp_path / "saved"
    model = build_model(config.model, manifest["vocab_size"], manifest["seq_len_tokens"], 0)
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


def test_sample_indices_are_a_sorted_seeded_draw():
    indices = sample_indices(5, 20, seed=3, data="d")
    expected = np.sort(np.random.default_rng(3).choice(20, size=5, replace=False))
    assert indices.tolist() == expected.tolist()
    assert len(set(indices.tolist())) == 5 and 0 <= indices.min() and indices.max() < 20
    assert sample_indices(20, 20, seed=0, data="d").tolist() == list(range(20))
    with pytest.raises(
        ValueError, match="variance.eval_sequences is 21, the train split of d has 20"
    ):
        sample_indices(21, 20, seed=0, data="d")


def test_load_model_refuses_a_missing_folder_and_a_small_vocabulary(tmp_path):
    config = load_config(REPO / "config" / "test.yaml")
    initial = load_model(None, config.model, 97, 12, seed=0)
    again = build_model(config.model, 97, 12, 0)
    assert all(
        (a == b).all() for a, b in zip(initial.parameters(), again.parameters(), strict=True)
    )
    with pytest.raises(FileNotFoundError, match="not a saved model folder"):
        load_model(str(tmp_path / "nothing"), config.model, 97, 12, seed=0)
    initial.save_pretrained(tmp_path / "saved")
    loaded = load_model(str(tmp_path / "saved"), config.model, 97, 12, seed=0)
    assert loaded.config.vocab_size == 97
    with pytest.raises(ValueError, match="vocabulary 97, the data needs 98"):
        load_model(str(tmp_path / "saved"), config.model, 98, 12, seed=0)
