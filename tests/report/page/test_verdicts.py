"""The page's answer and verdicts (report/page/verdicts.py), on the engine fixture's report."""

from __future__ import annotations

import math
from statistics import NormalDist
from types import SimpleNamespace as NS

import pytest

from adloco.report.analysis.claims import fmt_ratio
from adloco.report.analysis.power import superiority_power
from adloco.report.page.parts import esc
from adloco.report.page.verdicts import answer_section, claims_section, seed_counts


def test_seed_counts_group_runs_by_their_number_of_seeds():
    page = NS(found=NS(seeds={"a": [0, 1], "b": [0, 1], "c": [0]}))
    assert seed_counts(page) == "2 seeds: a, b; 1 seed: c"


def test_the_answer_states_each_claim_once_with_its_verdict(engine_report):
    _, found, page = engine_report
    html = answer_section(page)
    # Each claim twice: its verdict in a sentence, then its full reason folded in details.
    assert html.count("<li>") == 2 * len(found.claims) == 6
    first, folded = html.split("<details>")
    for claim in found.claims:
        assert first.count(f"{claim.verdict}</span>") >= 1
        assert esc(claim.reason) in folded
    # Targets derived from the runs: said first, as a warning.
    assert html.index("class='warning'") < html.index("<ol class='verdicts'>")
    assert "derived from the runs after the fact" in html
    assert "Main target: perplexity 47.2" in html and "3 seeds:" in html


def test_every_headline_comparison_shows_its_ratio_and_verdict(engine_report):
    _, found, page = engine_report
    html = claims_section(page)
    for claim in found.claims:
        for c in claim.headline:
            # A censored median (0: the other run never gets there) is shown as a limit.
            shown = "→ 0" if c.effect.estimate == 0 else f"{fmt_ratio(c.effect.estimate)}×"
            assert shown in html
    assert found.claims[2].headline[0].effect.estimate == 0
    # Claim 1 against DiLoCo: 2.19 x the time to 47.2, not supported.
    assert "2.19×" in html and "simulated time to 47.2" in html


def test_the_power_of_each_comparison_and_the_claims_warnings_are_shown(engine_report):
    _, found, page = engine_report
    head = found.claims[0].headline[0]
    pw = head.power
    # Three paired seeds: the smallest possible p is 1/8 > 0.05, so no power at all, and the
    # warning says so; the seeds needed are those of seeds_for_power at the observed spread.
    assert head.effect.test.smallest_p == 1 / 8 and pw.superiority == 0.0
    # By hand: 4 seeds cannot go below 1/16; with 5 only all five on AdLoCo's side reaches
    # 1/32 <= 0.05, so the power is q^5, q = Φ(log 1.1 / sd) (0.91 at this sd >= 0.8).
    q = NormalDist().cdf(math.log(1.1) / pw.sd)
    assert (
        pw.seeds_needed == 5
        and q**5 >= 0.8
        and q**5
        == pytest.approx(superiority_power(pw.sd, 5, math.log(1.1), 0.05, "signed_rank"), abs=0.01)
    )
    html = claims_section(page)
    assert "<th>power</th>" in html or ">power<" in html
    assert f"0%<small>{pw.seeds_needed} seeds for 80%; equivalence 0%</small>" in html
    answer = answer_section(page)
    warning = found.claims[0].warnings[0]
    assert "the smallest possible p is 0.125, above the level 0.05" in warning
    assert f"{pw.seeds_needed} paired seeds would reach it" in warning
    assert f"<p class='warning'>{esc(warning)}</p>" in answer
    assert "within 1/1.1 and 1.1" in answer  # the rule, in the folded notes


def test_no_meaningful_difference_has_its_own_colour():
    from adloco.report.analysis.claims import NO_DIFFERENCE
    from adloco.report.page.parts import verdict

    assert verdict(NO_DIFFERENCE) == (
        "<span class='verdict no-difference'>no meaningful difference</span>"
    )
