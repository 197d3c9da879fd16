"""Verdicts of the paper's claims on result trees built to support, contradict or not decide them.

Runs are written by the ``workspace`` fixture (tests/report/conftest.py): one
row per trainer per round, one communication per row, ``sim_s_per_round``
simulated seconds per round, 100 tokens per row.
"""

from __future__ import annotations

import math

import pytest

from adloco.report.claims import INCONCLUSIVE, NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED
from adloco.report.mechanisms import mechanism_checks


def diloco(ws, seeds=(0, 1, 2), sim=1.0):
    # Reaches 60 at round 3 in every seed: 3 communications, 3 * sim seconds.
    ws.run("diloco", {"method": "diloco"}, {s: ws.single([100, 80, 60]) for s in seeds}, sim)


def adloco_fast(ws, seeds=(0, 1, 2), sim=None):
    # Reaches 60 at round 1 (min(90, 55)) in every seed: 2 communications.
    sim = sim or {s: 1.0 + 0.1 * s for s in seeds}
    ws.run("adloco", ws.FULL_ADLOCO, {s: ws.pair([90, 50], [55, 50]) for s in seeds}, sim)


def test_supported_with_three_seeds(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    claims = workspace.claims([60])
    time, comms = claims[1], claims[2]
    # Time: adloco 1.0, 1.1, 1.2 s (median 1.1) against 3 s: ratio 1.1 / 3; every resample
    # of adloco's seeds stays between 1.0 and 1.2, so the interval is [1/3, 0.4].
    head = time.headline[0]
    assert head.interval.estimate == pytest.approx(1.1 / 3)
    assert (head.interval.low, head.interval.high) == (pytest.approx(1 / 3), pytest.approx(0.4))
    assert time.verdict == SUPPORTED
    # Communications: 2 against 3 in every seed.
    assert comms.headline[0].interval.estimate == pytest.approx(2 / 3)
    assert comms.verdict == SUPPORTED
    assert "below 1" in comms.reason


def test_one_seed_is_inconclusive_and_says_why(workspace):
    diloco(workspace, seeds=(0,))
    adloco_fast(workspace, seeds=(0,))
    claims = workspace.claims([60])
    assert claims[1].verdict == INCONCLUSIVE
    assert "single seed" in claims[1].reason
    assert claims[1].headline[0].interval.estimate == pytest.approx(1 / 3)


def test_slower_is_not_supported(workspace):
    diloco(workspace, sim=1.0)
    adloco_fast(workspace, sim={0: 4.0, 1: 5.0, 2: 6.0})
    claims = workspace.claims([60])
    assert claims[1].verdict == NOT_SUPPORTED  # 5 s against 3 s: CI [4/3, 2]
    assert claims[2].verdict == SUPPORTED  # still fewer communications


def test_overlapping_seeds_are_inconclusive(workspace):
    diloco(workspace, sim=1.0)  # 3 s in every seed
    adloco_fast(workspace, sim={0: 2.0, 1: 3.5, 2: 2.5})  # 2, 3.5 and 2.5 s
    claims = workspace.claims([60])
    head = claims[1].headline[0]
    assert head.interval.low < 1 < head.interval.high
    assert claims[1].verdict == INCONCLUSIVE and "contains 1" in claims[1].reason


def test_censored_baseline_supports_and_both_censored_is_not_testable(workspace):
    workspace.run("diloco", {"method": "diloco"}, {s: workspace.single([100, 90]) for s in (0, 1)})
    workspace.run(
        "adloco", workspace.FULL_ADLOCO, {s: workspace.pair([90, 50], [95, 55]) for s in (0, 1)}
    )
    claims = workspace.claims([60, 40])
    at_60 = next(c for c in claims[1].comparisons if c.target == 60 and c.against == "diloco")
    assert at_60.verdict == SUPPORTED and at_60.interval.estimate == 0.0
    assert "diloco does not reach the target" in at_60.reason
    at_40 = claims[1].headline[0]  # main target: the hardest, 40
    assert at_40.target == 40 and at_40.verdict == NOT_TESTABLE


def test_missing_diloco_or_target_is_not_testable(workspace):
    adloco_fast(workspace)
    claims = workspace.claims([60])
    assert claims[1].verdict == NOT_TESTABLE and "no DiLoCo run" in claims[1].reason


def test_linear_clock_makes_the_time_claim_not_testable(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    claims = workspace.claims([60], clock_reason="the runs' clock charges compute by tokens")
    assert claims[1].verdict == NOT_TESTABLE and "by tokens" in claims[1].reason
    assert claims[2].verdict == SUPPORTED  # communications do not depend on the clock


def test_best_baseline_and_every_baseline_are_compared(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    # A stronger baseline: reaches 60 at round 2 (2 communications, 2 s).
    workspace.run(
        "diloco-max-batch",
        {"method": "diloco", "initial_batch": 8},
        {s: workspace.single([70, 60]) for s in (0, 1, 2)},
    )
    claims = workspace.claims([60])
    best = next(c for c in claims[2].comparisons if c.against == "best baseline")
    assert best.baseline == "diloco-max-batch"
    assert best.interval.estimate == pytest.approx(1.0)  # 2 against 2 communications
    assert best.verdict == NOT_SUPPORTED
    assert claims[2].verdict == SUPPORTED  # the headline stays against DiLoCo


def test_ablations(workspace):
    adloco_fast(workspace)
    # Slower ablation (reaches 60 at round 2, 2 s a round) and ending higher (60 vs 50).
    workspace.run(
        "adloco-no-merge",
        {**workspace.FULL_ADLOCO, "merge": "none"},
        {s: workspace.pair([90, 70], [95, 60]) for s in (0, 1, 2)},
        2.0,
    )
    claims = workspace.claims([60])
    abl = claims[3]
    time = next(c for c in abl.comparisons if c.headline)
    # adloco median 1.1 s against 4 s.
    assert time.interval.estimate == pytest.approx(1.1 / 4)
    final = next(c for c in abl.comparisons if c.quantity == "final_val_perplexity")
    assert final.interval.estimate == pytest.approx(10.0)  # 60 - 50
    assert final.verdict == SUPPORTED
    assert abl.verdict == SUPPORTED and "1 supported" in abl.reason


def test_engine_fixture_verdicts_against_direct_numbers(engine_fixture):
    from adloco.config import load_config
    from adloco.report.claims import evaluate_claims
    from adloco.report.inputs import load_runs
    from adloco.report.ladder import build_ladder, to_target
    from adloco.report.settings import ReportSettings, assign_roles
    from adloco.report.stats import median

    config = load_config(engine_fixture / "config.yaml")
    runs = load_runs(engine_fixture / "runs", config)
    settings = ReportSettings.from_config(config)
    roles = assign_roles(config, {r.run: r.settings for r in runs})
    ladder = build_ladder(runs, roles, settings)
    claims = evaluate_claims(runs, roles, ladder, settings)
    for number, quantity in ((1, "sim_time_s"), (2, "communications")):
        head = claims[number - 1].headline[0]
        ad = to_target(runs, "adloco", ladder.main, quantity)
        di = to_target(runs, "diloco", ladder.main, quantity)
        assert all(math.isfinite(v) for v in ad + di)  # the derived ladder is reachable
        assert head.interval.estimate == pytest.approx(median(ad) / median(di))
        expected = (
            SUPPORTED
            if head.interval.high < 1
            else NOT_SUPPORTED
            if head.interval.low >= 1
            else INCONCLUSIVE
        )
        assert head.verdict == expected


def test_mechanism_checks_are_apart_from_claims(workspace):
    merge = {"type": "merge", "merged": [0, 1], "kept": 1, "batch": 8}
    workspace.run(
        "adloco",
        workspace.FULL_ADLOCO,
        {
            0: [[{"ppl": 90, "req": 4}, {"ppl": 80, "req": 4, "events": [merge]}],
                [{"ppl": 70, "req": 16, "trainer": 1, "mode": "accumulate"}]],
            1: workspace.pair([90, 70], [80, 60]),
        },
    )  # fmt: skip
    runs, *_ = workspace.load([60])
    checks = {c.mechanism: c for c in mechanism_checks(runs)}
    assert (checks["batch grows"].status, checks["batch grows"].seeds_observed) == ("observed", 1)
    assert checks["trainers merge"].detail == "merges per seed: 1, 0"
    assert checks["switch mode engages"].seeds_observed == 1
