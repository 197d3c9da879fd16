"""Run-level perplexity, reaching a target and the per-seed summary, on hand-made metrics.

Expected numbers are read off tests/report/fixtures/runs/*/seed0/metrics.jsonl
by hand (comments give the working), not recomputed by the code under test.
"""

from __future__ import annotations

import csv
import math

import pytest
from results_folder import report_request

from adloco.config import load_config
from adloco.report import build_report
from adloco.report.analysis.summary import (
    TargetCrossing,
    crossing,
    merges,
    optimizer_work,
    per_run_entries,
    reach,
    run_level_perplexity,
)
from adloco.report.inputs.results import load_runs
from adloco.report.settings import ReachRule


@pytest.fixture(scope="module")
def by_run(fixtures_dir):
    config = load_config(fixtures_dir / "config.yaml")
    return {r.run: r for r in load_runs(fixtures_dir / "runs", config)}


def test_run_level_perplexity_is_the_lowest_trainer_of_each_round(by_run):
    # adloco: round 1 min(120, 110), round 2 min(95, 90), then one trainer.
    assert run_level_perplexity(by_run["adloco"].rows) == {1: 110.0, 2: 90.0, 3: 70.0, 4: 60.0}
    # diloco was not evaluated in round 3 (null): that round is skipped.
    assert run_level_perplexity(by_run["diloco"].rows) == {1: 150.0, 2: 120.0, 4: 92.0}


def test_reach_hand_computed(by_run):
    # Target 92. adloco: round 1 is 110 > 92; round 2 is 90 (trainer 1) <= 92. At the end of
    # round 2: tokens_total 2200, communications max(3, 4) = 4, bytes 400, sim_time_s 3.25.
    # Counted as the paper counts (trainer rounds): these hand-made rows log no messages.
    paper = ReachRule("stays", "round", communications="trainer_rounds")
    assert reach(by_run["adloco"].rows, 92.0, paper) == {
        "round": 2,
        "tokens": 2200,
        "communications": 4,
        "trainer_rounds": 4,
        "bytes": 400,
        "sim_time_s": 3.25,
    }
    assert reach(by_run["adloco"].rows, 92.0, ReachRule("stays", "round"))["communications"] is None
    # diloco reaches exactly 92 in round 4: "at or below" counts equality.
    assert reach(by_run["diloco"].rows, 92.0)["round"] == 4
    assert reach(by_run["adloco"].rows, 59.9) is None
    assert reach(by_run["adloco"].rows, None) is None


def test_optimizer_work_per_round_largest_trainer(by_run):
    # inner_steps 2 in each of 4 rounds; the hand-made rows log no inner_lr_sum.
    assert optimizer_work(by_run["adloco"].rows) == {"optimizer_steps": 8, "inner_lr_sum": None}


def test_merges_show_the_merged_model_next(by_run):
    (m,) = merges(by_run["adloco"].rows)
    assert m["round"] == 3 and m["after_round"] == 4 and m["after"] == 60.0


@pytest.mark.heavy
def test_summary_and_curves_csv(tmp_path, fixtures_dir):
    build_report(report_request(fixtures_dir, tmp_path))
    with open(tmp_path / "summary.csv", newline="") as fh:
        rows = {r["run"]: r for r in csv.DictReader(fh)}
    assert list(rows) == ["diloco", "adloco", "adloco-no-merge"]
    ad = rows["adloco"]
    # summary.json values (wall_time_s 2.3 there, 2.2 in the last metrics row: the engine's
    # summary wins), then the main target of the derived ladder.
    assert {k: ad[k] for k in ("final_val_perplexity", "tokens_total", "wall_time_s")} == {
        "final_val_perplexity": "60.0",
        "tokens_total": "5000",
        "wall_time_s": "2.3",
    }
    assert ad["optimizer_steps"] == "8"
    with open(tmp_path / "curves.csv", newline="") as fh:
        curve = [r for r in csv.DictReader(fh) if r["run"] == "diloco"]
    assert [(r["round"], r["val_perplexity"]) for r in curve] == [
        ("1", "150.0"),
        ("2", "120.0"),
        ("4", "92.0"),
    ]
    assert {"ladder.csv", "regimes.csv", "claims.json"} <= {p.name for p in tmp_path.iterdir()}


def test_merges_show_the_merged_model_right_after_the_merge(by_run):
    import copy

    rows = copy.deepcopy(by_run["adloco"].rows)
    event = next(e for r in rows for e in r.get("events") or [] if e.get("type") == "merge")
    event["val_perplexity_merged"] = 71.5
    (m,) = merges(rows)
    assert m["round"] == 3 and m["after_round"] == 3 and m["after"] == 71.5


def test_eval_stderr_pct_of_the_best_final_trainer():
    import math

    from adloco.report.analysis.summary import eval_stderr_pct

    rows = [
        {"round": 1, "trainer": 0, "val_perplexity": 50.0, "val_loss_stderr": 0.5},
        {"round": 2, "trainer": 0, "val_perplexity": 40.0, "val_loss_stderr": 0.02},
        {"round": 2, "trainer": 1, "val_perplexity": 45.0, "val_loss_stderr": 0.03},
    ]
    assert eval_stderr_pct(rows) == 100 * math.expm1(0.02)
    assert eval_stderr_pct([{"round": 1, "trainer": 0, "val_perplexity": 5.0}]) is None


def dip_and_return() -> list[dict]:
    """The issue's case: 661 at round 1, back at 823 at round 2, then down for good."""
    ppl = {1: 661.0, 2: 823.0, 3: 700.0, 4: 640.0, 5: 610.0}
    return [
        {"round": k, "trainer": 0, "val_perplexity": p, "tokens_total": 100 * k,
         "communications": k, "messages_total": 2 * k, "bytes_total": 10 * k,
         "sim_time_s": 2.0 * k}
        for k, p in ppl.items()
    ]  # fmt: skip


def test_a_run_reaches_a_target_when_it_stays_below_it():
    from adloco.report.analysis.summary import round_to_target

    rows = dip_and_return()
    # Target 670: the first crossing is round 1 (661), but round 2 (823) and round 3 (700)
    # climb back above it; from round 4 on every evaluation is below: reached at round 4.
    assert round_to_target(rows, 670.0, "first") == 1
    assert round_to_target(rows, 670.0, "stays") == 4
    assert reach(rows, 670.0, ReachRule("stays", "round"))["sim_time_s"] == 8.0
    # A target the last evaluation is above is never reached under "stays".
    assert round_to_target(rows, 620.0, "first") == 5
    assert round_to_target(rows, 600.0, "stays") is None
    # 823 is the highest: every evaluation is at or below it from round 1.
    assert round_to_target(rows, 823.0, "stays") == 1
    with pytest.raises(ValueError, match="reach rule"):
        round_to_target(rows, 1.0, "sometimes")


def test_quantities_to_target_are_interpolated_in_log_perplexity_between_evaluations():
    rows = dip_and_return()
    # Stays below 670 from round 4 (640); the evaluation before it, round 3, is 700.
    f = math.log(700 / 670) / math.log(700 / 640)  # 0.043804 / 0.089612
    assert f == pytest.approx(0.488802, abs=1e-6)
    interpolated = ReachRule("stays", "interpolated")
    got = reach(rows, 670.0, interpolated)
    assert got == {
        "round": 4,
        "tokens": pytest.approx(300 + 100 * f),
        "communications": pytest.approx(2 * (3 + f)),  # network messages, 2 a round here
        "trainer_rounds": pytest.approx(3 + f),
        "bytes": pytest.approx(30 + 10 * f),
        "sim_time_s": pytest.approx(6.0 + 2.0 * f),
    }
    # Under the default (model) these rows name no per-step method: read at round 4's end.
    assert reach(rows, 670.0)["sim_time_s"] == 8.0
    # The dip that comes back is not the crossing: under "first" it is round 1, the
    # first evaluation, with no earlier point: read at its end.
    assert reach(rows, 670.0, ReachRule("first"))["sim_time_s"] == 2.0
    # A target met exactly at an evaluation is read at that evaluation.
    assert reach(rows, 640.0, interpolated)["sim_time_s"] == pytest.approx(8.0)
    assert crossing(rows, 640.0, interpolated) == TargetCrossing(4, 3, 1.0)
    # A target just below the last evaluation above it is read just after it.
    assert reach(rows, 699.999, interpolated)["sim_time_s"] == pytest.approx(6.0, abs=1e-4)


@pytest.mark.parametrize(
    ("method", "interpolates"),
    [("ddp", True), ("diloco", False), ("adloco", False), ("localsgd", False)],
)
def test_the_model_rule_interpolates_only_where_the_model_changes_every_step(method, interpolates):
    # A round-based method's global model changes only at the outer step: the first model
    # at or below 670 exists at the end of round 4 (8.0 s), not 49 % of the way into it.
    rows = [{**r, "method": method} for r in dip_and_return()]
    f = math.log(700 / 670) / math.log(700 / 640)
    want = 6.0 + 2.0 * f if interpolates else 8.0
    assert reach(rows, 670.0)["sim_time_s"] == pytest.approx(want)
    where = crossing(rows, 670.0)
    assert (where.round, where.before) == ((4, 3) if interpolates else (4, None))
    assert where.fraction == pytest.approx(f if interpolates else 1.0)
    # The alternatives: every method interpolated, or every method at the round's end.
    assert reach(rows, 670.0, ReachRule("stays", "interpolated"))["sim_time_s"] == pytest.approx(
        6.0 + 2.0 * f
    )
    assert reach(rows, 670.0, ReachRule("stays", "round"))["sim_time_s"] == 8.0


def merge_rows() -> list[dict]:
    """Two trainers on one slot each; at round 2 they merge into trainer 0, whose merged model
    (evaluated right after the merge) is 144.7 while its parents were 146.5 and 150."""
    merge = {"type": "merge", "merged": [0, 1], "kept": 0, "val_perplexity_merged": 144.7}
    rows = [
        {"round": 1, "trainer": 0, "val_perplexity": 160.0, "events": []},
        {"round": 1, "trainer": 1, "val_perplexity": 158.0, "events": []},
        {"round": 2, "trainer": 0, "val_perplexity": 146.5, "events": [merge]},
        {"round": 2, "trainer": 1, "val_perplexity": 150.0, "events": []},
        {"round": 3, "trainer": 0, "val_perplexity": 143.0, "events": []},
    ]
    for r in rows:
        k = r["round"]
        r.update(method="adloco", tokens_total=100 * k, communications=2 * k,
                 messages_total=k - 1, bytes_total=10 * k, sim_time_s=1.5 * k)  # fmt: skip
    return rows


def test_a_merge_is_credited_in_its_round():
    rows = merge_rows()
    assert run_level_perplexity(rows) == {1: 158.0, 2: 144.7, 3: 143.0}
    assert run_level_perplexity(rows, "next_evaluation") == {1: 158.0, 2: 146.5, 3: 143.0}
    # Target 145: the merged model reaches it at round 2 (3.0 s, 1 message), where the
    # old rule waited for round 3's evaluation (4.5 s, 2 messages).
    assert reach(rows, 145.0) == {"round": 2, "tokens": 200, "communications": 1,
                                  "trainer_rounds": 4, "bytes": 20, "sim_time_s": 3.0}  # fmt: skip
    late = ReachRule("stays", "model", "next_evaluation")
    assert reach(rows, 145.0, late)["round"] == 3 and reach(rows, 145.0, late)["sim_time_s"] == 4.5
    # A merge whose model was not evaluated leaves the round's rows as they are.
    del rows[2]["events"][0]["val_perplexity_merged"]
    assert run_level_perplexity(rows) == {1: 158.0, 2: 146.5, 3: 143.0}


def test_a_merge_keeps_the_models_outside_it():
    # Three trainers; 0 and 1 merge into a model worse than trainer 2's: trainer 2 is held.
    merge = {"type": "merge", "merged": [0, 1], "kept": 0, "val_perplexity_merged": 150.0}
    rows = [{"round": 1, "trainer": 0, "val_perplexity": 140.0, "events": [merge]},
            {"round": 1, "trainer": 1, "val_perplexity": 141.0, "events": []},
            {"round": 1, "trainer": 2, "val_perplexity": 149.0, "events": []}]  # fmt: skip
    # The best parent (140) no longer exists after the merge.
    assert run_level_perplexity(rows) == {1: 149.0}
    assert run_level_perplexity(rows, "next_evaluation") == {1: 140.0}


def test_the_crossing_skips_a_round_without_evaluation(by_run):
    # diloco: 120 at round 2, no evaluation at round 3, 92 at round 4: target 100 falls
    # between rounds 2 and 4.
    where = crossing(by_run["diloco"].rows, 100.0, ReachRule("stays", "interpolated"))
    f = math.log(120 / 100) / math.log(120 / 92)
    assert (where.round, where.before) == (4, 2) and where.fraction == pytest.approx(f)
    assert where.value({2: 10.0, 3: 15.0, 4: 30.0}) == pytest.approx(10.0 + 20.0 * f)


def test_reach_rules_are_checked():
    with pytest.raises(ValueError, match="between rule"):
        ReachRule("stays", "sometimes")
    with pytest.raises(ValueError, match="reach rule"):
        ReachRule("sometimes")


def test_perplexity_at_time_is_the_last_evaluation_before_it():
    from adloco.report.analysis.summary import perplexity_at_time

    rows = dip_and_return()  # evaluations at 2, 4, 6, 8, 10 s
    assert perplexity_at_time(rows, 1.9) is None  # not evaluated yet
    assert perplexity_at_time(rows, 2.0) == 661.0
    assert perplexity_at_time(rows, 5.0) == 823.0
    assert perplexity_at_time(rows, 99.0) == 610.0  # finished: its final model


def test_per_run_entries_spread_each_number_over_seeds():
    summary = [
        {"run": "a", "final_val_perplexity": 50.0, "tokens_total": 100},
        {"run": "a", "final_val_perplexity": 70.0, "tokens_total": 100},
        {"run": "a", "final_val_perplexity": 60.0, "tokens_total": None},
        {"run": "b", "final_val_perplexity": 80.0},
    ]
    a, b = per_run_entries(summary)
    assert (a["run"], a["seeds"], b["run"], b["seeds"]) == ("a", 3, "b", 1)
    s = a["final_val_perplexity"]
    assert (s.median, s.low, s.high, s.reached, s.seeds) == (60.0, 50.0, 70.0, 3, 3)
    assert a["tokens_total"].seeds == 2  # a missing value is left out, not zero
    assert b["tokens_total"].seeds == 0
