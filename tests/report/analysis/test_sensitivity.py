"""Each verdict under the other choice of every stated rule (report/analysis/sensitivity.py)."""

from __future__ import annotations

import math

import pytest

from adloco.report.analysis.claims import NO_DIFFERENCE, NOT_SUPPORTED, SUPPORTED, evaluate_claims
from adloco.report.analysis.sensitivity import attach_alternatives
from adloco.report.settings import RULES, other_choice

EIGHT = tuple(range(8))


def headline_at_60(workspace, diloco: list[float], adloco: list[float], **report):
    """Claim 1's headline comparison at target 60, every rule's alternative attached,
    for runs whose 8 seeds all follow the given perplexity curves (``report``: its keys,
    between: interpolated unless given)."""
    workspace.run("diloco", {"method": "diloco"}, {s: workspace.single(diloco) for s in EIGHT})
    workspace.run("adloco", workspace.FULL_ADLOCO, {s: workspace.single(adloco) for s in EIGHT})
    runs, roles, ladder, settings = workspace.load([60], **{"between": "interpolated", **report})
    claims = evaluate_claims(runs, roles, ladder, settings)
    attach_alternatives(claims, runs, roles, ladder, settings)
    return claims[0].headline[0]


def test_a_dip_that_returns_does_not_reach_and_the_rule_table_shows_it(workspace):
    # AdLoCo dips to 55 at round 1 and is back at 80 at round 2, under 60 again at round 3.
    # DiLoCo gets to 60 at round 2 and stays. First crossing: adloco 1 s against 2 s
    # (supported); staying below: adloco 3 s against 2 s at round ends (the default model
    # rule for these round-based methods: not supported), 2 + ln(80/60)/ln(80/59) = 2.94 s
    # interpolated (configured here; not supported either).
    head = headline_at_60(workspace, diloco=[70, 60, 58], adloco=[55, 80, 59])
    f = math.log(80 / 60) / math.log(80 / 59)
    assert head.subject_values == {s: pytest.approx(2 + f) for s in EIGHT}
    assert head.verdict == NOT_SUPPORTED
    assert head.alternatives["reached"] == {"value": "first", "verdict": SUPPORTED}
    assert head.alternatives["between"] == {"value": "model", "verdict": NOT_SUPPORTED}
    assert set(head.alternatives) == {"reached", "between", "merged", "communications",
                                      "pairing", "paired_test", "equal_time"}  # fmt: skip
    # Under the default rule the seeds are read at round ends: 3 s.
    assert headline_at_60(
        workspace, [70, 60, 58], [55, 80, 59], between="model"
    ).subject_values == {s: 3.0 for s in EIGHT}


def test_interpolation_separates_runs_that_whole_rounds_tie(workspace):
    # Both reach 60 at round 2, so whole rounds tie (2 s each) and the test cannot tell
    # them apart; interpolated, adloco crosses 60 early in round 2 (from 62 to 50) and
    # diloco late (from 90 to 59.5).
    head = headline_at_60(workspace, diloco=[90, 59.5, 58], adloco=[62, 50, 49])
    ad, di = math.log(62 / 60) / math.log(62 / 50), math.log(90 / 60) / math.log(90 / 59.5)
    assert head.subject_values == {s: pytest.approx(1 + ad) for s in EIGHT}
    assert head.against_values == {s: pytest.approx(1 + di) for s in EIGHT}
    assert head.verdict == SUPPORTED
    assert head.alternatives["between"]["verdict"] != SUPPORTED


@pytest.mark.heavy
def test_every_comparison_gets_the_other_choice_of_every_rule(workspace):
    workspace.two_seed_runs()
    runs, roles, ladder, settings = workspace.load([60])
    claims = evaluate_claims(runs, roles, ladder, settings)
    assert all(c.alternatives == {} for claim in claims for c in claim.comparisons)
    attach_alternatives(claims, runs, roles, ladder, settings)
    compared = [c for claim in claims for c in claim.comparisons]
    assert compared
    for c in compared:
        assert {rule: alt["value"] for rule, alt in c.alternatives.items()} == {
            rule: other_choice(rule, getattr(settings.section, rule)) for rule in RULES
        }
    assert other_choice("reached", "stays") == "first" and other_choice("pairing", "none") == "seed"


def test_a_rule_can_turn_a_verdict_into_no_meaningful_difference(workspace):
    # As above: interpolated, adloco needs (1 + 0.15) / (1 + 0.98) = 0.58 of diloco's time,
    # far beyond the margin (supported). Read at round ends both need 2 s in all eight
    # seeds: every log ratio is 0, within ±log 1.1, and each one-sided test of the TOST has
    # p = 1/256, so the alternative is no meaningful difference.
    head = headline_at_60(workspace, diloco=[90, 59.5, 58], adloco=[62, 50, 49])
    assert head.verdict == SUPPORTED and head.effect.equivalence.p > 0.05
    assert head.alternatives["between"] == {"value": "model", "verdict": NO_DIFFERENCE}
    # The alternatives are verdicts only: the configured evaluation carries the power.
    assert head.power is not None and head.power.pairs == 8
