"""Verdicts of the paper's claims on result trees built to support, contradict or not decide them,
claim 1 for the tuned AdLoCo and for the paper's configuration.

Runs are written by the ``workspace`` fixture (tests/report/conftest.py): one
row per trainer per round, one communication per row, ``sim_s_per_round``
simulated seconds per round (per seed when a dict), 100 tokens per row.
"""

from __future__ import annotations

import math

import pytest
from results_folder import analysed

from adloco.config import ConfigError
from adloco.report.analysis.claims import (
    INCONCLUSIVE,
    NO_DIFFERENCE,
    NOT_SUPPORTED,
    NOT_TESTABLE,
    PAPER,
    SUPPORTED,
)
from adloco.report.analysis.mechanisms import mechanism_checks
from adloco.report.analysis.sensitivity import attach_alternatives
from adloco.report.analysis.words import short_reason

EIGHT = tuple(range(8))


def diloco(ws, seeds=EIGHT, sim=1.0):
    # Reaches 60 at round 3 and stays in every seed: 3 communications, 3 * sim seconds.
    ws.run("diloco", {"method": "diloco"}, {s: ws.single([100, 80, 60]) for s in seeds}, sim)


def adloco_fast(ws, seeds=EIGHT, sim=None):
    # Reaches 60 at round 1 (min(90, 55)) and stays in every seed: 2 communications.
    sim = sim or {s: 1.0 + 0.1 * s for s in seeds}
    ws.run("adloco", ws.FULL_ADLOCO, {s: ws.pair([90, 50], [55, 50]) for s in seeds}, sim)


def test_supported_with_eight_paired_seeds(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    claims = workspace.claims([60])
    time, comms = claims[1], claims[2]
    head = time.headline[0]
    # Seed s: adloco 1 + 0.1 s seconds against 3: every paired ratio below 1, so the sign
    # pattern is the most extreme of 2^8: p = 1/256.
    assert head.effect.seeds == EIGHT
    assert head.effect.ratios == pytest.approx(tuple((1 + 0.1 * s) / 3 for s in EIGHT))
    # Median of the eight ratios: between seeds 3 and 4, (1.3 / 3 * 1.4 / 3) ** 0.5.
    assert head.effect.estimate == pytest.approx(math.sqrt(1.3 * 1.4) / 3)
    assert head.effect.test.p_less == 1 / 256
    # Eight seeds: the range covers the median with 1 - 2/256.
    assert (head.effect.interval.low, head.effect.interval.high) == pytest.approx((1 / 3, 1.7 / 3))
    assert head.effect.interval.kind == "range over seeds"
    assert time.verdict == SUPPORTED and "p = 0.00391 ≤ 0.05" in head.reason
    # Communications: 2 against 3 in every seed.
    assert comms.headline[0].effect.estimate == pytest.approx(2 / 3)
    assert comms.verdict == SUPPORTED


def test_three_seeds_cannot_reach_the_level_and_say_so(workspace):
    diloco(workspace, seeds=(0, 1, 2))
    adloco_fast(workspace, seeds=(0, 1, 2))
    claims = workspace.claims([60])
    head = claims[1].headline[0]
    assert head.effect.test.p_less == 1 / 8  # all three faster: the best the test can do
    assert claims[1].verdict == INCONCLUSIVE
    assert "cannot go below p = 0.125" in head.reason


def test_one_seed_is_inconclusive_and_says_why(workspace):
    diloco(workspace, seeds=(0,))
    adloco_fast(workspace, seeds=(0,))
    claims = workspace.claims([60])
    assert claims[1].verdict == INCONCLUSIVE
    assert "single seed" in claims[1].reason
    assert claims[1].headline[0].effect.estimate == pytest.approx(1 / 3)
    assert claims[1].headline[0].effect.interval.kind == "none"


def test_slower_in_every_seed_is_not_supported(workspace):
    diloco(workspace, sim=1.0)
    adloco_fast(workspace, sim={s: 4.0 + 0.1 * s for s in EIGHT})
    claims = workspace.claims([60])
    head = claims[1].headline[0]
    assert head.effect.test.p_greater == 1 / 256
    assert claims[1].verdict == NOT_SUPPORTED and "against it" in head.reason
    assert claims[2].verdict == SUPPORTED  # still fewer communications


def test_equal_in_every_seed_makes_no_meaningful_difference(workspace):
    diloco(workspace)
    # Two communications a round, reaching at round 2 and staying: 4 against diloco's 3;
    # diloco with 2 rounds of 2 trainers is not possible, so compare communications 3 vs 3.
    workspace.run(
        "adloco", workspace.FULL_ADLOCO, {s: workspace.single([100, 80, 60]) for s in EIGHT}
    )
    head = workspace.claims([60])[2].headline[0]
    # Every pair ties (3 against 3): no sign to test a difference with. Shifted by ∓log 1.1
    # every log ratio is on the margin's inner side: each one-sided test of the TOST has the
    # most extreme of 2^8 patterns, p = 1/256 <= 0.05: equivalence shown.
    assert head.effect.test.ties == 8 and head.effect.estimate == 1.0
    assert head.effect.equivalence.p == 1 / 256
    assert head.verdict == NO_DIFFERENCE
    assert "lies at 1" in head.reason and "neither one-sided test" in head.reason


def test_equal_in_three_seeds_is_not_supported(workspace):
    diloco(workspace, seeds=(0, 1, 2))
    workspace.run(
        "adloco", workspace.FULL_ADLOCO, {s: workspace.single([100, 80, 60]) for s in range(3)}
    )
    head = workspace.claims([60])[2].headline[0]
    # Three ties: the TOST cannot go below 1/8, so the interval [1, 1] decides.
    assert head.effect.equivalence.p == 1 / 8
    assert head.verdict == NOT_SUPPORTED and "not below 1" in head.reason


def test_mixed_seeds_are_inconclusive(workspace):
    diloco(workspace, sim=1.0)  # 3 s in every seed
    times = [2.0, 3.5, 2.5, 3.2, 2.9, 3.4, 2.8, 3.1]
    adloco_fast(workspace, sim=dict(zip(EIGHT, times, strict=True)))
    head = workspace.claims([60])[1].headline[0]
    assert head.effect.test.p_less > 0.05 and head.effect.test.p_greater > 0.05
    assert head.verdict == INCONCLUSIVE and "neither ≤ 0.05" in head.reason


def test_censored_baseline_supports_and_both_censored_is_not_testable(workspace):
    workspace.run("diloco", {"method": "diloco"}, {s: workspace.single([100, 90]) for s in EIGHT})
    workspace.run(
        "adloco", workspace.FULL_ADLOCO, {s: workspace.pair([90, 50], [95, 55]) for s in EIGHT}
    )
    claims = workspace.claims([60, 40])
    at_60 = next(c for c in claims[1].comparisons if c.target == 60 and c.against == "diloco")
    # diloco never gets to 60: every log ratio is -inf, ratio 0, p = 1/256.
    assert at_60.effect.estimate == 0.0 and at_60.effect.test.p_less == 1 / 256
    assert at_60.verdict == SUPPORTED
    at_40 = claims[1].headline[0]  # main target: the hardest, 40
    assert at_40.target == 40 and at_40.verdict == NOT_TESTABLE
    assert at_40.effect.both_censored == 8 and "neither run gets there" in at_40.reason


def test_missing_diloco_is_not_testable(workspace):
    adloco_fast(workspace)
    claims = workspace.claims([60])
    assert claims[1].verdict == NOT_TESTABLE and "no DiLoCo run" in claims[1].reason


def test_linear_clock_makes_the_time_claim_not_testable(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    claims = workspace.claims([60], clock_reason="the runs' clock charges compute by tokens")
    assert claims[1].verdict == NOT_TESTABLE and "by tokens" in claims[1].reason
    equal_time = next(c for c in claims[1].comparisons if c.quantity == "perplexity_at_time")
    assert equal_time.verdict == NOT_TESTABLE
    assert claims[2].verdict == SUPPORTED  # communications do not depend on the clock


def test_best_baseline_and_every_baseline_are_compared(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    # A stronger baseline: reaches 60 at round 2 (2 communications, 2 s).
    workspace.run(
        "diloco-max-batch",
        {"method": "diloco", "initial_batch": 8},
        {s: workspace.single([70, 60]) for s in EIGHT},
    )
    claims = workspace.claims([60])
    best = next(c for c in claims[2].comparisons if c.against == "best baseline")
    assert best.baseline == "diloco-max-batch"
    assert best.effect.estimate == pytest.approx(1.0)  # 2 against 2 communications
    assert best.verdict == NO_DIFFERENCE  # 2 against 2 in all eight seeds: equivalent
    assert claims[2].verdict == SUPPORTED  # the headline stays against DiLoCo


def test_pairing_by_seed_against_the_unpaired_alternative(workspace):
    # Seeds differ a lot (seed s is 1 + s times slower for both), AdLoCo is 10 % faster in
    # every one: paired, p = 1/256; unpaired, the two samples overlap almost entirely.
    slow = {s: 1.0 + s for s in EIGHT}
    diloco(workspace, sim={s: slow[s] / 3 * 3 for s in EIGHT})  # reaches at round 3: 3 (1 + s)
    adloco_fast(workspace, sim={s: 2.7 * slow[s] for s in EIGHT})  # round 1: 2.7 (1 + s)
    runs, roles, ladder, settings = workspace.load([60])
    from adloco.report.analysis.claims import evaluate_claims

    claims = evaluate_claims(runs, roles, ladder, settings)
    attach_alternatives(claims, runs, roles, ladder, settings)
    head = claims[0].headline[0]
    assert head.verdict == SUPPORTED and head.effect.estimate == pytest.approx(0.9)
    assert head.alternatives["pairing"] == {"value": "none", "verdict": INCONCLUSIVE}
    unpaired = evaluate_claims(runs, roles, ladder, settings.with_rule("pairing", "none"))
    unpaired = unpaired[0].headline[0]
    assert unpaired.effect.pairing == "none" and unpaired.effect.test.p_less > 0.05


def test_ablations_with_fewer_seeds_pair_on_the_common_ones(workspace):
    adloco_fast(workspace)
    # Slower ablation on seeds 0-2 only (reaches 60 at round 2, 2 s a round), ending higher.
    workspace.run(
        "adloco-no-merge",
        {**workspace.FULL_ADLOCO, "merge": "none"},
        {s: workspace.pair([90, 70], [95, 60]) for s in (0, 1, 2)},
        2.0,
    )
    claims = workspace.claims([60])
    abl = claims[3]
    time = next(c for c in abl.comparisons if c.headline)
    assert time.effect.seeds == (0, 1, 2)
    # adloco 1.0, 1.1, 1.2 s against 4 s each: median paired ratio 1.1 / 4; n = 3 cannot
    # reach p <= 0.05 (smallest 1/8).
    assert time.effect.estimate == pytest.approx(1.1 / 4)
    assert time.verdict == INCONCLUSIVE and "3 paired seeds" in time.reason
    final = next(c for c in abl.comparisons if c.quantity == "final_val_perplexity")
    assert final.effect.estimate == pytest.approx(50 / 60)
    assert "1 inconclusive" in abl.reason


def test_ddp_is_an_anchor_compared_but_not_a_baseline(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    # ddp: one trainer, gets to 60 at round 2 in every seed, 10 s a round.
    workspace.run("ddp", {"method": "ddp"}, {s: workspace.single([70, 60]) for s in EIGHT}, 10.0)
    runs, roles, ladder, settings = workspace.load([60])
    assert roles.ddp == "ddp" and roles.role_of("ddp") == "data-parallel anchor"
    assert "ddp" not in roles.all_baselines()
    from adloco.report.analysis.claims import evaluate_claims

    claims = evaluate_claims(runs, roles, ladder, settings)
    anchor = next(c for c in claims[0].comparisons if c.against == "ddp anchor")
    assert anchor.baseline == "ddp" and anchor.subject_values[0] == 1.0
    assert anchor.against_values == {s: 20.0 for s in EIGHT}
    assert not anchor.headline and anchor.verdict == SUPPORTED
    # ddp is not among the baselines: with DiLoCo alone there is no "best baseline" row.
    assert not any(c.against == "best baseline" for c in claims[0].comparisons)


def test_unknown_method_plays_no_role(workspace):
    from adloco.config import load_config
    from adloco.report.settings import assign_roles

    diloco(workspace, seeds=(0,))
    workspace.run("anchor", {"method": "ddp"}, {0: workspace.single([70, 60])})
    config = load_config(workspace.write([60]))
    settings = {n: config.run(n) for n in config.runs}
    fake = {**settings, "mystery": settings["diloco"].__class__(
        **{**settings["diloco"].__dict__, "name": "mystery", "method": "mystery"})}  # fmt: skip
    roles = assign_roles(config.report, fake)
    assert roles.ddp == "anchor" and roles.role_of("mystery") == ""


def test_equal_simulated_time_compares_perplexities(workspace):
    # diloco: 100, 80, 60 at 1, 2, 3 s; adloco: 90/55 then 50/50 at 0.5, 1.0 s (seed-free).
    diloco(workspace, sim=1.0)
    adloco_fast(workspace, sim={s: 0.5 for s in EIGHT})
    claims = workspace.claims([60])
    at_time = next(
        c for c in claims[1].comparisons
        if c.quantity == "perplexity_at_time" and c.against == "diloco"
    )  # fmt: skip
    # Fastest rule: adloco finishes first, at 1.0 s; diloco then holds its round-1 model, 100.
    assert at_time.time_s == 1.0
    assert at_time.subject_values == {s: 50.0 for s in EIGHT}
    assert at_time.against_values == {s: 100.0 for s in EIGHT}
    assert at_time.effect.estimate == pytest.approx(0.5) and at_time.verdict == SUPPORTED
    slowest = workspace.claims([60], equal_time="slowest")[1]
    late = next(c for c in slowest.comparisons if c.quantity == "perplexity_at_time")
    # Slowest rule: at 3 s both have finished; final models 50 against 60.
    assert late.time_s == 3.0 and late.against_values[0] == 60.0


def test_claims_json_has_each_seed(workspace):
    diloco(workspace, seeds=(0, 1))
    adloco_fast(workspace, seeds=(0, 1))
    workspace.run("diloco", {"method": "diloco"},
                  {0: workspace.single([100, 80, 60]), 1: workspace.single([100, 90])})  # fmt: skip
    head = workspace.claims([60])[1].headline[0].as_dict()
    assert head["per_seed"] == [
        {"seed": 0, "subject": 1.0, "against": 3.0, "subject_censored": False,
         "against_censored": False, "ratio": pytest.approx(1 / 3)},
        {"seed": 1, "subject": 1.1, "against": None, "subject_censored": False,
         "against_censored": True, "ratio": 0.0},
    ]  # fmt: skip
    assert head["effect_pairs"] == 2 and head["effect_p_adloco_less"] == 1 / 4


def test_engine_fixture_verdicts_against_direct_numbers(engine_fixture):
    from adloco.config import load_config
    from adloco.report.analysis.claims import evaluate_claims
    from adloco.report.analysis.exact_tests import sign_flip_test
    from adloco.report.analysis.ladder import to_target

    config = load_config(engine_fixture / "config.yaml")
    runs, roles, ladder, settings = analysed(config, engine_fixture / "runs")
    claims = evaluate_claims(runs, roles, ladder, settings)
    for number, quantity in ((1, "sim_time_s"), (2, "communications")):
        head = claims[number - 1].headline[0]
        ad = to_target(runs, "adloco", ladder.main, quantity)
        di = to_target(runs, "diloco", ladder.main, quantity)
        logs = sorted(math.log(ad[s] / di[s]) for s in ad)
        assert head.effect.estimate == pytest.approx(math.exp(logs[1]))
        test = sign_flip_test([math.log(ad[s] / di[s]) for s in ad])
        assert head.effect.test == test
        expected = (
            SUPPORTED
            if test.p_less <= 0.05
            else NOT_SUPPORTED
            if test.p_greater <= 0.05 or head.effect.interval.low >= 1
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


def hand_made(ratios, statistic="signed_rank"):
    """measure + judge on per-seed ratios (AdLoCo / other) of simulated time, other at 10 s."""
    from adloco.config import section
    from adloco.report.analysis.claims import judge, measure
    from adloco.report.settings import ReportSettings

    settings = ReportSettings.from_section(section("report", {"paired_test": statistic}))
    seeds = range(len(ratios))
    mine = {s: 10.0 * r for s, r in zip(seeds, ratios, strict=True)}
    effect = measure(mine, dict.fromkeys(seeds, 10.0), settings)
    return effect, *judge(effect, "adloco", "diloco", "simulated time", settings)


def test_the_verdicts_follow_the_stated_precedence_on_hand_made_ratios():
    # Equivalent: eight ratios within 1/1.1..1.1 on both sides of 1. Shifted by -log 1.1 all
    # are negative, by +log 1.1 all positive: each one-sided test has p = 1/256.
    effect, verdict, reason = hand_made([0.97, 1.02, 0.99, 1.03, 0.98, 1.01, 0.96, 1.04])
    assert (effect.equivalence.p_below, effect.equivalence.p_above) == (1 / 256, 1 / 256)
    assert effect.test.p_less > 0.05 and effect.test.p_greater > 0.05
    assert verdict == NO_DIFFERENCE and "neither one-sided test of a difference rejects" in reason
    assert "within 0.909–1.1× shown" in reason
    # Superior but equivalent: every seed faster, every seed within the margin. Both the
    # superiority test (p = 1/256) and the TOST reject; equivalence comes first.
    effect, verdict, reason = hand_made([0.95, 0.96, 0.97, 0.98, 0.94, 0.93, 0.99, 0.955])
    assert effect.test.p_less == 1 / 256 and effect.equivalence.p == 1 / 256
    assert verdict == NO_DIFFERENCE and "below 1 (AdLoCo's side)" in reason
    assert "the test that AdLoCo needs less rejects too (p = 0.00391)" in reason
    # Superior: every seed faster, three beyond 1/1.1 (log ratio < -0.0953). Shifted by
    # +log 1.1 those three are -0.128, -0.067, -0.033, the others 0.044 to 0.085: the
    # negative ones have ranks 8, 5 and 1 of |d|, T = 14 of 36, P(T <= 14) = 82/256 > 0.05:
    # equivalence not shown; the superiority test has p = 1/256.
    effect, verdict, reason = hand_made([0.8, 0.85, 0.88, 0.95, 0.96, 0.97, 0.98, 0.99])
    assert effect.equivalence.above.observed == 8 + 5 + 1
    assert effect.equivalence.p_above == 82 / 256
    assert effect.equivalence.p > 0.05 and verdict == SUPPORTED
    # Inferior: every seed slower, half beyond 1.1.
    effect, verdict, reason = hand_made([1.2, 1.25, 1.3, 1.15, 1.02, 1.03, 1.04, 1.05])
    assert effect.test.p_greater == 1 / 256 and verdict == NOT_SUPPORTED
    # Inconclusive: spread wider than the margin on both sides.
    effect, verdict, reason = hand_made([0.7, 1.3, 0.8, 1.2, 0.9, 1.1, 0.75, 1.25])
    assert effect.equivalence.p > 0.05 and verdict == INCONCLUSIVE


def test_a_sign_tost_by_hand():
    # Sign statistic, six seeds: five within the margin, one at 1.2 (beyond +margin). Below
    # +margin: 5 of 6 on the negative side, P(count >= 5) = 7/64 > 0.05: not shown.
    effect, verdict, _ = hand_made([1.0, 1.01, 0.99, 1.02, 0.98, 1.2], "sign")
    assert effect.equivalence.p_below == 7 / 64 and effect.equivalence.p_above == 1 / 64
    assert verdict != NO_DIFFERENCE


def test_claims_json_and_power_of_a_comparison(workspace):
    diloco(workspace)
    adloco_fast(workspace)
    claims = workspace.claims([60])
    head = claims[1].headline[0]
    # Log ratios log((1 + 0.1 s) / 3), s = 0..7: their sample SD, and the sign-free power.
    logs = [math.log((1 + 0.1 * s) / 3) for s in EIGHT]
    mean = sum(logs) / 8
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 7)
    assert head.power.sd == pytest.approx(sd) and head.power.pairs == 8
    doc = head.as_dict()
    assert doc["power"]["seeds_needed"] == head.power.seeds_needed
    assert doc["power"]["superiority"] == head.power.superiority
    assert doc["effect_equivalence"]["p"] == head.effect.equivalence.p
    assert claims[1].as_dict()["warnings"] == claims[1].warnings
    # Perplexity comparisons have no margin, so neither an equivalence test nor power.
    at_time = next(c for c in claims[1].comparisons if c.quantity == "perplexity_at_time")
    assert at_time.effect.equivalence is None and at_time.power is None


# Claim 1 answered twice: for the tuned AdLoCo and for the paper's configuration.
def runs(ws, step_reaches_at: int | None = None):
    """diloco reaches 60 at round 3 (3 s); the tuned adloco (one trainer, eta 0.4) at round 2
    (2 s); the paper's configuration (two trainers, eta 0.8) at round 4 (4 s), on eight seeds.
    With ``step_reaches_at``, the step between them (two trainers, eta 0.4) reaches 60 at
    that round."""
    ws.run("diloco", {"method": "diloco"}, {s: ws.single([90, 70, 60]) for s in EIGHT})
    tuned = {**ws.FULL_ADLOCO, "initial_trainers": 1, "eta": 0.4}
    ws.run("adloco", tuned, {s: ws.single([80, 59]) for s in EIGHT})
    ws.run("adloco-paper", {**ws.FULL_ADLOCO, "eta": 0.8},
           {s: ws.pair([95, 80, 70, 59], [96, 81, 71, 62]) for s in EIGHT})  # fmt: skip
    if step_reaches_at is not None:
        curve = [90, 80, 70, 65][: step_reaches_at - 1] + [59]
        ws.run("adloco-2-trainers", {**tuned, "initial_trainers": 2},
               {s: ws.pair(curve, [c + 1 for c in curve]) for s in EIGHT})  # fmt: skip


def test_claim_1_for_the_paper_configuration_names_what_decides_it(workspace):
    runs(workspace)
    claim = workspace.claims([60], paper_adloco="adloco-paper")[1]
    assert claim.verdict == SUPPORTED  # the tuned run: 2 s against 3 s on every seed
    paper = next(c for c in claim.comparisons if c.against == PAPER)
    assert paper.subject == "adloco-paper" and paper.baseline == "diloco"
    assert paper.subject_values == dict.fromkeys(EIGHT, 4.0)
    assert paper.verdict == NOT_SUPPORTED  # 4 s against 3 s on every seed
    assert "In the paper's configuration (adloco-paper): not supported" in claim.reason
    assert "differs from it in eta 0.4 against 0.8, initial_trainers 1 against 2." in claim.reason
    assert not paper.headline  # the claim's verdict is the tuned run's
    # Without a run between them, the two settings decide it together.
    assert claim.decides == (
        "Towards the paper's configuration: tuned adloco: supported; then eta 0.8, "
        "initial_trainers 2 (adloco-paper): not supported; so eta 0.8, initial_trainers 2 "
        "decides it."
    )


@pytest.mark.parametrize(
    ("reaches_at", "decides"),
    [
        (4, "initial_trainers 2 decides it"),  # the step is as slow as the paper's run
        (2, "eta 0.8 decides it"),  # the step is as fast as the tuned run
    ],
)
def test_a_run_between_them_names_the_one_setting_that_decides(workspace, reaches_at, decides):
    runs(workspace, step_reaches_at=reaches_at)
    claim = workspace.claims([60], paper_adloco="adloco-paper")[1]
    step = next(c for c in claim.comparisons if c.against == "diloco, adloco-2-trainers")
    assert step.subject_values == dict.fromkeys(EIGHT, float(reaches_at))
    assert step.beside and not step.headline
    verdict = NOT_SUPPORTED if reaches_at > 3 else SUPPORTED
    assert claim.decides == (
        "Towards the paper's configuration: tuned adloco: supported; then initial_trainers 2 "
        f"(adloco-2-trainers): {verdict}; then eta 0.8 (adloco-paper): not supported; so "
        f"{decides}."
    )
    # Claim 3 shows multi-instance training beside its ablations: the step (the tuned run
    # with the paper's trainers) as the full run against the tuned run without them.
    tuned = {**workspace.FULL_ADLOCO, "initial_trainers": 1, "eta": 0.4}
    workspace.run("adloco-no-adaptive", {**tuned, "batch_test": "none"},
                  {s: workspace.single([80, 70, 59]) for s in EIGHT})  # fmt: skip
    third = workspace.claims([60], paper_adloco="adloco-paper")[3]
    assert third.verdict == SUPPORTED  # its ablation: 3 s against the tuned run's 2 s
    multi = next(c for c in third.comparisons if c.subject == "adloco-2-trainers")
    assert multi.against == "adloco" and multi.beside and not multi.headline
    assert multi.subject_values == dict.fromkeys(EIGHT, float(reaches_at))
    assert multi.against_values == dict.fromkeys(EIGHT, 2.0)
    assert multi.verdict == (NOT_SUPPORTED if reaches_at > 2 else NO_DIFFERENCE)
    assert "Multi-instance training, which the tuned run turns off, beside them" in third.reason
    assert f"adloco-2-trainers needs {reaches_at / 2:.3g}× adloco's simulated time" in (
        short_reason(third)
    )
    # The first screen's sentence: the headline, the steps beside it, what decides it.
    reason = short_reason(claim)
    assert reason.startswith("AdLoCo needs 0.667× diloco's simulated time to 60")
    assert f"adloco-2-trainers needs {reaches_at / 3:.3g}× diloco's simulated time" in reason
    assert reason.endswith(claim.decides)


def test_without_the_role_claim_1_is_answered_once(workspace):
    runs(workspace)
    claim = workspace.claims([60])[1]
    assert all(c.against != PAPER for c in claim.comparisons)
    assert "paper's configuration" not in claim.reason


def test_the_role_must_name_another_adloco_run(workspace):
    runs(workspace)
    with pytest.raises(ConfigError, match="paper_adloco: 'adloco' is the AdLoCo run"):
        workspace.claims([60], paper_adloco="adloco")
    with pytest.raises(ConfigError, match="paper_adloco"):
        workspace.claims([60], paper_adloco="diloco")
