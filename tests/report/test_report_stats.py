"""Medians of censored values, ratios and the bootstrap interval, against hand computations."""

from __future__ import annotations

import math
from itertools import product

import pytest

from adloco.report.stats import (
    Spread,
    bootstrap_difference,
    bootstrap_ratio,
    median,
    percentile_interval,
    ratio,
)

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


def test_percentile_interval_indices():
    values = list(range(1, 101))  # 1..100
    # alpha 0.1: floor(0.05 * 100) = 5 -> 6th smallest; ceil(0.95 * 100) - 1 = 94 -> 95th.
    assert percentile_interval(values, 0.90) == (6, 95)


def test_bootstrap_ratio_hand_checked():
    # AdLoCo seeds (1, 3), DiLoCo (4, 4). A resample of AdLoCo's two seeds has median 1
    # (p 1/4), 2 (p 1/2) or 3 (p 1/4); DiLoCo's is always 4. Ratio 0.25, 0.5 or 0.75, each
    # end with probability 1/4 > 2.5 %: the 95 % interval is exactly [0.25, 0.75].
    got = bootstrap_ratio([1.0, 3.0], [[4.0, 4.0]], samples=4000, seed=0, confidence=0.95)
    assert got.estimate == 0.5
    assert (got.low, got.high) == (0.25, 0.75)
    assert got.undetermined == 0


def test_bootstrap_ratio_matches_exact_enumeration():
    # Three seeds each: the exact distribution of the ratio of resampled medians, by
    # enumerating all 27 x 27 resamples, and the bootstrap's percentiles must agree.
    a, b = [2.0, 3.0, 7.0], [4.0, 5.0, 6.0]
    exact = sorted(
        median([a[i] for i in ia]) / median([b[j] for j in jb])
        for ia in product(range(3), repeat=3)
        for jb in product(range(3), repeat=3)
    )
    low, high = percentile_interval(exact, 0.8)
    got = bootstrap_ratio(a, [b], samples=20000, seed=1, confidence=0.8)
    assert got.estimate == pytest.approx(3.0 / 5.0)
    # Resampling noise moves a percentile by at most a neighbouring atom of the distribution.
    atoms = sorted(set(exact))
    assert abs(atoms.index(got.low) - atoms.index(low)) <= 1
    assert abs(atoms.index(got.high) - atoms.index(high)) <= 1


def test_bootstrap_is_seeded_and_one_seed_gives_no_interval():
    args = ([1.0, 2.0, 5.0], [[3.0, 4.0, 4.5]], 500)
    assert bootstrap_ratio(*args, seed=7, confidence=0.9) == bootstrap_ratio(
        *args, seed=7, confidence=0.9
    )
    single = bootstrap_ratio([2.0], [[4.0]], 500, 0, 0.95)
    assert single.estimate == 0.5 and single.low is None and single.high is None


def test_best_baseline_takes_the_best_group_per_sample():
    # Two baselines: medians 4 and 10. The best is 4 in every resample here.
    got = bootstrap_ratio([2.0, 2.0], [[10.0, 10.0], [4.0, 4.0]], 300, 0, 0.95)
    assert (got.estimate, got.low, got.high) == (0.5, 0.5, 0.5)


def test_censored_baseline_gives_ratio_zero_and_both_censored_are_left_out():
    got = bootstrap_ratio([2.0, 2.0], [[INF, INF]], 200, 0, 0.95)
    assert (got.estimate, got.low, got.high) == (0.0, 0.0, 0.0)
    both = bootstrap_ratio([INF, INF], [[INF, INF]], 200, 0, 0.95)
    assert math.isnan(both.estimate) and both.undetermined == 200


def test_bootstrap_difference_hand_checked():
    # Medians 5 and 2: difference 3; resampled medians of (4, 6) are 4, 5, 6 and of (2, 2)
    # always 2, so the 95 % interval is [2, 4].
    got = bootstrap_difference([4.0, 6.0], [2.0, 2.0], 4000, 0, 0.95)
    assert (got.estimate, got.low, got.high) == (3.0, 2.0, 4.0)
