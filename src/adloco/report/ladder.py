"""The target ladder: several perplexity targets and what each run spends to reach them.

Targets are ``report.targets`` or, when null, derived from the runs of
``report.target_runs`` (by default the AdLoCo run and the DiLoCo baseline, the
two the paper compares; a weaker baseline such as LocalSGD would otherwise
pull every level up to where it stalls): the hardest level is the highest
"best perplexity" among those runs and seeds, so every one of them reaches it
in every seed; the easiest lies below the lowest first-evaluated perplexity,
so no run reaches it before it has trained; ``report.target_levels`` levels
are spaced geometrically in between and rounded up to three significant
digits (rounding up keeps every level reachable). The main target, where the
headline verdicts and the regime sweep are computed, is ``report.main_target``
or the hardest level.

For each target and run: tokens, communications, bytes and simulated time to
target per seed (:func:`adloco.report.summary.reach`); a seed that never gets
there is censored (``math.inf``), counted and shown as such, never averaged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from adloco.config import ConfigError
from adloco.report.inputs import RunSeed
from adloco.report.settings import ReportSettings, Roles
from adloco.report.stats import Spread
from adloco.report.summary import TO_TARGET, reach, run_level_perplexity


@dataclass(frozen=True)
class Ladder:
    targets: tuple[float, ...]  # from the easiest (highest perplexity) to the hardest
    main: float | None
    source: str  # "config", "derived" or "none"
    note: str


def ceil_significant(value: float, digits: int = 3) -> float:
    """``value`` rounded up to ``digits`` significant digits."""
    if value <= 0 or not math.isfinite(value):
        return value
    scale = 10 ** (digits - 1 - math.floor(math.log10(value)))
    return math.ceil(value * scale - 1e-9) / scale


def derive_targets(runs: list[RunSeed], names: list[str], levels: int) -> tuple[float, ...]:
    """Geometric levels between the hardest common best and the lowest first perplexity."""
    curves = [run_level_perplexity(r.rows) for r in runs if r.run in names]
    curves = [c for c in curves if c]
    if not curves or len(curves) < sum(r.run in names for r in runs):
        return ()
    hardest = max(min(c.values()) for c in curves)
    easiest = min(next(iter(c.values())) for c in curves)
    if easiest <= hardest or levels == 1:
        return (ceil_significant(hardest),)
    raw = [hardest * (easiest / hardest) ** (i / levels) for i in range(levels)]
    return tuple(sorted({ceil_significant(v) for v in raw}, reverse=True))


def build_ladder(runs: list[RunSeed], roles: Roles, settings: ReportSettings) -> Ladder:
    if settings.targets:
        targets = settings.targets
        source, note = "config", "report.targets"
    else:
        names = settings.target_runs or [n for n in (roles.adloco, roles.diloco) if n]
        known = list(dict.fromkeys(r.run for r in runs))
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(
                f"report.target_runs: no run named {', '.join(unknown)} (runs: {', '.join(known)})"
            )
        names = names or known
        targets = derive_targets(runs, names, settings.target_levels)
        source = "derived" if targets else "none"
        note = (
            f"{len(targets)} levels derived from {', '.join(names)}: from the highest best "
            "perplexity of any of their seeds (every seed of every one reaches it) up towards "
            "the lowest perplexity of their first evaluations, geometrically spaced, "
            "rounded up to 3 significant digits"
            if targets
            else "no targets: report.targets is null and some compared run logged no perplexity"
        )
    main = settings.main_target if settings.main_target is not None else None
    if main is None and targets:
        main = min(targets)
    elif main is not None and main not in targets:
        targets = tuple(sorted({*targets, main}, reverse=True))
    return Ladder(tuple(targets), main, source, note)


def to_target(runs: list[RunSeed], name: str, target: float, quantity: str) -> list[float]:
    """Per seed of run ``name`` (in seed order), ``quantity`` to target; inf when never reached."""
    out = []
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        reached = reach(r.rows, target)
        value = reached[quantity] if reached else None
        out.append(math.inf if value is None else float(value))
    return out


def ladder_table(runs: list[RunSeed], ladder: Ladder) -> dict[tuple[float, str], dict[str, Spread]]:
    """(target, run) -> quantity -> spread over seeds."""
    names = list(dict.fromkeys(r.run for r in runs))
    return {
        (target, name): {q: Spread.of(to_target(runs, name, target, q)) for q in TO_TARGET}
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
]


def ladder_rows(table: dict[tuple[float, str], dict[str, Spread]]) -> list[dict]:
    """ladder.csv: one row per target, run and quantity; empty median/high when censored."""
    out = []
    for (target, name), spreads in table.items():
        for quantity, s in spreads.items():
            out.append(
                {"target_perplexity": target, "run": name, "quantity": quantity, **s.as_dict()}
            )
    return out
