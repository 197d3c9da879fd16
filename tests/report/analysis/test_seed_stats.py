"""Medians of censored values, ratios and spreads, against hand computations."""

from __future__ import annotations

import math

from adloco.report.analysis.seed_stats import Spread, median, ratio

INF = math.inf


def test_median_puts_censored_seeds_last():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    # One censored seed of three: the median is still measured.
    assert median([5.0, INF, 1.0]) == 5.0
    # Half censored of an even count: the median is not finite.
    assert median([1.0, 2.0, INF, INF]) == INF
    assert math.isnan(median([]))


def test_ratio_of_censored_values():
    assert ratio(2.0, 4.0) == 0.5
    assert ratio(2.0, INF) == 0.0  # the other never got there
    assert ratio(INF, 4.0) == INF
    assert math.isnan(ratio(INF, INF))


def test_spread_counts_censored_seeds_and_never_averages_them():
    s = Spread.of([3.0, INF, 1.0])
    assert (s.median, s.low, s.high, s.reached, s.seeds) == (3.0, 1.0, INF, 2, 3)
    assert s.as_dict() == {"median": 3.0, "low": 1.0, "high": None, "reached": 2, "seeds": 3}
