"""The regime sweep against direct recomputations of the engine fixture's rows."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml
from by_hand import at_target, logged
from results_folder import analysed

from adloco.config import load_config
from adloco.formats.clock import Network, StepTimeCurve, recompute_sim_time_s
from adloco.report.analysis.regime_sweep import (
    clock_models,
    is_linear,
    regime_cells,
    sweep_bandwidths,
)
from adloco.report.analysis.seed_stats import median
from adloco.report.analysis.targets import build_ladder
from adloco.report.settings import ReportSettings

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def sweep(engine_fixture):
    config = load_config(engine_fixture / "config.yaml")
    runs, roles, ladder, settings = analysed(config, engine_fixture / "runs")
    models = clock_models(config, engine_fixture / "calibration")
    cells = regime_cells(runs, roles, ladder.targets, config.cluster, models, settings)
    return config, runs, roles, ladder, models, cells


def test_clock_models_from_the_calibration_file(sweep, engine_fixture):
    _, _, _, _, models, _ = sweep
    by_key = {m.key: m for m in models}
    assert by_key["run"].curves["sim"] == StepTimeCurve.roofline(0.01, 4, update_s=0.001)
    assert by_key["measured"].curves["sim"].fwd_bwd_s == (0.002, 0.004, 0.008)
    import json

    cal = json.loads((engine_fixture / "calibration" / "sim.json").read_text())
    linear = by_key["linear"].curves["sim"]
    # 6 FLOPs per parameter and token, 12 tokens a sequence, 1 TFLOP/s.
    assert linear.pass_s(1) == pytest.approx(6 * cal["model_parameters"] * 12 / 1e12)
    assert is_linear(linear) and not is_linear(by_key["run"].curves["sim"])


def test_default_sweep_is_10_mbit_to_100_gbit(sweep):
    config, *_ = sweep
    bws = sweep_bandwidths(config.cluster.network, ReportSettings.from_section(config.report))
    assert bws[0] == pytest.approx(0.01) and bws[-1] == pytest.approx(100.0)
    assert len(bws) == 9 and any(math.isclose(b, 1.0) for b in bws)


def _direct(runs, name, target, curves, network, sharing):
    out = []
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        times = recompute_sim_time_s(r.rows, curves, network, sharing)
        out.append(at_target(r.rows, target, times))
    return out


def test_own_setting_reproduces_the_logged_time(sweep):
    _, runs, roles, ladder, _, cells = sweep
    own = [c for c in cells if c.own and c.against == "diloco" and c.target == ladder.main]
    assert len(own) == 1
    from_rows = {}
    for name in (roles.adloco, roles.diloco):
        per_seed = []
        for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
            per_seed.append(at_target(r.rows, ladder.main, logged(r.rows, "sim_time_s")))
        from_rows[name] = median(per_seed)
    assert own[0].adloco_median_s == pytest.approx(from_rows[roles.adloco], rel=1e-12)
    assert own[0].baseline_median_s == pytest.approx(from_rows[roles.diloco], rel=1e-12)


@pytest.mark.parametrize("clock", ["linear", "measured"])
@pytest.mark.parametrize("sharing", ["concurrent", "time_slicing"])
def test_cells_equal_a_direct_recomputation(sweep, clock, sharing):
    config, runs, roles, ladder, models, cells = sweep
    curves = next(m for m in models if m.key == clock).curves
    bw = 0.01
    network = Network(bw * 1e9 / 8, config.cluster.network.latency_s)
    for target in ladder.targets:
        cell = next(
            c
            for c in cells
            if (c.clock, c.sharing, c.against, c.target) == (clock, sharing, "diloco", target)
            and math.isclose(c.bandwidth_gbit_s, bw)
        )
        ad = _direct(runs, roles.adloco, target, curves, network, sharing)
        di = _direct(runs, roles.diloco, target, curves, network, sharing)
        assert cell.adloco_median_s == pytest.approx(median(ad), rel=1e-12)
        assert cell.baseline_median_s == pytest.approx(median(di), rel=1e-12)
        # Three seeds paired: the median of the three per-seed ratios.
        ratios = sorted(a / d for a, d in zip(ad, di, strict=True))
        assert cell.effect.estimate == pytest.approx(ratios[1], rel=1e-12)
        assert (cell.effect.interval.low, cell.effect.interval.high) == pytest.approx(
            (ratios[0], ratios[2]), rel=1e-12
        )


def test_best_baseline_cell_uses_the_lowest_median(sweep):
    config, runs, roles, ladder, models, cells = sweep
    curves = next(m for m in models if m.key == "run").curves
    network = Network(1e9 / 8, config.cluster.network.latency_s)
    cell = next(
        c for c in cells
        if (c.clock, c.sharing, c.against, c.target) == ("run", "concurrent", "best", ladder.main)
        and math.isclose(c.bandwidth_gbit_s, 1.0)
    )  # fmt: skip
    medians = {
        n: median(_direct(runs, n, ladder.main, curves, network, "concurrent"))
        for n in roles.all_baselines()
    }
    best = min(medians, key=medians.get)
    assert cell.baseline == best and cell.baseline_median_s == pytest.approx(medians[best])


def test_no_calibration_no_sweep(workspace):
    workspace.run("diloco", {"method": "diloco"}, {0: workspace.single([100, 60])})
    workspace.run("adloco", workspace.FULL_ADLOCO, {0: workspace.pair([90, 50], [95, 55])})
    from adloco.config import load_config as load

    config = load(workspace.write())
    models = clock_models(config, workspace.root / "calibration")
    assert all(m.curves is None and "no calibration file" in m.note for m in models)


def test_a_target_the_report_cannot_test_is_not_testable_in_every_cell(sweep):
    # A unigram perplexity between the ladder's targets: the targets at or above it are not
    # testable, as the report's claims say; the others keep the test's verdict.
    from adloco.report.analysis.claims import NOT_TESTABLE
    from adloco.report.inputs.references import References

    config, runs, roles, ladder, models, _ = sweep
    settings = ReportSettings.from_section(config.report)
    unigram = sorted(ladder.targets)[1] + 0.01
    refs = References({"unigram": unigram}, {}, "")
    checked = build_ladder(runs, roles, settings, None, refs)
    run = [m for m in models if m.key == "run"]
    cells = regime_cells(runs, roles, checked.targets, config.cluster, run, settings, None, checked)
    for c in cells:
        if c.target >= unigram:
            assert (c.verdict, c.reason) == (NOT_TESTABLE, checked.untestable[c.target])
        else:
            assert c.verdict != NOT_TESTABLE and "needs" in c.reason
    assert {c.target >= unigram for c in cells} == {True, False}


def test_claim_1_in_tokens_is_the_median_paired_ratio_by_hand(sweep):
    from adloco.report.analysis.claims import tokens_to_target
    from adloco.report.analysis.ladder import to_target

    config, runs, roles, ladder, _, _ = sweep
    settings = ReportSettings.from_section(config.report)
    found = tokens_to_target(runs, roles, ladder, settings)
    rule = settings.reach_rule
    mine = to_target(runs, roles.adloco, ladder.main, "tokens", rule)
    theirs = to_target(runs, roles.diloco, ladder.main, "tokens", rule)
    assert (found.quantity, found.target, found.baseline) == ("tokens", ladder.main, roles.diloco)
    assert found.subject_values == mine and found.against_values == theirs
    pairs = [mine[s] / theirs[s] for s in sorted(mine) if s in theirs]
    assert all(math.isfinite(r) for r in pairs)
    assert found.effect.estimate == pytest.approx(median(pairs))
    # No DiLoCo: nothing to compare.
    no_diloco = dataclasses.replace(roles, diloco=None)
    assert tokens_to_target(runs, no_diloco, ladder, settings) is None


def test_the_clock_source_in_words_from_the_calibration_files(tmp_path):
    import json

    from adloco.config import config_from_dict
    from adloco.report.analysis.regime_sweep import clock_source

    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    raw["cluster"]["devices"] = [
        {"name": "gpu-like", "memory_gib": 0.05},
        {"name": "roof", "memory_gib": 0.05},
    ]
    config = config_from_dict(raw)
    step = {"model": "measured_record", "record": "config/devices/h.json",
            "record_seq_len_tokens": 512,
            "source": {"gpu_name": "NVIDIA H100 80GB HBM3", "model_parameters": 304_636_928,
                       "dtype": "bfloat16",
                       "provenance": {"shape": "MicroLlama's shape"}}}  # fmt: skip
    (tmp_path / "gpu-like.json").write_text(json.dumps({"device": "gpu-like", "step_time": step}))
    roof = {"model": "roofline", "saturation_batch": 64, "speed_tflops": 0.05}
    (tmp_path / "roof.json").write_text(json.dumps({"device": "roof", "step_time": roof}))
    seq = config.data.seq_len_tokens
    assert clock_source(config, tmp_path) == (
        "gpu-like: an NVIDIA H100 80GB HBM3 at MicroLlama's shape (304,636,928 parameters, 512 "
        f"tokens a sequence, bfloat16), mapped at equal tokens per pass ({seq}-token sequences "
        "here); roof: a roofline flat up to 64 sequences a pass, then 0.05 TFLOP/s"
    )
    (tmp_path / "roof.json").unlink()
    (tmp_path / "gpu-like.json").unlink()
    assert clock_source(config, tmp_path) == ""
