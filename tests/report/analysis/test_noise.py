"""B_simple along a run from the logged statistics: the engine's value, computed, undetermined."""

from __future__ import annotations

import csv

import pytest
from results_folder import report_request

from adloco.report.analysis.noise import noise_rows, noise_scale, noise_summary


def test_noise_scale_prefers_the_logged_value_and_keeps_undetermined_ones():
    assert noise_scale({"noise_scale": 12.5, "trace_cov": 1.0, "grad_sqnorm": 1.0}) == 12.5
    assert noise_scale({"trace_cov": 6.0, "grad_sqnorm": 0.5}) == 12.0  # tr Σ / ‖∇F‖²
    assert noise_scale({"trace_cov": 6.0, "grad_sqnorm": -0.01}) is None  # not positive
    assert noise_scale({"trace_cov": 6.0, "grad_sqnorm": 0.0}) is None
    assert noise_scale({"noise_scale": None, "trace_cov": 6.0, "grad_sqnorm": 0.5}) is None


def stats(trace, grad, asked, **more):
    return {"trace_cov": trace, "grad_sqnorm": grad, "requested_global": asked, **more}


def test_noise_rows_and_summary(workspace):
    ws = workspace
    smoothed = {"trace_cov": 9.0, "grad_sqnorm": 0.3, "dof": 40, "noise_scale": 30.0}
    rounds = [
        # Round 1: B_simple 10 / 1 = 10 and undetermined (‖∇F‖² < 0).
        [{"ppl": 90, "stats": stats(10.0, 1.0, 40, dof=12)},
         {"ppl": 95, "stats": stats(10.0, -0.2, 40, dof=12)}],
        # Round 2: 12 / 0.5 = 24; round 3: the engine's own value 50 and a smoothed one.
        [{"ppl": 70, "stats": stats(12.0, 0.5, 96, dof=16, decision="grew")}],
        [{"ppl": 60, "stats": {**stats(20.0, 0.5, 200, dof=20), "noise_scale": 50.0,
                               "smoothed": smoothed}}],
    ]  # fmt: skip
    ws.run("adloco", ws.FULL_ADLOCO, {0: rounds})
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([100, 90, 80])})
    runs, *_ = ws.load([60])
    rows = noise_rows(runs, ["adloco"])
    assert [(r["round"], r["noise_scale"], r["determined"]) for r in rows] == [
        (1, 10.0, True), (1, None, False), (2, 24.0, True), (3, 50.0, True),
    ]  # fmt: skip
    assert rows[2]["decision"] == "grew" and rows[3]["smoothed_noise_scale"] == 30.0
    assert rows[0]["val_perplexity"] == 90.0  # the run-level perplexity of the round
    (summary,) = noise_summary(rows)
    # Three rounds: early = round 1 (<= 1), late = round 3 (> 2).
    assert (summary["estimates"], summary["undetermined"]) == (4, 1)
    assert (summary["b_simple_early"], summary["b_simple_late"]) == (10.0, 50.0)
    assert (summary["asked_early"], summary["asked_late"], summary["dof"]) == (40, 200, 14.0)
    assert noise_rows(runs, ["diloco"]) == []  # stats null: nothing to show


@pytest.mark.heavy
def test_noise_csv_on_the_engine_fixture(tmp_path, engine_fixture):
    from adloco.report import build_report

    f = engine_fixture
    build_report(report_request(f, tmp_path))
    with open(tmp_path / "noise_scale.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["run"] for r in rows} == {"adloco", "adloco-no-merge"}
    for r in rows:
        trace, grad = float(r["trace_cov"]), float(r["grad_sqnorm"])
        if grad > 0:
            assert float(r["noise_scale"]) == pytest.approx(trace / grad)
        else:
            assert r["noise_scale"] == "" and r["determined"] == "False"
