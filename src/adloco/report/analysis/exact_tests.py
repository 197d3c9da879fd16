"""Exact, distribution-free statistics over a handful of seeds: tests and an interval.

The report compares runs trained with few seeds (8 for the headline runs, 3
for ablations), so nothing here leans on a large-sample approximation:

- :func:`sign_flip_test`: the paired test. Per seed, the effect is the log
  of the ratio AdLoCo / other (below 0: AdLoCo needs less). Under the null
  hypothesis that the two runs are exchangeable within a seed, every sign
  of every effect is equally likely, so the exact null distribution of the
  statistic is that over all 2^n sign patterns (:func:`sign_flip_counts`
  counts them by dynamic programming over the seeds, which gives the same
  counts as listing the patterns; the tests list them). The statistic is
  the sum of the ranks of |effect| on AdLoCo's side (``signed_rank``,
  Wilcoxon) or their count (``sign``). Censoring needs no special case: a
  run that never reaches the target has an infinite value, so its effect is
  +inf or -inf and takes the largest rank; a seed where both are censored
  (or equal) has effect 0, a tie, and is left out of the ranking as
  Wilcoxon prescribes, which the result counts.
- :func:`equivalence_test`: two one-sided tests (TOST) that the effect lies
  within ±margin (a log ratio; ``report.smallest_effect`` m gives
  log(1 + m)): the same sign-flip test of the effects shifted by −margin
  (AdLoCo's side: the effect is below +margin) and by +margin (the other
  side: above −margin). Shifting leaves ±inf as it is, so a censored seed
  always counts against equivalence.
- :func:`median_interval`: the order-statistic interval of the median paired
  ratio, [r_(k), r_(n-k+1)], with its exact coverage
  1 − 2 · P(Binomial(n, ½) ≤ k − 1) (at least that with ties). With few
  seeds only k = 1 is possible: the range over seeds, named so, with its
  coverage; the interval never claims a level it does not have.
- :func:`two_sample_test`: the unpaired alternative (``report.pairing:
  none``): the exact permutation test of the rank sum over every split of
  the pooled values into groups of the two sizes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

STATISTICS = ("signed_rank", "sign")


def log_ratio(subject: float, other: float) -> float:
    """log(subject / other) with censored (inf) values: both inf or equal is a tie (0)."""
    if subject == other:
        return 0.0
    if math.isinf(subject) or other == 0:
        return math.inf
    if math.isinf(other) or subject == 0:
        return -math.inf
    return math.log(subject / other)


def median_of(values: Sequence[float]) -> float:
    """Median, ±inf allowed; NaN when empty or when the two middle values are -inf and +inf."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return math.nan
    if n % 2:
        return ordered[n // 2]
    low, high = ordered[n // 2 - 1], ordered[n // 2]
    if low == high:
        return low
    return (low + high) / 2  # -inf + inf is NaN: the median is undetermined


def midranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of ``values`` (inf ranks last); tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def sign_flip_counts(scores: Sequence[int]) -> Counter:
    """How many of the 2^n sign patterns give each value of the sum of the negated scores."""
    counts: Counter = Counter({0: 1})
    for score in scores:
        step: Counter = Counter()
        for total, ways in counts.items():
            step[total] += ways  # this seed's effect positive: adds nothing
            step[total + score] += ways  # negative: adds its score
        counts = step
    return counts


@dataclass(frozen=True)
class SignFlipTest:
    """The exact paired test of the per-seed effects (log ratios, negative favours AdLoCo)."""

    statistic: str  # signed_rank or sign
    pairs: int  # seeds both runs have
    ties: int  # effects of 0 (equal, or both censored): left out of the ranking
    observed: float  # the statistic: ranks (or count) of the effects on AdLoCo's side
    p_less: float  # P(statistic >= observed): AdLoCo needs less
    p_greater: float  # P(statistic <= observed): AdLoCo needs more

    @property
    def ranked(self) -> int:
        return self.pairs - self.ties

    @property
    def smallest_p(self) -> float:
        """The smallest one-sided p-value the test can give with these pairs."""
        return 2.0**-self.ranked

    def as_dict(self) -> dict:
        return {
            "test": f"exact sign-flip ({self.statistic}), all 2^{self.ranked} sign patterns",
            "statistic": self.statistic,
            "pairs": self.pairs,
            "ties": self.ties,
            "observed": self.observed,
            "p_adloco_less": self.p_less,
            "p_adloco_more": self.p_greater,
            "smallest_p": self.smallest_p,
        }


def sign_flip_test(effects: Sequence[float], statistic: str = "signed_rank") -> SignFlipTest:
    """Exact one-sided p-values of the per-seed effects, both directions.

    Ranks are midranks of |effect| among the non-zero effects (doubled, so
    that the counts stay integers); ``sign`` gives every seed the score 1.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    ranked = [e for e in effects if e != 0]
    if statistic == "sign":
        scores = [2] * len(ranked)
    else:
        scores = [round(2 * r) for r in midranks([abs(e) for e in ranked])]
    observed = sum(s for s, e in zip(scores, ranked, strict=True) if e < 0)
    counts = sign_flip_counts(scores)
    total = sum(counts.values())
    p_less = sum(w for t, w in counts.items() if t >= observed) / total
    p_greater = sum(w for t, w in counts.items() if t <= observed) / total
    return SignFlipTest(
        statistic, len(effects), len(effects) - len(ranked), observed / 2, p_less, p_greater
    )


def shifted(effects: Sequence[float], by: float) -> list[float]:
    """``effects`` plus ``by``; ±inf (censored) stays ±inf."""
    return [e if math.isinf(e) else e + by for e in effects]


@dataclass(frozen=True)
class EquivalenceTest:
    """Two one-sided exact tests that the effect lies within ±``margin`` (log ratios)."""

    margin: float  # log(1 + smallest effect)
    below: SignFlipTest  # effects − margin: p_less tests "effect < +margin"
    above: SignFlipTest  # effects + margin: p_greater tests "effect > −margin"

    @property
    def p_below(self) -> float:
        """p that the effect is below +margin (AdLoCo needs at most 1 + m times as much)."""
        return self.below.p_less

    @property
    def p_above(self) -> float:
        """p that the effect is above −margin (AdLoCo needs at least 1 / (1 + m) as much)."""
        return self.above.p_greater

    @property
    def p(self) -> float:
        """The TOST p-value: equivalence is shown at level α when p <= α."""
        return max(self.p_below, self.p_above)

    @property
    def smallest_p(self) -> float:
        return max(self.below.smallest_p, self.above.smallest_p)

    def as_dict(self) -> dict:
        return {
            "margin_log_ratio": self.margin,
            "p_below_margin": self.p_below,
            "p_above_minus_margin": self.p_above,
            "p": self.p,
            "smallest_p": self.smallest_p,
        }


def equivalence_test(
    effects: Sequence[float], margin: float, statistic: str = "signed_rank"
) -> EquivalenceTest:
    """TOST of the effects against ±``margin``: the sign-flip test of each shifted set."""
    if not margin > 0:
        raise ValueError(f"margin must be positive, got {margin}")
    return EquivalenceTest(
        margin,
        sign_flip_test(shifted(effects, -margin), statistic),
        sign_flip_test(shifted(effects, margin), statistic),
    )


@dataclass(frozen=True)
class OrderInterval:
    """[r_(k), r_(n-k+1)] of n sorted values, covering their median with ``coverage``."""

    low: float | None
    high: float | None
    k: int
    n: int
    coverage: float  # exact for a continuous distribution, at least this with ties
    kind: str  # "order statistics", "range over seeds" or "none" (one value)

    def name(self) -> str:
        """What the interval is, in words, with its exact coverage."""
        if self.kind == "none":
            return "no interval (one seed)"
        pct = f"{100 * self.coverage:.3g} %"
        if self.kind == "range over seeds":
            return f"range over {self.n} seeds (covers the median with {pct})"
        return f"order statistics {self.k} and {self.n - self.k + 1} of {self.n} ({pct} coverage)"

    def as_dict(self) -> dict:
        def clean(v):
            if v is None or math.isnan(v):
                return None
            return str(v) if math.isinf(v) else v

        return {
            "low": clean(self.low),
            "high": clean(self.high),
            "k": self.k,
            "n": self.n,
            "coverage": self.coverage,
            "kind": self.kind,
            "name": self.name(),
        }


def order_coverage(n: int, k: int) -> float:
    """P(X_(k) <= median <= X_(n-k+1)) for n draws: 1 − 2 P(Binomial(n, 1/2) <= k − 1)."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1.0 - 2.0 * tail


def median_interval(values: Sequence[float], confidence: float) -> OrderInterval:
    """The narrowest symmetric order-statistic interval of the median with coverage >= confidence.

    When even the range (k = 1) covers less than ``confidence``, the range is
    returned with its true coverage: too few seeds for the nominal level.
    """
    ordered = sorted(values)
    n = len(ordered)
    if n < 2:
        only = ordered[0] if ordered else None
        return OrderInterval(only, only, 0, n, 0.0, "none")
    k = 1
    while k + 1 <= (n + 1) // 2 and order_coverage(n, k + 1) >= confidence:
        k += 1
    kind = "range over seeds" if k == 1 else "order statistics"
    return OrderInterval(ordered[k - 1], ordered[n - k], k, n, order_coverage(n, k), kind)


@dataclass(frozen=True)
class TwoSampleTest:
    """The exact permutation test of the rank sum of ``subject`` among the pooled values."""

    sizes: tuple[int, int]
    observed: float  # rank sum of the subject's values (midranks)
    p_less: float  # P(rank sum <= observed): the subject's values are smaller
    p_greater: float

    @property
    def smallest_p(self) -> float:
        return 1.0 / math.comb(sum(self.sizes), self.sizes[0])

    def as_dict(self) -> dict:
        return {
            "test": "exact two-sample permutation test of the rank sum (unpaired)",
            "sizes": list(self.sizes),
            "observed": self.observed,
            "p_adloco_less": self.p_less,
            "p_adloco_more": self.p_greater,
            "smallest_p": self.smallest_p,
        }


def two_sample_test(subject: Sequence[float], other: Sequence[float]) -> TwoSampleTest:
    """Exact p-values over all C(n + m, n) splits of the pooled values (counted, not listed)."""
    pooled = list(subject) + list(other)
    scores = [round(2 * r) for r in midranks(pooled)]
    n = len(subject)
    observed = sum(scores[:n])
    # ways[j][s]: subsets of j of the items seen so far whose doubled ranks sum to s.
    ways: list[Counter] = [Counter({0: 1})] + [Counter() for _ in range(n)]
    for score in scores:
        for j in range(n, 0, -1):
            for s, w in ways[j - 1].items():
                ways[j][s + score] += w
    dist = ways[n]
    total = sum(dist.values())
    p_less = sum(w for s, w in dist.items() if s <= observed) / total
    p_greater = sum(w for s, w in dist.items() if s >= observed) / total
    return TwoSampleTest((n, len(other)), observed / 2, p_less, p_greater)
