"""The exact tests and the order-statistic interval, against hand enumeration and brute force."""

from __future__ import annotations

import math
import random
from itertools import combinations, product

import pytest

from adloco.report.analysis.exact_tests import (
    equivalence_test,
    log_ratio,
    median_interval,
    median_of,
    midranks,
    order_coverage,
    shifted,
    sign_flip_counts,
    sign_flip_test,
    two_sample_test,
)

INF = math.inf


def test_signed_rank_test_hand_enumerated():
    # Three seeds, log ratios -0.5, -0.2, +0.1: ranks of |d| are 3, 2, 1; AdLoCo's side
    # (negative) holds ranks 3 and 2, T = 5. The 8 sign patterns give the sums of ranks on
    # the negative side {} 0, {1} 1, {2} 2, {3} 3, {1,2} 3, {1,3} 4, {2,3} 5, {1,2,3} 6:
    # P(T >= 5) = 2/8, P(T <= 5) = 7/8.
    test = sign_flip_test([-0.5, -0.2, 0.1], "signed_rank")
    assert (test.observed, test.p_less, test.p_greater) == (5.0, 2 / 8, 7 / 8)
    assert (test.pairs, test.ties, test.smallest_p) == (3, 0, 1 / 8)
    # The sign statistic: 2 of 3 negative; P(count >= 2) = (3 + 1) / 8.
    sign = sign_flip_test([-0.5, -0.2, 0.1], "sign")
    assert (sign.observed, sign.p_less, sign.p_greater) == (2.0, 4 / 8, 7 / 8)


def test_censored_pairs_rank_last_and_both_censored_are_ties():
    # Seeds: AdLoCo reaches, the other never (-inf, twice); the other faster (+0.3);
    # neither reaches (0: a tie, left out). |d| ranks among the three: inf, inf -> 2.5 each,
    # 0.3 -> 1. T = 2.5 + 2.5 = 5. Patterns over {2.5, 2.5, 1}: 0, 2.5, 2.5, 1, 5, 3.5,
    # 3.5, 6: P(T >= 5) = 2/8.
    effects = [log_ratio(3.0, INF), log_ratio(2.0, INF), log_ratio(4.0, 3.0), log_ratio(INF, INF)]
    assert effects[:2] == [-INF, -INF] and effects[3] == 0.0
    test = sign_flip_test(effects)
    assert (test.pairs, test.ties, test.observed) == (4, 1, 5.0)
    assert test.p_less == 2 / 8 and test.smallest_p == 1 / 8


def brute_force_p(effects, statistic):
    """List all 2^n sign patterns of the non-zero effects."""
    ranked = [e for e in effects if e != 0]
    scores = [1.0] * len(ranked) if statistic == "sign" else midranks([abs(e) for e in ranked])
    observed = sum(s for s, e in zip(scores, ranked, strict=True) if e < 0)
    sums = [
        sum(s for s, neg in zip(scores, signs, strict=True) if neg)
        for signs in product([False, True], repeat=len(ranked))
    ]
    return (
        sum(v >= observed - 1e-9 for v in sums) / len(sums),
        sum(v <= observed + 1e-9 for v in sums) / len(sums),
    )


@pytest.mark.parametrize("statistic", ["signed_rank", "sign"])
def test_sign_flip_test_equals_listing_every_pattern(statistic):
    rng = random.Random(3)
    for n in range(1, 10):
        # Values on a coarse grid, so ties and infinities occur.
        effects = [rng.choice([-INF, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, INF]) for _ in range(n)]
        test = sign_flip_test(effects, statistic)
        p_less, p_greater = brute_force_p(effects, statistic)
        assert test.p_less == pytest.approx(p_less) and test.p_greater == pytest.approx(p_greater)


def test_equivalence_test_hand_enumerated():
    # Three seeds, log ratios -0.05, 0.02, 0.04, margin 0.1. Below +margin: shifted by -0.1,
    # -0.15, -0.08, -0.06, all negative: the most extreme of 8 patterns, p = 1/8. Above
    # -margin: shifted by +0.1, 0.05, 0.12, 0.14, all positive: P(T <= 0) = 1/8.
    eq = equivalence_test([-0.05, 0.02, 0.04], 0.1)
    assert (eq.p_below, eq.p_above, eq.p, eq.smallest_p) == (1 / 8, 1 / 8, 1 / 8, 1 / 8)
    # One seed beyond the margin on AdLoCo's side (-0.3): shifted by +0.1 it is -0.2, the
    # largest |d| (rank 3) on the negative side, T = 3; patterns with T <= 3: {}, {1}, {2},
    # {3}, {1,2}: 5/8. Below +margin: all negative, 1/8. TOST p = max = 5/8.
    eq = equivalence_test([-0.3, 0.02, 0.04], 0.1)
    assert (eq.p_below, eq.p_above, eq.p) == (1 / 8, 5 / 8, 5 / 8)


def test_shifting_keeps_censored_values():
    assert shifted([-INF, 0.0, 0.5, INF], -0.1) == [-INF, -0.1, 0.4, INF]


def brute_force_tost(effects, margin, statistic):
    """TOST by listing every sign pattern of each shifted set (itertools.product)."""
    below = [e if math.isinf(e) else e - margin for e in effects]
    above = [e if math.isinf(e) else e + margin for e in effects]
    return brute_force_p(below, statistic)[0], brute_force_p(above, statistic)[1]


@pytest.mark.parametrize("statistic", ["signed_rank", "sign"])
def test_equivalence_test_equals_listing_every_pattern(statistic):
    rng = random.Random(5)
    margin = 0.5  # on the grid: shifted values tie with each other and with zero
    for n in range(1, 9):
        effects = [rng.choice([-INF, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, INF]) for _ in range(n)]
        eq = equivalence_test(effects, margin, statistic)
        p_below, p_above = brute_force_tost(effects, margin, statistic)
        assert eq.p_below == pytest.approx(p_below) and eq.p_above == pytest.approx(p_above)
        assert eq.p == pytest.approx(max(p_below, p_above))


def test_a_censored_seed_counts_against_equivalence():
    # Four seeds within the margin and one AdLoCo never reaches (+inf): shifted by -0.1 the
    # +inf stays +inf with the largest rank (5) on the positive side; T = 1 + 2 + 3 + 4 = 10
    # of 15; P(T >= 10) over the 32 patterns: a subset of {1..5} sums to >= 10 when its
    # complement sums to <= 5: {}, {1}, {2}, {3}, {4}, {5}, {1,2}, {1,3}, {1,4}, {2,3}: 10.
    eq = equivalence_test([0.01, 0.02, -0.03, 0.04, INF], 0.1)
    assert eq.below.observed == 10.0 and eq.p_below == 10 / 32
    with pytest.raises(ValueError):
        equivalence_test([0.0], 0.0)


def test_sign_flip_counts_are_all_patterns():
    counts = sign_flip_counts([2, 4, 6])
    assert sum(counts.values()) == 8 and counts == {0: 1, 2: 1, 4: 1, 6: 2, 8: 1, 10: 1, 12: 1}


def test_median_interval_names_what_it_is():
    # Eight seeds: only the range covers the median with >= 95 %: 1 - 2/2^8 = 0.9921875.
    i = median_interval([float(v) for v in range(8)], 0.95)
    assert (i.low, i.high, i.k, i.kind) == (0.0, 7.0, 1, "range over seeds")
    assert i.coverage == 1 - 2 / 256 and "range over 8 seeds" in i.name()
    # Five seeds: even the range covers only 1 - 2/32 = 93.75 %, and says so.
    five = median_interval([5.0, 1.0, 3.0, 2.0, 4.0], 0.95)
    assert (five.low, five.high, five.coverage) == (1.0, 5.0, 1 - 2 / 32)
    assert "93.8 %" in five.name()
    # Twenty seeds: k = 6 covers 1 - 2 (1 + 20 + 190 + 1140 + 4845 + 15504) / 2^20 = 0.9586;
    # k = 7 would cover 0.8847 < 0.95.
    twenty = median_interval([float(v) for v in range(20)], 0.95)
    assert (twenty.k, twenty.low, twenty.high) == (6, 5.0, 14.0)
    assert twenty.coverage == pytest.approx(1 - 2 * 21700 / 2**20)
    assert order_coverage(20, 7) < 0.95 and twenty.kind == "order statistics"
    one = median_interval([2.0], 0.95)
    assert one.kind == "none" and one.low == one.high == 2.0


def test_order_coverage_by_simulation_of_the_binomial():
    # P(X_(k) <= m <= X_(n-k+1)) = P(k <= #below m <= n - k), #below ~ Binomial(n, 1/2).
    n, k = 9, 2
    exact = sum(math.comb(n, j) for j in range(k, n - k + 1)) / 2**n
    assert order_coverage(n, k) == pytest.approx(exact)


def test_median_of_log_ratios_with_censoring():
    assert median_of([-INF, 0.5, 1.0]) == 0.5
    assert median_of([-INF, -INF, 1.0, 2.0]) == -INF
    assert math.isnan(median_of([-INF, INF]))
    assert math.isnan(median_of([]))


def test_two_sample_test_hand_and_brute_force():
    # (1, 2, 3) against (4, 5, 6): the lowest rank sum of C(6, 3) = 20 splits.
    test = two_sample_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (test.p_less, test.p_greater, test.smallest_p) == (1 / 20, 1.0, 1 / 20)
    # With ties and a censored value, against every split listed.
    a, b = [2.0, 3.0, INF], [3.0, 5.0, INF, 7.0]
    pooled = a + b
    ranks = midranks(pooled)
    observed = sum(ranks[:3])
    sums = [sum(ranks[i] for i in pick) for pick in combinations(range(7), 3)]
    got = two_sample_test(a, b)
    assert got.p_less == pytest.approx(sum(s <= observed for s in sums) / len(sums))
    assert got.p_greater == pytest.approx(sum(s >= observed for s in sums) / len(sums))
