"""Statistics over seeds: medians of censored values and bootstrap confidence intervals.

The report compares runs that were each trained with several seeds. A value
"to target" of a seed that never reached the target is *censored*: it is
larger than anything the run measured, so it is stored as ``math.inf`` and
never averaged. Medians treat it as larger than every measured value (so the
median is finite while fewer than half the seeds are censored), and a ratio
of medians follows IEEE rules: finite / inf = 0, inf / finite = inf, and
inf / inf is undetermined (NaN).

:func:`bootstrap_ratio` gives a ratio of medians (run A over the best of a
group of runs B) with a percentile bootstrap interval: each sample draws every
run's seeds with replacement, independently per run (seeds of different runs
are not paired), from a seeded generator, so the same inputs give the same
interval. docs/report.md states the rule and its limits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def median(values: Sequence[float]) -> float:
    """Median with censored (inf) values above every measured one; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return float(ordered[mid])
    low, high = ordered[mid - 1], ordered[mid]
    if math.isinf(high):
        return math.inf
    return (low + high) / 2


def ratio(a: float, b: float) -> float:
    """a / b with censored values: finite/inf = 0, inf/finite = inf, inf/inf = NaN."""
    if math.isinf(a) and math.isinf(b):
        return math.nan
    if math.isinf(b):
        return 0.0
    if math.isinf(a):
        return math.inf
    if b == 0:
        return math.inf if a > 0 else math.nan
    return a / b


@dataclass(frozen=True)
class Spread:
    """Median, range and count of a quantity over seeds; censored seeds counted apart."""

    median: float  # inf: at least half the seeds censored
    low: float
    high: float  # inf: some seed censored
    reached: int
    seeds: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        measured = [v for v in values if math.isfinite(v)]
        return cls(
            median(values),
            min(measured) if measured else math.inf,
            max(values) if values else math.nan,
            len(measured),
            len(values),
        )

    def as_dict(self) -> dict:
        return {k: (None if not math.isfinite(v) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Interval:
    """A ratio of medians over seeds with its bootstrap confidence interval."""

    estimate: float
    low: float | None  # None: not computed (a run with a single seed)
    high: float | None
    confidence: float
    samples: int
    undetermined: int  # bootstrap samples whose ratio was inf / inf, left out of the interval

    def as_dict(self) -> dict:
        def clean(v):
            return None if v is None or math.isnan(v) else (str(v) if math.isinf(v) else v)

        return {
            "estimate": clean(self.estimate),
            "low": clean(self.low),
            "high": clean(self.high),
            "confidence": self.confidence,
            "bootstrap_samples": self.samples,
            "undetermined_samples": self.undetermined,
        }


def percentile_interval(values: Sequence[float], confidence: float) -> tuple[float, float]:
    """Empirical percentile interval: the ⌊αB/2⌋-th and ⌈(1 − α/2)B⌉-th of B sorted values.

    Indices are 0-based into the sorted values: low = s[floor(α/2 · B)],
    high = s[ceil((1 − α/2) · B) − 1], α = 1 − confidence.
    """
    ordered = sorted(values)
    n = len(ordered)
    alpha = 1.0 - confidence
    # The 1e-9 keeps 1 - 0.9 = 0.0999... from moving an index by one.
    low = ordered[min(n - 1, int(math.floor(alpha / 2 * n + 1e-9)))]
    high = ordered[max(0, int(math.ceil((1 - alpha / 2) * n - 1e-9)) - 1)]
    return low, high


def _median_rows(values: np.ndarray) -> np.ndarray:
    """Median of each row, censored (inf) values sorting last."""
    ordered = np.sort(values, axis=1)
    n = ordered.shape[1]
    if n % 2:
        return ordered[:, n // 2]
    low, high = ordered[:, n // 2 - 1], ordered[:, n // 2]
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(high), np.inf, (low + high) / 2)


def bootstrap_ratio(
    numerator: Sequence[float],
    denominators: Sequence[Sequence[float]],
    samples: int,
    seed: int,
    confidence: float,
) -> Interval:
    """median(numerator) / min over the groups of median(group), with a bootstrap interval.

    With one denominator group this is the plain ratio of medians. With several
    (the "best baseline"), each bootstrap sample takes the best group of that
    sample, so the interval includes the uncertainty of which one is best.
    The interval is None when any run has a single seed: resampling one value
    says nothing about the spread.
    """
    best = min((median(d) for d in denominators), default=math.nan)
    estimate = ratio(median(numerator), best)
    if len(numerator) < 2 or any(len(d) < 2 for d in denominators):
        return Interval(estimate, None, None, confidence, 0, 0)
    rng = np.random.default_rng(seed)

    def draw(values: Sequence[float]) -> np.ndarray:
        data = np.asarray(values, dtype=float)
        picks = rng.integers(0, len(data), size=(samples, len(data)))
        return _median_rows(data[picks])

    top = draw(numerator)
    bottom = np.min(np.stack([draw(d) for d in denominators]), axis=0)
    ratios = [ratio(float(a), float(b)) for a, b in zip(top, bottom, strict=True)]
    determined = [r for r in ratios if not math.isnan(r)]
    if not determined:
        return Interval(estimate, math.nan, math.nan, confidence, samples, samples)
    low, high = percentile_interval(determined, confidence)
    return Interval(estimate, low, high, confidence, samples, samples - len(determined))


def bootstrap_difference(
    a: Sequence[float], b: Sequence[float], samples: int, seed: int, confidence: float
) -> Interval:
    """median(a) − median(b) with a bootstrap interval (finite values only)."""
    estimate = median(a) - median(b)
    if len(a) < 2 or len(b) < 2:
        return Interval(estimate, None, None, confidence, 0, 0)
    rng = np.random.default_rng(seed)
    draws = []
    for values in (a, b):
        data = np.asarray(values, dtype=float)
        draws.append(_median_rows(data[rng.integers(0, len(data), size=(samples, len(data)))]))
    diffs = [float(x - y) for x, y in zip(draws[0], draws[1], strict=True)]
    determined = [d for d in diffs if not math.isnan(d)]
    low, high = percentile_interval(determined, confidence)
    return Interval(estimate, low, high, confidence, samples, samples - len(determined))
