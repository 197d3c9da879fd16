"""Power of the exact paired tests: closed forms, and Monte Carlo against listing every pattern."""

from __future__ import annotations

import math
from itertools import product
from statistics import NormalDist

import numpy as np
import pytest

from adloco.report.analysis.power import (
    GENERATOR_SEED,
    MOST_SEEDS,
    critical_value,
    equivalence_power,
    finite_sd,
    power_of,
    seeds_for_power,
    superiority_power,
)

MARGIN = math.log(1.1)


def binomial_tail(n: int, q: float, k: int) -> float:
    return sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k, n + 1))


def test_critical_values_by_hand():
    # Sign, 8 seeds: P(count >= 7) = (8 + 1) / 256 = 0.035 <= 0.05 < P(count >= 6) = 37/256.
    assert critical_value(8, 0.05, "sign") == 2 * 7
    # Signed ranks, 8 seeds: the lower tail P(W <= 5) = (1+1+1+2+2+3)/256 = 0.039, P(W <= 6)
    # = 14/256 = 0.055; by symmetry the upper critical value is 36 - 5 = 31.
    assert critical_value(8, 0.05, "signed_rank") == 2 * 31
    # Two seeds: the smallest possible p is 1/4 > 0.05, the test never rejects.
    assert math.isinf(critical_value(2, 0.05, "signed_rank"))
    assert superiority_power(0.01, 2, MARGIN, 0.05, "signed_rank") == 0.0


@pytest.mark.parametrize("sd", [0.02, 0.059, 0.2])
@pytest.mark.parametrize("n", [4, 5, 8, 12])
def test_sign_power_is_the_binomial_closed_form(sd, n):
    q = NormalDist().cdf(MARGIN / sd)  # a seed on AdLoCo's side
    k = next(k for k in range(n + 2) if k > n or binomial_tail(n, 0.5, k) <= 0.05)
    assert superiority_power(sd, n, MARGIN, 0.05, "sign") == pytest.approx(binomial_tail(n, q, k))


def pattern_p(values) -> tuple[float, float]:
    """One-sided p-values of the signed-rank statistic by listing all 2^n sign patterns."""
    ranks = [sorted(abs(v) for v in values).index(abs(v)) + 1 for v in values]  # no ties
    observed = sum(r for r, v in zip(ranks, values, strict=True) if v < 0)
    sums = [
        sum(r for r, neg in zip(ranks, signs, strict=True) if neg)
        for signs in product([False, True], repeat=len(values))
    ]
    return sum(s >= observed for s in sums) / len(sums), sum(s <= observed for s in sums) / len(
        sums
    )


@pytest.mark.parametrize("n", [5, 6, 7])
def test_signed_rank_power_equals_a_brute_force_monte_carlo(n):
    sd, draws = 0.08, 300
    x = np.random.default_rng(GENERATOR_SEED).standard_normal((draws, n)) * sd - MARGIN
    hits = sum(pattern_p(row)[0] <= 0.05 for row in x)
    assert superiority_power(sd, n, MARGIN, 0.05, "signed_rank", draws) == hits / draws


@pytest.mark.parametrize("n", [5, 6, 7])
def test_equivalence_power_equals_a_brute_force_monte_carlo(n):
    sd, draws = 0.05, 300
    x = np.random.default_rng(GENERATOR_SEED).standard_normal((draws, n)) * sd
    hits = sum(
        pattern_p(row - MARGIN)[0] <= 0.05 and pattern_p(row + MARGIN)[1] <= 0.05 for row in x
    )
    assert equivalence_power(sd, n, MARGIN, 0.05, "signed_rank", draws) == hits / draws


@pytest.mark.parametrize("n", [5, 6])
def test_sign_equivalence_power_sums_every_outcome(n):
    # Each seed below -margin, between or above +margin; over all 3^n outcomes, the TOST
    # decision by listing the sign patterns of each shifted count.
    sd = 0.06
    a = 1 - NormalDist().cdf(MARGIN / sd)
    total = 0.0
    for cells in product((-1, 0, 1), repeat=n):
        below_margin = sum(c <= 0 for c in cells)  # seeds below +margin
        above_minus = sum(c >= 0 for c in cells)  # seeds above -margin
        p_below = binomial_tail(n, 0.5, below_margin)
        p_above = binomial_tail(n, 0.5, above_minus)
        if p_below <= 0.05 and p_above <= 0.05:
            total += math.prod(a if c else 1 - 2 * a for c in cells)
    assert equivalence_power(sd, n, MARGIN, 0.05, "sign") == pytest.approx(total)


@pytest.mark.parametrize("statistic", ["sign", "signed_rank"])
@pytest.mark.parametrize("sd", [0.03, 0.059, 0.09])
def test_seeds_for_power_is_the_first_n_of_a_direct_search(statistic, sd):
    powers = [superiority_power(sd, n, MARGIN, 0.05, statistic) for n in range(1, MOST_SEEDS + 1)]
    first = next((n for n, p in enumerate(powers, 1) if p >= 0.8), None)
    assert seeds_for_power(sd, MARGIN, 0.05, statistic, 0.8) == first
    assert first is not None and powers[first - 1] >= 0.8 and max(powers[: first - 1] or [0]) < 0.8


def test_seeds_for_power_beyond_the_search_is_none():
    assert seeds_for_power(1.0, MARGIN, 0.05, "sign", 0.8) is None


def test_power_of_a_comparison_uses_the_finite_log_ratios():
    logs = [-0.1, -0.05, 0.02, -math.inf, -0.08]
    assert finite_sd(logs) == pytest.approx(np.std([-0.1, -0.05, 0.02, -0.08], ddof=1))
    assert (
        finite_sd([0.1, math.inf]) is None
        and power_of([0.1, math.inf], "sign", 0.1, 0.05, 0.8) is None
    )
    pw = power_of(logs, "sign", 0.1, 0.05, 0.8)
    q = NormalDist().cdf(MARGIN / pw.sd)
    # Five seeds, sign: only all five on AdLoCo's side is significant (1/32 <= 0.05).
    assert pw.pairs == 5 and pw.superiority == pytest.approx(q**5)
    assert pw.seeds_needed == seeds_for_power(pw.sd, MARGIN, 0.05, "sign", 0.8)
    assert pw.as_dict()["true_ratio"] == pytest.approx(1 / 1.1)


def test_a_claim_rests_on_what_its_first_screen_states_and_names_the_rest_once():
    from types import SimpleNamespace

    from adloco.report.analysis.claims import Claim, Comparison, Effect
    from adloco.report.analysis.exact_tests import SignFlipTest
    from adloco.report.analysis.power import Power, power_warnings, rests_on

    def made(against, power, *, headline=False, beside=False, quantity="sim_time_s"):
        test = SignFlipTest("signed_rank", 10, 0, 30.0, 0.001, 0.999)
        effect = Effect("seed", tuple(range(10)), (0.8,) * 10, 0.8, None, test, 0)
        c = Comparison(1, "adloco", against, against, quantity, 145.2, {}, {}, effect,
                       "supported", "why", headline, beside=beside)  # fmt: skip
        c.power = Power("signed_rank", 10, 0.3, 0.1, 0.05, 0.8, power, 0.5, None)
        return c

    head = made("diloco", 0.93, headline=True)
    step = made("diloco, the paper's AdLoCo", 0.77, beside=True)
    step.subject, step.baseline = "adloco-paper", "diloco"
    coarse = made("diloco-max-batch", 0.20)
    fine = made("localsgd", 0.85)
    claim = Claim(1, "AdLoCo is faster", "supported", "why", [head, step, coarse, fine])
    assert [rests_on(claim, c) for c in claim.comparisons] == [True, True, False, False]
    settings = SimpleNamespace(section=SimpleNamespace(test_level=0.05, power_goal=0.8))
    lines = power_warnings(claim, settings)
    # The step the first screen states (77 %) is warned about on its own line; the baseline
    # beside the verdict below the goal (20 %) is named once; 85 % and 93 % pass.
    assert len(lines) == 2
    assert lines[0].startswith("Claim 1, adloco-paper against diloco (simulated time to 145.2)")
    assert "77% power" in lines[0]
    assert lines[1] == (
        "Claim 1, beside its verdict, below the 80% power goal at a true ratio of 1/1.1: "
        "AdLoCo against diloco-max-batch in simulated time to 145.2 (20%). Context, not the "
        "verdict (claims.json gives each one's power and the paired seeds that would reach it)."
    )
