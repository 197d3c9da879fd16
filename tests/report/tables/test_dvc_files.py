"""Tests of adloco.report.tables.dvc_files: metrics.json and median_curves.csv, the files DVC shows.

Runs are written by the ``workspace`` fixture (tests/report/conftest.py): one
row per trainer per round, one communication per row, 100 tokens per row,
``sim_s_per_round`` simulated seconds per round.
"""

from __future__ import annotations

import csv
import json
import math

import pytest
from results_folder import report_request

from adloco.report import build_report
from adloco.report.tables.dvc_files import (
    MEDIAN_CURVE_COLUMNS,
    median_curve_rows,
    metrics_document,
    run_numbers,
)

SEEDS = (0, 1, 2)
NO_MERGE = {"method": "adloco", "initial_trainers": 2, "batch_test": "norm", "merge": "none"}


def four_runs(ws) -> None:
    """At target 60, seed s: adloco 1 + 0.1 s seconds and 2 communications (round 1);
    diloco 3 s and 3; localsgd 2 s and 2; the ablation without merging 2 s."""
    ws.run("diloco", {"method": "diloco"}, {s: ws.single([100, 80, 60]) for s in SEEDS})
    ws.run("adloco", ws.FULL_ADLOCO, {s: ws.pair([90, 50], [55, 50]) for s in SEEDS},
           {s: 1.0 + 0.1 * s for s in SEEDS})  # fmt: skip
    ws.run("localsgd", {"method": "localsgd"}, {s: ws.single([100, 60]) for s in SEEDS})
    ws.run("adloco-no-merge", NO_MERGE, {s: ws.pair([90, 70], [95, 60]) for s in SEEDS})


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.heavy
def test_the_report_writes_the_verdicts_and_each_runs_numbers(workspace, tmp_path):
    four_runs(workspace)
    ws = workspace
    out = tmp_path / "report"
    ws.write([60])
    build_report(report_request(ws.root, out))
    metrics = json.loads((out / "metrics.json").read_text())
    # Median paired ratios (seed 1's) and the exact test: all three seeds
    # favour AdLoCo, the most extreme of 2^3 sign patterns.
    assert metrics == {
        "target": 60.0,
        "time": {"ratio": pytest.approx(1.1 / 3), "p": 1 / 8},
        "time_best": {"ratio": pytest.approx(1.1 / 2), "p": 1 / 8},  # localsgd, 2 s
        "comms": {"ratio": pytest.approx(2 / 3), "p": 1 / 8},
        "comms_best": {"ratio": 1.0, "p": 1.0},  # localsgd's 2: three ties
        "ablation": {"adloco-no-merge": {"ratio": pytest.approx(1.1 / 2), "p": 1 / 8}},
        "ppl": {"diloco": 60.0, "adloco": 50.0, "localsgd": 60.0, "adloco-no-merge": 60.0},
        "seeds": {"diloco": 3, "adloco": 3, "localsgd": 3, "adloco-no-merge": 3},
    }
    curves = read_csv(out / "median_curves.csv")
    assert tuple(curves[0]) == MEDIAN_CURVE_COLUMNS
    adloco = [r for r in curves if r["run"] == "adloco"]
    # Run-level perplexity: the better trainer; the median seed's time is seed 1's.
    assert [(r["round"], r["seeds"], r["tokens_total"]) for r in adloco] == [
        ("1", "3", "200.0"),
        ("2", "3", "400.0"),
    ]
    assert [float(r["sim_time_s"]) for r in adloco] == pytest.approx([1.1, 2.2])
    assert [float(r["val_perplexity"]) for r in adloco] == [55.0, 50.0]
    assert sorted({r["run"] for r in curves}) == sorted(ws.settings)


def test_a_claim_that_cannot_be_tested_leaves_its_numbers_out(workspace):
    # Neither run reaches 10: no ratio, no p; no baseline, no ablation.
    workspace.run("diloco", {"method": "diloco"}, {s: workspace.single([100, 80]) for s in SEEDS})
    workspace.run("adloco", workspace.FULL_ADLOCO,
                  {s: workspace.pair([90, 70], [95, 75]) for s in SEEDS})  # fmt: skip
    claims = list(workspace.claims([10]).values())
    summary = [{"run": "diloco", "final_val_perplexity": 80.0}]
    assert metrics_document(summary, claims, 10.0) == {
        "target": 10.0,
        "ppl": {"diloco": 80.0},
        "seeds": {"diloco": 1},
    }
    assert metrics_document([], [], math.nan) == {"ppl": {}, "seeds": {}}


def test_per_run_numbers_are_medians_over_the_seeds_with_a_value():
    summary = [
        {"run": "a", "seed": 0, "final_val_perplexity": 30.0},
        {"run": "a", "seed": 1, "final_val_perplexity": 10.0},
        {"run": "a", "seed": 2, "final_val_perplexity": 20.0},
        {"run": "a", "seed": 3, "final_val_perplexity": 16.0},
        {"run": "b", "seed": 0, "final_val_perplexity": None},
        {"run": "c", "seed": 0, "final_val_perplexity": math.inf},
        {"run": "c", "seed": 1, "final_val_perplexity": 7.0},
    ]
    # a: (16 + 20) / 2; b: no value, no perplexity; c: the infinite one left out.
    assert run_numbers(summary) == {
        "ppl": {"a": 18.0, "c": 7.0},
        "seeds": {"a": 4, "b": 0, "c": 1},
    }


def test_median_curves_count_the_seeds_that_reach_each_round():
    rows = [
        {"run": "a", "seed": s, "round": r, "tokens_total": 100 * r * (s + 1),
         "sim_time_s": 1.0 * r + s, "val_perplexity": 50.0 - r - s}
        for s in range(3) for r in (1, 2) if (s, r) != (2, 2)
    ]  # fmt: skip
    rows.append({"run": "b", "seed": 0, "round": 1, "tokens_total": 5, "sim_time_s": None,
                 "val_perplexity": 9.0})  # fmt: skip
    assert median_curve_rows(rows) == [
        # Round 1: seeds 0, 1, 2; round 2: seed 2 stopped after round 1.
        {"run": "a", "round": 1, "seeds": 3, "tokens_total": 200.0, "sim_time_s": 2.0,
         "val_perplexity": 48.0},
        {"run": "a", "round": 2, "seeds": 2, "tokens_total": 300.0, "sim_time_s": 2.5,
         "val_perplexity": 47.5},
        {"run": "b", "round": 1, "seeds": 1, "tokens_total": 5.0, "sim_time_s": None,
         "val_perplexity": 9.0},
    ]  # fmt: skip
