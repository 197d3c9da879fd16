"""The page's answer and verdicts (report/html_verdicts.py), on the engine fixture's report."""

from __future__ import annotations

from types import SimpleNamespace as NS

from adloco.report.claims import fmt_ratio
from adloco.report.html_verdicts import answer_section, claims_section, seed_counts
from adloco.report.page import esc


def test_seed_counts_group_runs_by_their_number_of_seeds():
    page = NS(seeds={"a": [0, 1], "b": [0, 1], "c": [0]})
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
