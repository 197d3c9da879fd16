"""Run-level perplexity, time to target and the target default, on hand-made metrics.

Expected numbers are read off tests/report/fixtures/runs/*/seed0/metrics.jsonl
by hand (comments give the working), not recomputed by the code under test.
"""

from __future__ import annotations

import csv
import math

import pytest

from adloco.config import load_config
from adloco.report import build_report
from adloco.report.inputs import load_runs
from adloco.report.summary import (
    assign_roles,
    resolve_target,
    run_level_perplexity,
    summary_rows,
    time_to_target,
)


@pytest.fixture(scope="module")
def fixture_runs(fixtures_dir):
    config = load_config(fixtures_dir / "config.yaml")
    runs = load_runs(fixtures_dir / "runs", config)
    return config, {r.run: r for r in runs}, runs


def test_run_level_perplexity_is_the_lowest_trainer_of_each_round(fixture_runs):
    _, by_run, _ = fixture_runs
    # adloco: round 1 min(120, 110), round 2 min(95, 90), then one trainer.
    assert run_level_perplexity(by_run["adloco"].rows) == {1: 110.0, 2: 90.0, 3: 70.0, 4: 60.0}
    # diloco was not evaluated in round 3 (null): that round is skipped.
    assert run_level_perplexity(by_run["diloco"].rows) == {1: 150.0, 2: 120.0, 4: 92.0}


def test_time_to_target_hand_computed(fixture_runs):
    _, by_run, _ = fixture_runs
    # Target 92. adloco: round 1 is 110 > 92; round 2 is 90 (trainer 1) <= 92. At the end of
    # round 2: tokens_total 2200, communications max(3, 4) = 4, sim_time_s 3.25.
    assert time_to_target(by_run["adloco"].rows, 92.0) == {
        "round": 2,
        "tokens": 2200,
        "communications": 4,
        "sim_time_s": 3.25,
    }
    # adloco-no-merge: round 2 is min(100, 93) = 93 > 92; round 3 is min(91.5, 95) = 91.5.
    # communications max(5, 6) = 6, sim_time_s max(5.0, 4.75) = 5.0.
    assert time_to_target(by_run["adloco-no-merge"].rows, 92.0) == {
        "round": 3,
        "tokens": 3300,
        "communications": 6,
        "sim_time_s": 5.0,
    }
    # diloco reaches exactly 92 in round 4: "at or below" counts equality.
    assert time_to_target(by_run["diloco"].rows, 92.0) == {
        "round": 4,
        "tokens": 4000,
        "communications": 4,
        "sim_time_s": 4.0,
    }
    assert time_to_target(by_run["adloco"].rows, 59.9) is None
    assert time_to_target(by_run["adloco"].rows, None) is None


def test_target_defaults_to_diloco_final_perplexity(fixture_runs):
    config, _, runs = fixture_runs
    target = resolve_target(config, runs, assign_roles(config, runs))
    assert (target.value, target.source) == (92.0, "diloco")


def test_configured_target_wins_over_diloco(fixture_runs):
    config, by_run, runs = fixture_runs
    configured = {**config, "report": {"target_perplexity": 100.0}}
    target = resolve_target(configured, runs, assign_roles(configured, runs))
    assert (target.value, target.source) == (100.0, "config")
    rows = {r["run"]: r for r in summary_rows(runs, target)}
    # 100: adloco round 2 (90), no-merge round 2 (93), diloco round 4 (92; 120 > 100 before).
    assert [rows[n]["round_to_target"] for n in ("adloco", "adloco-no-merge", "diloco")] == [
        2,
        2,
        4,
    ]
    assert rows["adloco-no-merge"]["communications_to_target"] == 4


def test_target_is_the_mean_of_diloco_seeds(workspace):
    # Finals 60 and 70: target 65. Seed 1 never reaches the mean of its own seeds.
    single = workspace.single
    workspace.run("diloco", {"method": "diloco"}, {0: single([90, 60]), 1: single([90, 70])})
    runs, _, target = workspace.load()
    assert target.value == pytest.approx(65.0)
    assert "mean over 2 seeds" in target.note
    reached = {r["seed"]: r["round_to_target"] for r in summary_rows(runs, target)}
    assert reached == {0: 2, 1: None}


def test_no_diloco_run_leaves_target_columns_empty(workspace, tmp_path):
    workspace.run("adloco", workspace.FULL_ADLOCO, {0: workspace.single([90, 60])})
    runs, roles, target = workspace.load()
    assert roles.diloco is None and target.value is None
    assert "no diloco run" in target.note
    build_report(
        workspace.root / "config.yaml",
        workspace.runs_dir,
        workspace.root / "calibration",
        workspace.root / "variance",
        tmp_path / "out",
    )
    with open(tmp_path / "out" / "summary.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    for key in (
        "target_perplexity",
        "round_to_target",
        "tokens_to_target",
        "communications_to_target",
        "sim_time_s_to_target",
    ):
        assert row[key] == ""
    assert "No target perplexity" in (tmp_path / "out" / "index.html").read_text()


def test_summary_csv_from_fixture(tmp_path, fixtures_dir):
    build_report(
        fixtures_dir / "config.yaml",
        fixtures_dir / "runs",
        fixtures_dir / "calibration",
        fixtures_dir / "variance",
        tmp_path,
    )
    with open(tmp_path / "summary.csv", newline="") as fh:
        rows = {r["run"]: r for r in csv.DictReader(fh)}
    assert list(rows) == ["diloco", "adloco", "adloco-no-merge"]
    ad = rows["adloco"]
    # Values of summary.json (wall_time_s 2.3 there, 2.2 in the last metrics row: the
    # engine's summary wins) and the time to target worked out above.
    expected = {
        "seed": "0",
        "method": "adloco",
        "final_val_perplexity": "60.0",
        "best_val_perplexity": "60.0",
        "tokens_total": "5000",
        "communications": "6",
        "bytes_total": "800",
        "sim_time_s": "6.0",
        "wall_time_s": "2.3",
        "rounds": "4",
        "final_trainers": "1",
        "target_perplexity": "92.0",
        "round_to_target": "2",
        "tokens_to_target": "2200",
        "communications_to_target": "4",
        "sim_time_s_to_target": "3.25",
    }
    assert {k: ad[k] for k in expected} == expected
    assert rows["adloco-no-merge"]["final_trainers"] == "2"
    assert rows["diloco"]["sim_time_s_to_target"] == "4.0"
    assert math.isclose(float(rows["adloco-no-merge"]["sim_time_s_to_target"]), 5.0)


def test_curves_csv_holds_the_run_level_curve(fixtures_dir, tmp_path):
    build_report(
        fixtures_dir / "config.yaml",
        fixtures_dir / "runs",
        fixtures_dir / "calibration",
        fixtures_dir / "variance",
        tmp_path / "out",
    )
    with open(tmp_path / "out" / "curves.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["run"] == "diloco"]
    # diloco's fixture: rounds 1, 2, 4 evaluated (150, 120, 92); round 3 has no evaluation.
    assert [
        (r["round"], r["tokens_total"], r["communications"], r["sim_time_s"], r["val_perplexity"])
        for r in rows
    ] == [
        ("1", "1000", "1", "1.0", "150.0"),
        ("2", "2000", "2", "2.0", "120.0"),
        ("4", "4000", "4", "4.0", "92.0"),
    ]
