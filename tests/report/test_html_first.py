"""The first screen's verdict sentences (adloco.report.html_first), written out by hand."""

from __future__ import annotations

import math

from adloco.report.claims import Claim, Comparison, Effect
from adloco.report.exact import SignFlipTest
from adloco.report.html_first import short_reason


def comparison(baseline: str, estimate: float | None, *, p: float = 0.0742, seeds: int = 8,
               quantity: str = "sim_time_s", target: float | None = 145.2,
               headline: bool = True) -> Comparison:  # fmt: skip
    effect = None
    if estimate is not None:
        test = SignFlipTest("signed_rank", seeds, 0, 30.0, p, 1 - p)
        effect = Effect("seed", tuple(range(seeds)), (estimate,) * seeds, estimate, None, test, 0)
    return Comparison(1, "adloco", baseline, baseline, quantity, target, {}, {}, effect,
                      "inconclusive", "why", headline)  # fmt: skip


def claim(*comparisons: Comparison) -> Claim:
    return Claim(1, "AdLoCo reaches the target sooner", "inconclusive", "the long reason",
                 list(comparisons))  # fmt: skip


def test_each_headline_comparison_in_one_sentence_with_its_ratio_and_p():
    reason = short_reason(claim(comparison("diloco", 0.9654), comparison("best baseline", 5.012)))
    assert reason == (
        "AdLoCo needs 0.965× diloco's simulated time to 145.2 (median over 8 paired seeds; "
        "p = 0.0742); AdLoCo needs 5.01× best baseline's simulated time to 145.2 (median "
        "over 8 paired seeds; p = 0.0742)."
    )


def test_a_run_that_never_gets_there_and_a_missing_effect_are_said_in_words():
    never = comparison("diloco", 0.0, p=0.0039)
    assert short_reason(claim(never)) == (
        "diloco never gets there (median over 8 paired seeds; p = 0.0039)."
    )
    subject_never = comparison("diloco", math.inf, p=0.0005)
    assert short_reason(claim(subject_never)) == (
        "adloco never gets there, diloco does (median over 8 paired seeds; p = 5.0e-04)."
    )
    assert short_reason(claim(comparison("diloco", None))) == (
        "diloco: no simulated time to 145.2 to compare."
    )


def test_a_perplexity_names_no_target_and_a_claim_without_headline_keeps_its_reason():
    final = comparison("diloco", 0.98, quantity="final_val_perplexity", seeds=2, p=0.25)
    assert short_reason(claim(final)) == (
        "AdLoCo needs 0.98× diloco's final perplexity (median over 2 paired seeds; p = 0.25)."
    )
    assert short_reason(claim(comparison("diloco", 0.9, headline=False))) == "the long reason"
