"""Each method's inner and outer step: the tuning record, read and written.

Part of ``adloco report``. A tuning experiment trains, for each run of the
default configuration, copies that differ only in the tuned settings
(:data:`TUNED`: inner lr, outer lr, outer momentum and Nesterov); its
``report.tuning_groups`` maps each default run to those copies, and its
report writes ``tuning.json`` (:func:`tuning_record`). For each group, every
grid point with the median over its seeds of the final validation perplexity
and of its climb (highest evaluated perplexity over the base's), and the
chosen point: the lowest median final perplexity among the points whose climb
is at most ``report.tuning_max_climb`` (all points when no point is, or no
limit is set); a tie goes to the smaller inner lr, then the smaller outer lr
and momentum (the more conservative step). Each point also carries its
effective peak inner lr, after the square-root rule at the run's first batch.

The record also suggests the main target (:func:`suggested_main`): the
hardest of ``report.targets.levels`` that the chosen points of the groups
named ``adloco`` and ``diloco`` (the default's runs of the claims) both
reach, under ``report.reached``, within :data:`MAIN_WITHIN` of their
tokens, so that on other seeds the curves pass it while still falling.

The record is committed as ``config/tuning.json``; the default configuration
names it in ``report.tuning``, and its report shows it as a table
(:func:`tuning_table`) beside each run's configured settings, flagged where
they differ.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from adloco.config import Config, ConfigError
from adloco.io import read_json_object
from adloco.records import is_number
from adloco.report.gain import climb
from adloco.report.inputs import RunSeed
from adloco.report.stats import median
from adloco.report.summary import round_to_target, round_values

METRIC = "final_val_perplexity"
TUNED = ("inner_lr", "outer_lr", "outer_momentum", "nesterov")
MAIN_WITHIN = 0.75
MAIN_METHODS = ("adloco", "diloco")


def effective_inner_lr(run: RunSeed) -> float | None:
    """Peak inner lr the run's first round steps with (inner_lr × its lr scale then)."""
    scale = next((r.get("lr_scale") for r in run.rows if is_number(r.get("lr_scale"))), None)
    return None if scale is None else run.settings.inner_lr * scale


def _point(name: str, seeds: list[RunSeed], base_perplexity: float | None) -> dict[str, Any]:
    finals = [r.summary.get(METRIC) for r in seeds]
    finals = [float(v) if is_number(v) else math.inf for v in finals]
    climbs = [c for c in (climb(r, base_perplexity) for r in seeds) if c is not None]
    value = median(finals)
    settings = seeds[0].settings
    return {
        "run": name,
        **{key: getattr(settings, key) for key in TUNED},
        "method": settings.method,
        "effective_inner_lr": effective_inner_lr(seeds[0]),
        "value": None if math.isinf(value) else value,
        "climb": median(climbs) if climbs else None,
    }


def _order(point: dict[str, Any]) -> tuple:
    """Lowest final perplexity first; a tie goes to the smaller lrs and momentum."""
    value = math.inf if point["value"] is None else point["value"]
    return (value, *(float(point[key]) for key in TUNED))


def choose(points: list[dict[str, Any]], max_climb: float | None) -> tuple[dict[str, Any], bool]:
    """The chosen point and whether it is within ``max_climb`` (see the module docstring)."""
    within = [
        p
        for p in points
        if max_climb is None or (p["climb"] is not None and p["climb"] <= max_climb)
    ]
    return min(within or points, key=_order), bool(within)


def tuning_record(
    config: Config,
    runs: list[RunSeed],
    groups: dict[str, tuple[str, ...]],
    base_perplexity: float | None = None,
) -> dict[str, Any]:
    """The tuning.json of a tuning experiment: per group, the grid and the chosen point."""
    by_run: dict[str, list[RunSeed]] = {}
    for r in runs:
        by_run.setdefault(r.run, []).append(r)
    max_climb = config.report.tuning_max_climb
    if max_climb is not None and base_perplexity is None:
        raise ConfigError(
            "report.tuning_max_climb needs the base model's perplexity (pass --base to "
            "adloco report, or set it to null)"
        )
    out = {}
    for target, names in groups.items():
        unknown = [n for n in names if n not in by_run]
        if unknown:
            raise ConfigError(
                f"report.tuning_groups.{target}: no run named {', '.join(unknown)} "
                f"(runs: {', '.join(by_run)})"
            )
        points = sorted(
            (_point(name, by_run[name], base_perplexity) for name in names),
            key=lambda p: tuple(float(p[key]) for key in TUNED),
        )
        chosen, within = choose(points, max_climb)
        out[target] = {
            "points": points,
            "varied": [k for k in TUNED if len({p[k] for p in points}) > 1],
            "chosen": {key: chosen[key] for key in TUNED},
            "chosen_run": chosen["run"],
            "within_max_climb": within,
        }
    seeds = sorted({r.seed for r in runs if any(r.run in g for g in groups.values())})
    record = {
        "experiment": config.experiment,
        "seed": config.seed,
        "seeds": seeds,
        "metric": METRIC,
        "rule": "lowest median final validation perplexity over seeds among the points whose "
        "highest evaluated perplexity is at most max_climb times the base's; a tie goes to the "
        "smaller inner lr, outer lr and momentum",
        "max_climb": max_climb,
        "base_perplexity": base_perplexity,
        "groups": out,
    }
    record["main_target"] = suggested_main(config, by_run, out, base_perplexity)
    return record


def suggested_main(
    config: Config,
    by_run: dict[str, list[RunSeed]],
    groups: dict[str, Any],
    base_perplexity: float | None,
) -> dict[str, Any] | None:
    """The hardest target level each chosen AdLoCo and DiLoCo point reaches early enough.

    A point reaches a level early enough when, on every seed, it reaches it
    (``report.reached``) within :data:`MAIN_WITHIN` of its final tokens.
    None without a base (levels relative to it) or without such groups.
    """
    targets = config.report.targets
    if targets.relative_to != "base" or base_perplexity is None:
        return None
    chosen = [groups[name]["chosen_run"] for name in MAIN_METHODS if name in groups]
    if not chosen:
        return None
    reached = {name: _levels_reached(by_run[name], targets.levels, base_perplexity, config)
               for name in chosen}  # fmt: skip
    common = set(targets.levels).intersection(*reached.values())
    return {
        "level": min(common) if common else None,
        "runs": chosen,
        "within": MAIN_WITHIN,
        "rule": f"the hardest level the chosen points of groups {' and '.join(MAIN_METHODS)} reach "
        f"(report.reached: {config.report.reached}) within {MAIN_WITHIN:g} of their tokens",
        "reached": {name: sorted(levels, reverse=True) for name, levels in reached.items()},
    }


def _levels_reached(
    seeds: list[RunSeed], levels: tuple[float, ...], base_perplexity: float, config: Config
) -> set[float]:
    out = set(levels)
    for run in seeds:
        tokens = round_values(run.rows, "tokens_total")
        if not tokens:
            return set()
        limit = MAIN_WITHIN * max(tokens.values())
        for level in levels:
            round_ = round_to_target(run.rows, level * base_perplexity, config.report.reached)
            if round_ is None or tokens.get(round_, math.inf) > limit:
                out.discard(level)
    return out


def load_tuning(path: str | Path | None) -> dict[str, Any] | None:
    """The tuning record named by ``report.tuning``; None when it names none."""
    if path is None:
        return None
    path = Path(path)
    record = read_json_object(
        path, f"{path}: tuning record not found (report.tuning; run the tuning experiment)"
    )
    groups = record.get("groups")
    if not isinstance(groups, dict):
        raise ValueError(f"{path}: expected an object 'groups' of run -> grid")
    for name, group in groups.items():
        points, chosen = group.get("points"), group.get("chosen")
        if not (isinstance(points, list) and points and all(isinstance(p, dict) for p in points)):
            raise ValueError(f"{path}: groups.{name}: points must be a non-empty list of objects")
        for p in points:
            missing = [k for k in (*TUNED, "value") if k not in p]
            if missing:
                raise ValueError(f"{path}: groups.{name}: a point lacks {', '.join(missing)}")
        numbers = [k for k in TUNED if k != "nesterov"]
        if not (
            isinstance(chosen, dict)
            and all(is_number(chosen.get(k)) for k in numbers)
            and isinstance(chosen.get("nesterov"), bool)
        ):
            raise ValueError(
                f"{path}: groups.{name}: chosen must give a number for each of "
                f"{', '.join(numbers)} and true or false for nesterov"
            )
    return record


def tuning_table(
    record: dict[str, Any], configured: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per tuned run: its grid, the chosen point, the configured one, what differs.

    ``configured``: run -> its :data:`TUNED` settings in this configuration. A
    tuned run this configuration does not have is listed with none.
    """
    out = []
    for name, group in record["groups"].items():
        mine = configured.get(name)
        chosen = group["chosen"]
        differs = (
            []
            if mine is None
            else [k for k in TUNED if not math.isclose(float(mine[k]), float(chosen[k]))]
        )
        out.append(
            {
                "run": name,
                "points": group["points"],
                "varied": group.get("varied", list(TUNED)),
                "chosen": chosen,
                "chosen_run": group.get("chosen_run"),
                "within_max_climb": group.get("within_max_climb", True),
                "configured": mine,
                "differs": differs,
                "max_climb": record.get("max_climb"),
            }
        )
    return out
