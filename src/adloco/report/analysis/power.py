"""Power of the exact paired tests over seeds, and how many seeds a comparison would need.

Part of ``adloco report``. A verdict from a handful of seeds is only as
good as the test's chance of finding an effect that is there: with the
per-seed log ratios' spread of the headline runs, 8 paired seeds detect a
true ratio of 0.965 about four times in ten, so two machines can disagree.
This module states that chance for each paired comparison, under a stated
model: the per-seed log ratios are normal with the observed spread (sample
SD of the finite ones, censored seeds left out) and a true ratio of
1 / (1 + m), m = ``report.smallest_effect`` (AdLoCo better by the margin).

- :func:`superiority_power`: the chance that the one-sided exact sign-flip
  test (``report.paired_test``) at ``report.test_level`` finds AdLoCo better.
  For the ``sign`` statistic it is closed form: each seed is on AdLoCo's
  side with probability q = Φ(log(1 + m) / sd), the count is
  Binomial(n, q), and the test rejects at or above the critical count of
  the exact null distribution. For ``signed_rank`` it is a Monte Carlo of
  :data:`DRAWS` draws from ``numpy.random.default_rng(GENERATOR_SEED)``
  (fixed, so the page is the same on every machine up to float rounding
  in the ranks), each draw's statistic against the critical value of the
  exact null distribution (:func:`adloco.report.analysis.exact_tests.sign_flip_counts`).
- :func:`equivalence_power`: the chance that the equivalence test (TOST,
  :func:`adloco.report.analysis.exact_tests.equivalence_test`) shows equivalence when the
  true ratio is 1 (closed form over the three-way multinomial for
  ``sign``; the same Monte Carlo for ``signed_rank``).
- :func:`seeds_for_power`: the smallest number of paired seeds whose power
  reaches ``report.power_goal``, searched from 1 seed upwards (power is not
  monotone in n for a discrete test, so no bisection), up to
  :data:`MOST_SEEDS`.
- :func:`attach_power` gives each paired comparison in time or communications
  its :class:`Power`; :func:`power_warnings` a line for each comparison a
  claim rests on (:func:`rests_on`: the headline, each ablation, and what the
  first screen says beside them) whose power is below the goal or whose
  smallest possible p is above the level, so that the page says when a
  verdict could not have come out otherwise; and one line naming the other
  baselines at the headline's target and quantity below the goal (context).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from adloco.report.analysis.exact_tests import STATISTICS, sign_flip_counts
from adloco.report.analysis.verdict import NOT_TESTABLE, QUANTITY_WORDS, fmt, fmt_p

if TYPE_CHECKING:
    from adloco.report.analysis.claims import Claim, Comparison
    from adloco.report.settings import ReportSettings

DRAWS = 20_000  # Monte Carlo draws of the signed-rank power
GENERATOR_SEED = 0  # numpy.random.default_rng seed of those draws
MOST_SEEDS = 32  # seeds_for_power searches up to this many paired seeds


def normal_cdf(x: float) -> float:
    """Φ(x), the standard normal distribution function (±inf allowed)."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


@lru_cache(maxsize=512)
def critical_value(n: int, level: float, statistic: str) -> float:
    """The smallest doubled statistic t with P(T >= t) <= level under the null, for n
    untied seeds (``inf`` when even every seed on one side is not significant).

    The statistic and its doubling are those of
    :func:`adloco.report.analysis.exact_tests.sign_flip_test`:
    scores 2, 4, ..., 2n (signed_rank) or 2 each (sign). By the null's symmetry, the
    other side rejects at or below ``total - t``.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    scores = [2] * n if statistic == "sign" else [2 * (i + 1) for i in range(n)]
    counts = sign_flip_counts(scores)
    total = sum(counts.values())
    critical, tail = math.inf, 0
    for t in sorted(counts, reverse=True):  # the upper tail P(T >= t), growing
        tail += counts[t]
        if tail / total > level:
            break
        critical = float(t)
    return critical


def _binomial_tail(n: int, q: float, k: float) -> float:
    """P(Binomial(n, q) >= k)."""
    return sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(n + 1) if i >= k)


def _side(sd: float, distance: float) -> float:
    """P(X < distance) for X normal with mean 0 and SD ``sd`` (sd 0: a point)."""
    if sd == 0:
        return 1.0 if distance > 0 else 0.0
    return normal_cdf(distance / sd)


def _draws(n: int, mean: float, sd: float, draws: int) -> np.ndarray:
    rng = np.random.default_rng(GENERATOR_SEED)
    return rng.standard_normal((draws, n)) * sd + mean


def _signed_ranks(x: np.ndarray) -> np.ndarray:
    """Per draw (row), the doubled sum of the ranks of |x| of the negative x."""
    order = np.argsort(np.abs(x), axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, x.shape[1] + 1), axis=1)
    return 2 * np.sum(ranks * (x < 0), axis=1)


def superiority_power(
    sd: float, n: int, margin: float, level: float, statistic: str, draws: int = DRAWS
) -> float:
    """P(the one-sided test finds AdLoCo better | true log ratio −margin, normal with ``sd``)."""
    c = critical_value(n, level, statistic)
    if math.isinf(c):
        return 0.0
    if statistic == "sign":
        return _binomial_tail(n, _side(sd, margin), c / 2)
    x = _draws(n, -margin, sd, draws)
    return int(np.count_nonzero(_signed_ranks(x) >= c)) / draws


def equivalence_power(
    sd: float, n: int, margin: float, level: float, statistic: str, draws: int = DRAWS
) -> float:
    """P(TOST shows equivalence within ±margin | true log ratio 0, normal with ``sd``)."""
    c = critical_value(n, level, statistic)
    if math.isinf(c):
        return 0.0
    if statistic == "sign":
        # Per seed: below −margin with a, above +margin with a, between with 1 − 2a.
        # TOST needs at least c/2 seeds below +margin and at least c/2 above −margin.
        a = 1.0 - _side(sd, margin)
        need = c / 2
        total = 0.0
        for low in range(n + 1):
            for high in range(n + 1 - low):
                if n - high >= need and n - low >= need:
                    ways = math.comb(n, low) * math.comb(n - low, high)
                    total += ways * a ** (low + high) * (1 - 2 * a) ** (n - low - high)
        return total
    x = _draws(n, 0.0, sd, draws)
    top = n * (n + 1)  # the doubled statistic's largest value
    below = _signed_ranks(x - margin) >= c
    above = _signed_ranks(x + margin) <= top - c
    return int(np.count_nonzero(below & above)) / draws


def seeds_for_power(
    sd: float,
    margin: float,
    level: float,
    statistic: str,
    goal: float = 0.8,
    equivalence: bool = False,
) -> int | None:
    """The smallest number of paired seeds whose power reaches ``goal`` (None: > MOST_SEEDS)."""
    power = equivalence_power if equivalence else superiority_power
    if power(sd, MOST_SEEDS, margin, level, statistic) < goal:
        return None
    for n in range(1, MOST_SEEDS + 1):
        if power(sd, n, margin, level, statistic) >= goal:
            return n
    return None  # unreachable: MOST_SEEDS reaches the goal


def finite_sd(logs: list[float]) -> float | None:
    """The sample SD of the finite log ratios (None with fewer than two)."""
    finite = [v for v in logs if math.isfinite(v)]
    if len(finite) < 2:
        return None
    return float(np.std(finite, ddof=1))


@dataclass(frozen=True)
class Power:
    """A paired comparison's power at the smallest effect of interest, and seeds needed."""

    statistic: str
    pairs: int  # the comparison's paired seeds
    sd: float  # sample SD of the finite per-seed log ratios
    smallest_effect: float  # m: ratios 1 + m and 1 / (1 + m)
    level: float
    goal: float
    superiority: float  # of the one-sided test at a true ratio 1 / (1 + m)
    equivalence: float  # of TOST at a true ratio 1
    seeds_needed: int | None  # for the superiority power to reach goal; None: > MOST_SEEDS

    @property
    def method(self) -> str:
        if self.statistic == "sign":
            return "closed form (binomial), normal log ratios"
        return f"Monte Carlo, {DRAWS:,} normal draws (numpy seed {GENERATOR_SEED})"

    def needed_words(self) -> str:
        return str(self.seeds_needed) if self.seeds_needed else f"more than {MOST_SEEDS}"

    def as_dict(self) -> dict:
        return {
            "statistic": self.statistic,
            "pairs": self.pairs,
            "sd_log_ratio": self.sd,
            "smallest_effect": self.smallest_effect,
            "true_ratio": 1 / (1 + self.smallest_effect),
            "level": self.level,
            "goal": self.goal,
            "superiority": self.superiority,
            "equivalence": self.equivalence,
            "seeds_needed": self.seeds_needed,
            "seeds_searched_up_to": MOST_SEEDS,
            "method": self.method,
        }


def power_of(
    logs: list[float], statistic: str, smallest_effect: float, level: float, goal: float
) -> Power | None:
    """The power of a paired comparison of per-seed log ratios ``logs`` (None: < 2 finite)."""
    sd = finite_sd(logs)
    if sd is None:
        return None
    margin = math.log1p(smallest_effect)
    n = len(logs)
    return Power(
        statistic,
        n,
        sd,
        smallest_effect,
        level,
        goal,
        superiority_power(sd, n, margin, level, statistic),
        equivalence_power(sd, n, margin, level, statistic),
        seeds_for_power(sd, margin, level, statistic, goal),
    )


def rests_on(claim: Claim, c: Comparison) -> bool:
    """Whether the claim's answer rests on ``c``: what the first screen states with a verdict,
    its headline (against DiLoCo; each ablation's time for claim 3) and what it says beside it
    (claim 2 in bytes and in the paper's count, claim 1 at each step to the paper's
    configuration). The other baselines are context: the verdict is the headline's."""
    return c.headline or c.beside


def _what_of(c: Comparison) -> str:
    # Communications as report.communications counts them; every other quantity by its name.
    what = (c.words if c.quantity == "communications" else "") or QUANTITY_WORDS[c.quantity]
    return f"{what} to {fmt(c.target)}" if c.target is not None else what


def power_warnings(claim: Claim, settings: ReportSettings) -> list[str]:
    """A line per comparison the claim rests on whose test cannot reach the level, or whose
    power at the smallest effect of interest is below ``report.power_goal``."""
    out = []
    level, goal = settings.section.test_level, settings.section.power_goal
    for c in claim.comparisons:
        if not rests_on(claim, c) or c.effect is None or c.verdict == NOT_TESTABLE:
            continue
        n = len(c.effect.seeds)
        seeds = f"{n} paired seeds" if c.effect.pairing == "seed" else "unpaired seeds"
        parts = []
        smallest = c.effect.test.smallest_p
        if smallest > level:
            parts.append(
                f"the smallest possible p is {fmt_p(smallest)}, above the level {level:g} (no "
                f"comparison may have a smallest possible p above {level:g})"
            )
        pw = c.power
        if pw is not None and pw.superiority < goal:
            parts.append(
                f"{pw.superiority:.0%} power to detect a true ratio of "
                f"1/{1 + pw.smallest_effect:g} (goal {goal:.0%}, per-seed log-ratio SD "
                f"{pw.sd:.3g}); {pw.needed_words()} paired seeds would reach it"
            )
        if parts:
            heads = claim.headline
            if heads and c.subject != heads[0].subject:  # a step to the paper's configuration
                who, against = c.subject, c.baseline
            else:
                who, against = "AdLoCo", c.against
            where = f"Claim {claim.number}, {who} against {against} ({_what_of(c)})"
            out.append(f"{where}, {seeds}: {'; '.join(parts)}.")
    heads = claim.headline
    short = [
        c
        for c in claim.comparisons
        if heads
        and not rests_on(claim, c)
        and (c.target, c.quantity) == (heads[0].target, heads[0].quantity)
        and c.against != "ddp anchor"
        and c.power is not None
        and c.power.superiority < goal
    ]
    if short:
        listed = "; ".join(
            f"{c.against} in {_what_of(c)} ({c.power.superiority:.0%})" for c in short
        )
        out.append(
            f"Claim {claim.number}, beside its verdict, below the {goal:.0%} power goal at a "
            f"true ratio of 1/{1 + short[0].power.smallest_effect:g}: AdLoCo against {listed}. "
            "Context, not the verdict (claims.json gives each one's power and the paired seeds "
            "that would reach it)."
        )
    return out


def attach_power(claims: list[Claim], settings: ReportSettings) -> None:
    """Each paired comparison's power in time or communications; each claim's warnings."""
    for claim in claims:
        for c in claim.comparisons:
            e = c.effect
            if e is None or e.pairing != "seed" or math.isnan(e.margin):
                continue
            if c.verdict == NOT_TESTABLE:
                continue
            c.power = power_of(
                list(e.logs),
                settings.section.paired_test,
                settings.section.smallest_effect,
                settings.section.test_level,
                settings.section.power_goal,
            )
        claim.warnings = power_warnings(claim, settings)
