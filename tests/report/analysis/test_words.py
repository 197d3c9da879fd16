"""The findings in words (report/analysis/words.py): the verdict sentences, claim 1's context
and where the wall-clock claim holds, written out by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

from adloco.report.analysis.claims import Claim, Comparison, Effect
from adloco.report.analysis.exact_tests import SignFlipTest
from adloco.report.analysis.regime_sweep import RegimeCell
from adloco.report.analysis.words import clock_words, knee_words, regime_summary, short_reason


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


def knee_cell(s: int, verdict: str, bw: float = 0.1) -> RegimeCell:
    return RegimeCell(145.2, "roofline", "concurrent", bw, "diloco", "diloco", None, verdict,
                      1.0, 2.0, False, s, 0.001)  # fmt: skip


def found(cells: list[RegimeCell], tokens: Comparison | None = None) -> SimpleNamespace:
    """What claim 1's words read of the findings: the regime sweeps and the clock."""
    sweeps = SimpleNamespace(
        grid=SimpleNamespace(cells=cells), tokens=tokens,
        clock_source="cpu-sim: an H100 at MicroLlama's shape, mapped at equal tokens per pass",
    )  # fmt: skip
    clock = {"bandwidth_gbit_s": 0.1, "slot_sharing": "concurrent"}
    return SimpleNamespace(regimes=sweeps, clock=clock)


def test_claim_1_names_its_clock_gives_tokens_and_the_knee_where_its_verdict_changes():
    cells = [knee_cell(16, "not supported"), knee_cell(32, "inconclusive"),
             knee_cell(64, "inconclusive"), knee_cell(16, "supported", bw=1.0)]  # fmt: skip
    tokens = comparison("diloco", 1.0312, quantity="tokens", p=0.6523)
    tokens.verdict = "not supported"
    assert clock_words(found(cells, tokens)) == (
        "The clock: cpu-sim: an H100 at MicroLlama's shape, mapped at equal tokens per pass. "
        "In tokens, which no clock enters: AdLoCo needs 1.03× diloco's tokens to 145.2 (median "
        "over 8 paired seeds; p = 0.652), not supported. "
        "On the regime map's rooflines at 0.1 Gbit/s (knees of 16 to 64 sequences a pass), the "
        "verdict changes between knees: not supported at 16, inconclusive at 32."
    )


def test_no_change_in_the_swept_range_is_said_and_nothing_swept_says_nothing():
    same = [knee_cell(s, "inconclusive") for s in (1, 2, 4)]
    assert knee_words(found(same)) == (
        "On the regime map's rooflines at 0.1 Gbit/s (knees of 1 to 4 sequences a pass), no knee "
        "in the swept range changes the verdict (inconclusive at every one)."
    )
    assert knee_words(found([])) == ""
    # No tokens comparison: the clock and the knee alone.
    assert clock_words(found(same)).startswith("The clock: cpu-sim") and "tokens," not in (
        clock_words(found(same))
    )


def test_no_meaningful_difference_says_the_equivalence_p():
    # Eight seeds all at 0.98 with margin log 1.1: each one-sided test of the TOST has every
    # shifted value on its side, p = 1/256.
    c = comparison("diloco", 0.98)
    c.effect = Effect("seed", tuple(range(8)), (0.98,) * 8, 0.98, None, c.effect.test, 0,
                      (math.log(0.98),) * 8, math.log(1.1), (False,) * 8)  # fmt: skip
    c.verdict = "no meaningful difference"
    assert short_reason(claim(c)) == (
        "AdLoCo needs 0.98× diloco's simulated time to 145.2 (median over 8 paired seeds; "
        "p = 0.0742; within 1.1× either way: p = 0.00391)."
    )


def test_the_regime_sentence_names_one_bandwidth_once_and_what_the_failures_are():
    from types import SimpleNamespace as NS

    def cell(bandwidth, verdict, sharing="concurrent"):
        return NS(target=100.0, against="diloco", network=None, clock="run", sharing=sharing,
                  bandwidth_gbit_s=bandwidth, verdict=verdict)  # fmt: skip

    cells = [cell(0.01, "supported"), cell(0.1, "inconclusive"), cell(1.0, "not supported")]
    cells += [cell(0.01, "supported", "time_slicing"), cell(0.1, "supported", "time_slicing")]
    regimes = NS(cells=cells, models=[NS(key="run", label="the runs' own curve")])
    text = regime_summary(NS(regimes=regimes, ladder=NS(main=100.0)),
                          NS(section=NS(test_level=0.05)))  # fmt: skip
    assert "concurrent: at 10 Mbit/s (AdLoCo slower by the same test at 1 of 3 bandwidths)" in text
    assert (
        "time slicing: at every bandwidth;" not in text
        and "time slicing: at every bandwidth." in text
    )
