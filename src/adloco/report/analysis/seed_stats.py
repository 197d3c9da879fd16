"""Summaries over seeds: medians of censored values, ratios of medians, spreads.

The report compares runs that were each trained with several seeds. A value
"to target" of a seed that never reached the target is *censored*: it is
larger than anything the run measured, so it is stored as ``math.inf`` and
never averaged. Medians treat it as larger than every measured value (so the
median is finite while fewer than half the seeds are censored), and a ratio
of medians follows IEEE rules: finite / inf = 0, inf / finite = inf, and
inf / inf is undetermined (NaN). The tests and intervals that verdicts rest
on are in :mod:`adloco.report.analysis.exact_tests`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


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
