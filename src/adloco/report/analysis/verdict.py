"""One comparison's verdict from its exact tests, by a stated order of precedence.

Part of ``adloco report`` (:func:`judge`, used by :mod:`adloco.report.analysis.claims`
and the regime sweep). A comparison of AdLoCo against another run has the
exact one-sided sign-flip tests in each direction and, paired by seed, the
equivalence test (TOST) against the smallest effect of interest m
(``report.smallest_effect``): AdLoCo's ratio lies between 1 / (1 + m) and
1 + m (:func:`adloco.report.analysis.exact_tests.equivalence_test`). All tests are at
``report.test_level``. The rule, first match wins:

1. **not testable**: no seed in common, or neither run gets there in most
   seeds (the claims add a missing run or target, and a clock linear in
   tokens);
2. **inconclusive** with a single paired seed (no spread to judge by);
3. **no meaningful difference** when equivalence is shown (both one-sided
   tests of the TOST reject); the reason says on which side of 1 the
   median paired ratio lies and whether the superiority test rejected too
   (a difference can be significant and still smaller than m);
4. **supported** when the one-sided p in AdLoCo's favour is at most the level;
5. **not supported** when the one against it is, or the interval of the
   median ratio is at or above 1;
6. **inconclusive** otherwise (the reason says when the seeds are too few for
   the test to reach the level at all).

A verdict therefore cannot turn from *supported* into *no meaningful
difference* by noise alone unless the whole spread of the ratios is within
the margin, which is what an effect too small to matter looks like.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adloco.report.analysis.claims import Effect
    from adloco.report.settings import ReportSettings

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
NO_DIFFERENCE = "no meaningful difference"
INCONCLUSIVE = "inconclusive"
NOT_TESTABLE = "not testable"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, NO_DIFFERENCE, INCONCLUSIVE, NOT_TESTABLE)

QUANTITY_WORDS = {
    "sim_time_s": "simulated time",
    "communications": "communications",
    "trainer_rounds": "trainer rounds",
    "tokens": "tokens",
    "bytes": "bytes",
    "final_val_perplexity": "final perplexity",
    "perplexity_at_time": "perplexity at equal simulated time",
}
PERPLEXITY_QUANTITIES = ("final_val_perplexity", "perplexity_at_time")
# What claim 2's communications are, by ``report.communications``.
COUNTED_WORDS = {
    "messages": "network messages",
    "trainer_rounds": "trainer rounds (the paper's count)",
}


def quantity_words(quantity: str, counted: str = "messages") -> str:
    """The words for a quantity; communications as ``report.communications`` counts them."""
    return COUNTED_WORDS[counted] if quantity == "communications" else QUANTITY_WORDS[quantity]


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for prose: thousands separators for counts, 4 significant digits otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "never"
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def fmt_ratio(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "∞"
    return f"{value:.3g}"


def fmt_p(p: float) -> str:
    return f"{p:.3g}" if p >= 0.001 else f"{p:.1e}"


def _effect_text(effect: Effect, subject: str, other: str, what: str) -> str:
    est = effect.estimate
    if est == 0:
        return f"{other} does not get there in most seeds, {subject} does"
    if math.isinf(est):
        return f"{subject} does not get there in most seeds, {other} does"
    kind = "median paired ratio" if effect.pairing == "seed" else "ratio of medians"
    text = f"{subject} needs {fmt_ratio(est)}× the {what} of {other} ({kind}"
    if effect.interval is not None and effect.interval.kind != "none":
        i = effect.interval
        text += f"; {i.name()} [{fmt_ratio(i.low)}, {fmt_ratio(i.high)}]"
    return text + ")"


def _equivalent(effect: Effect, text: str, p_text: str, level: float) -> str:
    """The reason of a *no meaningful difference* verdict: TOST, side, superiority test."""
    eq, test = effect.equivalence, effect.test
    bound = math.exp(eq.margin)
    side = (
        "below 1 (AdLoCo's side)"
        if effect.estimate < 1
        else "above 1 (the other's side)"
        if effect.estimate > 1
        else "at 1"
    )
    if test.p_less <= level:
        also = f"the test that AdLoCo needs less rejects too (p = {fmt_p(test.p_less)})"
    elif test.p_greater <= level:
        also = f"the test that AdLoCo needs more rejects too (p = {fmt_p(test.p_greater)})"
    else:
        also = "neither one-sided test of a difference rejects"
    return (
        f"{text}; {p_text}: equivalence within {1 / bound:.3g}–{bound:.3g}× shown "
        f"(p = {fmt_p(eq.p)} ≤ {level:g}, two one-sided tests); the median paired ratio "
        f"lies {side}; {also}, but the difference is smaller than the smallest effect of "
        "interest"
    )


def judge(
    effect: Effect,
    subject: str,
    other: str,
    what: str,
    settings: ReportSettings,
    counts: str = "",
) -> tuple[str, str]:
    """Verdict and reason for "``subject`` needs less ``what`` than ``other``"."""
    test = effect.test
    n = len(effect.seeds)
    if effect.pairing == "seed" and n == 0:
        return NOT_TESTABLE, f"{subject} and {other} have no seed in common"
    if 2 * effect.both_censored > n or math.isnan(effect.estimate):
        detail = f" ({counts})" if counts else ""
        return NOT_TESTABLE, f"neither run gets there in most seeds{detail}"
    text = _effect_text(effect, subject, other, what)
    level = settings.section.test_level
    if effect.pairing == "seed":
        p_text = (
            f"exact sign-flip test over {n} paired seeds ({test.statistic}"
            + (f", {test.ties} tied" if test.ties else "")
            + ")"
        )
    else:
        p_text = f"exact two-sample permutation test, {test.sizes[0]} and {test.sizes[1]} seeds"
    if effect.pairing == "seed" and n == 1:
        return INCONCLUSIVE, f"{text}, but a single seed gives no spread to judge the difference by"
    if effect.equivalence is not None and effect.equivalence.p <= level:
        return NO_DIFFERENCE, _equivalent(effect, text, p_text, level)
    p_both = f"p = {fmt_p(test.p_less)} that AdLoCo needs less, {fmt_p(test.p_greater)} more"
    if test.p_less <= level:
        return SUPPORTED, f"{text}; {p_text}: p = {fmt_p(test.p_less)} ≤ {level:g}"
    low = effect.interval.low if effect.interval is not None else None
    if test.p_greater <= level:
        return NOT_SUPPORTED, f"{text}; {p_text}: {p_both} (≤ {level:g} against it)"
    if low is not None and low >= 1:
        return NOT_SUPPORTED, f"{text}; {p_text}: {p_both}; the interval is not below 1"
    reason = f"{text}; {p_text}: {p_both}, neither ≤ {level:g}"
    if test.smallest_p > level:
        reason += (
            f" (with these seeds the test cannot go below p = {fmt_p(test.smallest_p)}: "
            "too few seeds that differ to decide at this level)"
        )
    return INCONCLUSIVE, reason
