"""What each run spends to reach each target perplexity, over its seeds.

Part of ``adloco report``. For each target of the ladder
(:mod:`adloco.report.analysis.targets`) and each run: tokens, communications, bytes
and simulated time to target per seed (:func:`adloco.report.analysis.summary.reach`,
under the ``report.reached`` and ``report.between`` rules); a seed that never gets there (or does
not stay there) is censored (``math.inf``), counted and shown as such,
never averaged.
"""

from __future__ import annotations

import math

from adloco.report.analysis.seed_stats import Spread
from adloco.report.analysis.summary import TO_TARGET, reach
from adloco.report.analysis.targets import Ladder
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import DEFAULT_RULE, ReachRule


def to_target(
    runs: list[RunSeed],
    name: str,
    target: float,
    quantity: str,
    rule: ReachRule | str = DEFAULT_RULE,
) -> dict[int, float]:
    """Seed -> ``quantity`` to target for run ``name`` (seed order); inf when never reached."""
    out = {}
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        reached = reach(r.rows, target, rule)
        value = reached[quantity] if reached else None
        out[r.seed] = math.inf if value is None else float(value)
    return out


def ladder_table(
    runs: list[RunSeed], ladder: Ladder, rule: ReachRule | str = DEFAULT_RULE
) -> dict[tuple[float, str], dict[str, Spread]]:
    """(target, run) -> quantity -> spread over seeds."""
    names = list(dict.fromkeys(r.run for r in runs))
    return {
        (target, name): {
            q: Spread.of(list(to_target(runs, name, target, q, rule).values())) for q in TO_TARGET
        }
        for target in ladder.targets
        for name in names
    }


LADDER_COLUMNS = [
    "target_perplexity",
    "run",
    "quantity",
    "median",
    "low",
    "high",
    "reached",
    "seeds",
    "reach_rule",
    "between_rule",
    "testable",
]


def ladder_rows(
    table: dict[tuple[float, str], dict[str, Spread]], ladder: Ladder, rule: ReachRule | str
) -> list[dict]:
    """ladder.csv: one row per target, run and quantity; empty median/high when censored."""
    rule = ReachRule.of(rule)
    out = []
    for (target, name), spreads in table.items():
        for quantity, s in spreads.items():
            out.append(
                {
                    "target_perplexity": target,
                    "run": name,
                    "quantity": quantity,
                    **s.as_dict(),
                    "reach_rule": rule.reached,
                    "between_rule": rule.between,
                    "testable": target not in ladder.untestable,
                }
            )
    return out
