"""The target perplexities, fixed before the runs, and whether each can test a claim.

Part of ``adloco report``. ``report.targets`` fixes the levels in the
configuration, before any run: as fractions of the base model's validation
perplexity (``relative_to: base``, the default: every run starts from that
model, so "10 % below where it started" means the same for every method) or
as perplexities (``absolute``). The headline level is ``main``, else the
hardest. ``derived`` is an explicitly named option for experiments without
a base model (the paper preset, the test preset): ``derived_levels`` levels
read off the runs after the fact, spaced geometrically from the highest
best perplexity of any seed of ``derived_runs`` towards their lowest first
evaluation and rounded up to three significant digits; the page says so,
because a target chosen from the runs' own plateau favours the run it was
read from.

Each target is then checked against the reference perplexities
(:mod:`adloco.report.inputs.references`): one at or above the validation unigram
perplexity is *not testable*, and the verdicts at it say why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from adloco.config import ConfigError
from adloco.report.analysis.summary import run_level_perplexity
from adloco.report.inputs.references import Base, References, unchecked_caveat, untestable_reason
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import ReportSettings, Roles


@dataclass(frozen=True)
class Ladder:
    targets: tuple[float, ...]  # from the easiest (highest perplexity) to the hardest
    main: float | None
    source: str  # "base", "absolute", "derived" or "none"
    note: str
    levels: dict[float, float] = field(default_factory=dict)  # target -> level as configured
    untestable: dict[float, str] = field(default_factory=dict)  # target -> why not testable
    caveat: str = ""  # the unigram rule could not be applied, and why

    def level_text(self, target: float) -> str:
        """The target as configured: "0.9 × base" or the perplexity."""
        if self.source == "base" and target in self.levels:
            return f"{self.levels[target]:g} × base"
        return f"{target:.4g}"


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


def _derived(runs: list[RunSeed], roles: Roles, settings: ReportSettings) -> Ladder:
    chosen = settings.section.targets
    names = list(chosen.derived_runs or [n for n in (roles.adloco, roles.diloco) if n])
    known = list(dict.fromkeys(r.run for r in runs))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"report.targets.derived_runs: no run named {', '.join(unknown)} "
            f"(runs: {', '.join(known)})"
        )
    names = names or known
    targets = derive_targets(runs, names, chosen.derived_levels)
    if not targets:
        return Ladder((), None, "none", "no targets: some run to derive them from logged none")
    note = (
        f"derived after the runs, not fixed before them (report.targets.relative_to: derived): "
        f"{len(targets)} levels from {', '.join(names)}, from the highest best perplexity of any "
        "of their seeds up towards the lowest perplexity of their first evaluations, "
        "geometrically spaced, rounded up to 3 significant digits"
    )
    return Ladder(targets, min(targets), "derived", note)


def build_ladder(
    runs: list[RunSeed],
    roles: Roles,
    settings: ReportSettings,
    base: Base | None = None,
    references: References | None = None,
) -> Ladder:
    """The targets as configured, each checked against the unigram perplexity."""
    relative_to, chosen = settings.section.targets.relative_to, settings.levels
    main_level = settings.main if settings.main is not None else min(chosen)
    references = references or References.unavailable("no reference perplexities read")
    if relative_to == "derived":
        ladder = _derived(runs, roles, settings)
    elif relative_to == "base":
        if base is None:
            raise ConfigError(
                "report.targets.relative_to: base needs the base model's perplexity, and no "
                "base model was given (adloco report --base results/<experiment>/base); an "
                "experiment without a base model sets relative_to: absolute or derived"
            )
        levels = {level * base.val_perplexity: level for level in chosen}
        main = main_level * base.val_perplexity
        note = (
            f"fixed before the runs: {', '.join(f'{v:g}' for v in chosen)} × the base "
            f"model's validation perplexity {base.val_perplexity:.4g} (report.targets)"
        )
        ladder = Ladder(tuple(sorted(levels, reverse=True)), main, "base", note, levels)
    else:
        levels = {level: level for level in chosen}
        main = main_level
        note = "fixed before the runs: perplexities of report.targets.levels"
        ladder = Ladder(tuple(sorted(levels, reverse=True)), main, "absolute", note, levels)
    untestable = {t: untestable_reason(t, references) for t in ladder.targets}
    return Ladder(
        ladder.targets,
        ladder.main,
        ladder.source,
        ladder.note,
        ladder.levels,
        {t: why for t, why in untestable.items() if why},
        unchecked_caveat(references),
    )
