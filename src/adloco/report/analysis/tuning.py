"""Each method's inner and outer step: the tuning record, read and written.

Part of ``adloco report``. A tuning experiment trains, for each run of the
default configuration, copies that differ only in the tuned settings
(:data:`TUNED`: inner lr, outer lr, outer momentum and Nesterov); its
``report.tuning_groups`` maps each default run to those copies, and its
report writes ``tuning.json`` (:func:`tuning_record`). For each group, every
grid point with the medians over its seeds of the final validation
perplexity, of its climb (highest evaluated perplexity over the base's) and
of its simulated time to the main target, and its effective peak inner lr
(after the square-root rule at the run's first batch).

The chosen point is the best by ``report.tuning_metric`` among the points
whose climb is at most ``report.tuning_max_climb`` (all points when no point
is, or no limit is set). ``time_to_main`` (the default) is the claims' own
metric: the lowest median simulated time to the main target, read as the
claims read it (:func:`adloco.report.analysis.ladder.to_target` under
``report.reached`` and ``report.between``); a point whose median seed never
reaches the target is censored, ranked after every point that does, then by
final perplexity. ``final_perplexity`` is the lowest median final
perplexity. A tie goes to the smaller inner lr, then the smaller outer lr
and momentum (the more conservative step). Whatever the metric, each group
also names the point final perplexity would choose (``by_final_perplexity``),
the sensitivity of the choice to its criterion.

How the target's own choice avoids circularity: the main target is fixed
before any point is chosen by time to it. :func:`suggested_main` takes the
hardest of ``report.targets.levels`` that the points final perplexity
chooses in the groups named ``adloco`` and ``diloco`` (the default's runs of
the claims) both reach, under ``report.reached``, within :data:`MAIN_WITHIN`
of their tokens, so that on other seeds the curves pass it while still
falling. No time to any target enters that rule, so the target does not
move with the choice it drives, and it is the same under either metric.
Without such a level, the choice reads ``report.targets.main``; without
that either, every point is censored and final perplexity decides.

Grids that bracket: per group and per tuned dimension the method does not
fix (:data:`DIMENSIONS`, :func:`edges`), whether the chosen point sits at an
edge of the values searched, and the next value beyond that edge
(:func:`beyond`): lrs a factor :data:`LR_FACTOR` further on their log grid,
momenta the next of :data:`MOMENTUM_STEPS` (the range [0, 0.95] brackets
itself at its ends). ``scripts/tune-grid.py --widen`` adds those values to
the grid declaration (``config/tune-grid.yaml``) and writes the tune
configuration again; the experiment is repeated until no chosen point sits
at an open edge.

The record is committed as ``config/tuning.json``; the default configuration
names it in ``report.tuning``, and its report shows it as a table
(:func:`tuning_table`) beside each run's configured settings, flagged where
they differ.
"""

from __future__ import annotations

import math
from typing import Any

from adloco.config import METHOD_RULES, Config, ConfigError
from adloco.formats.metrics import is_number
from adloco.report.analysis.gain import climb
from adloco.report.analysis.ladder import to_target
from adloco.report.analysis.seed_stats import median
from adloco.report.analysis.summary import round_to_target, round_values
from adloco.report.inputs.results import RunSeed
from adloco.report.inputs.tuning_record import TUNED
from adloco.report.settings import ReachRule

METRIC = "final_val_perplexity"  # what a point's "value" is
METRICS = ("time_to_main", "final_perplexity")  # report.tuning_metric
TIME = "sim_time_s"  # the quantity to target of time_to_main
DIMENSIONS = ("inner_lr", "outer_lr", "outer_momentum")  # the grid's axes (Nesterov: momentum > 0)
# AdLoCo's own settings, searched like its lrs where a grid varies them: the trainers it
# starts with, the norm test's eta and the merged trainer's batch rule.
MECHANISM = ("initial_trainers", "eta", "merge_batch")
MECHANISM_FACTOR = 2.0  # the next trainer count or eta beyond an edge
LR_FACTOR = 2.0  # the next lr beyond an edge of the grid
MOMENTUM_STEPS = (0.0, 0.5, 0.75, 0.9, 0.95)  # 1 - momentum halves from 0.5; [0, 0.95] in all
MAIN_WITHIN = 0.75
MAIN_METHODS = ("adloco", "diloco")
RULES = {
    "time_to_main": "lowest median simulated time to the main target over seeds (report.reached "
    "and report.between as the claims read it; a point whose median seed never reaches it ranks "
    "after every point that does, then by final perplexity)",
    "final_perplexity": "lowest median final validation perplexity over seeds",
}


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
        **{key: getattr(settings, key) for key in MECHANISM},
        "seeds": len(seeds),
        "method": settings.method,
        "effective_inner_lr": effective_inner_lr(seeds[0]),
        "value": None if math.isinf(value) else value,
        "climb": median(climbs) if climbs else None,
    }


def _time_to(
    point: dict[str, Any], seeds: list[RunSeed], target: float | None, rule: ReachRule
) -> None:
    """Add the point's median simulated time to ``target`` (None: censored) and its seeds there."""
    times = list(to_target(seeds, point["run"], target, TIME, rule).values()) if target else []
    value = median(times) if times else math.inf
    point["time_to_main_s"] = None if math.isinf(value) else value
    point["reached_main"] = sum(1 for t in times if math.isfinite(t))


def _order(point: dict[str, Any], metric: str = "final_perplexity") -> tuple:
    """Best first under ``metric``; a tie goes to the smaller lrs and momentum.

    By time, a tie in median time goes to the point measured on more seeds (the
    confirmation runs every point near the best again on more seeds), then to the
    smaller steps; final perplexity orders only the points that never reach the target.
    """
    value = math.inf if point["value"] is None else point["value"]
    steps = tuple(float(point[key]) for key in TUNED)
    if metric == "final_perplexity":
        return (value, *steps)
    time = point.get("time_to_main_s")
    if time is None:
        return (True, math.inf, value, 0, *steps)
    return (False, time, 0.0, -point.get("seeds", 1), *steps)


def choose(
    points: list[dict[str, Any]], max_climb: float | None, metric: str = "final_perplexity"
) -> tuple[dict[str, Any], bool]:
    """The chosen point and whether it is within ``max_climb`` (see the module docstring)."""
    if metric not in METRICS:
        raise ConfigError(f"report.tuning_metric: {metric!r} is not one of {', '.join(METRICS)}")
    within = [
        p
        for p in points
        if max_climb is None or (p["climb"] is not None and p["climb"] <= max_climb)
    ]
    return min(within or points, key=lambda p: _order(p, metric)), bool(within)


def beyond(key: str, value: float, direction: int) -> float | None:
    """The next value of dimension ``key`` past ``value`` (direction -1: below, +1: above).

    lrs: a factor :data:`LR_FACTOR` on their log grid; momenta: the next of
    :data:`MOMENTUM_STEPS` (None past 0 or 0.95: the range's own ends).
    """
    if key == "initial_trainers":
        nxt = value * MECHANISM_FACTOR**direction
        return float(nxt) if nxt >= 1 else None
    if key == "eta":  # below 1 (the schema's range): none past it
        nxt = float(f"{value * MECHANISM_FACTOR**direction:.12g}")
        return nxt if nxt < 1 else None
    if key != "outer_momentum":
        return float(f"{value * LR_FACTOR**direction:.12g}")
    steps = [m for m in MOMENTUM_STEPS if (m - value) * direction > 1e-12]
    if not steps:
        return None
    return min(steps) if direction > 0 else max(steps)


def _line(
    points: list[dict[str, Any]], chosen: dict[str, Any], key: str, keys: list[str]
) -> list[dict[str, Any]]:
    """The points that differ from ``chosen`` in ``key`` alone (the chosen one among them): on a
    grid of every combination, all of that dimension's values; on lines through an earlier
    choice (``scripts/tune-grid.py --lines``), the values searched through this one."""

    def same(p: dict[str, Any], k: str) -> bool:
        if k == "merge_batch" and 1 in (p.get("initial_trainers"), chosen.get("initial_trainers")):
            return True  # one trainer merges nothing: its merge rule is no coordinate
        a, b = p.get(k), chosen.get(k)
        return a == b or (is_number(a) and is_number(b) and math.isclose(a, b))

    return [p for p in points if all(same(p, k) for k in (*keys, "merge_batch") if k != key)]


def edges(
    points: list[dict[str, Any]], chosen: dict[str, Any], method: str
) -> dict[str, dict[str, Any]]:
    """Per dimension ``method`` does not fix: the values searched along the line through the
    chosen point (:func:`_line`), the chosen one, its edge.

    ``edge``: ``low``, ``high`` or ``low and high`` (one value searched) when
    the chosen value is the smallest or largest searched and a value lies
    beyond it, else None; ``next``: those values (:func:`beyond`).
    """
    fixed = METHOD_RULES.get(method, {})
    out = {}
    numeric_mechanism = [k for k in MECHANISM if k != "merge_batch"]
    varied = [k for k in numeric_mechanism if len({p.get(k) for p in points}) > 1]
    keys = [k for k in (*DIMENSIONS, *varied) if k not in fixed]
    for key in keys:
        searched = sorted({float(p[key]) for p in _line(points, chosen, key, keys)})
        value = float(chosen[key])
        sides = [
            (side, nxt)
            for side, end, direction in (("low", searched[0], -1), ("high", searched[-1], 1))
            if math.isclose(value, end) and (nxt := beyond(key, end, direction)) is not None
        ]
        out[key] = {
            "searched": searched,
            "chosen": value,
            "edge": " and ".join(side for side, _ in sides) or None,
            "next": [nxt for _, nxt in sides],
        }
    return out


def _target(
    config: Config, main: dict[str, Any] | None, base_perplexity: float | None
) -> dict[str, Any]:
    """The perplexity time_to_main times runs to, and where it comes from."""
    targets = config.report.targets
    level = main.get("level") if main else None
    source = "main_target"
    if level is None and targets.main is not None and targets.relative_to != "derived":
        level, source = float(targets.main), "report.targets.main"
    if level is None or (targets.relative_to == "base" and base_perplexity is None):
        return {"level": None, "perplexity": None, "from": None}
    scale = base_perplexity if targets.relative_to == "base" else 1.0
    return {"level": level, "perplexity": level * scale, "from": source}


def _grids(
    groups: dict[str, tuple[str, ...]],
    by_run: dict[str, list[RunSeed]],
    base_perplexity: float | None,
) -> dict[str, list[dict[str, Any]]]:
    """Group -> its points (final perplexity and climb), in the order of their settings."""
    grids = {}
    for group, names in groups.items():
        unknown = [n for n in names if n not in by_run]
        if unknown:
            raise ConfigError(
                f"report.tuning_groups.{group}: no run named {', '.join(unknown)} "
                f"(runs: {', '.join(by_run)})"
            )
        grids[group] = sorted(
            (_point(name, by_run[name], base_perplexity) for name in names),
            key=lambda p: tuple(float(p[key]) for key in TUNED),
        )
    return grids


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
    report = config.report
    max_climb, metric = report.tuning_max_climb, report.tuning_metric
    if max_climb is not None and base_perplexity is None:
        raise ConfigError(
            "report.tuning_max_climb needs the base model's perplexity (pass --base to "
            "adloco report, or set it to null)"
        )
    grids = _grids(groups, by_run, base_perplexity)
    # The target first, from the points final perplexity chooses; then the choice by it.
    by_final = {group: choose(points, max_climb)[0] for group, points in grids.items()}
    main = suggested_main(
        config, by_run, {g: p["run"] for g, p in by_final.items()}, base_perplexity
    )
    target = _target(config, main, base_perplexity)
    rule = ReachRule.of_section(report)
    out = {}
    for group, points in grids.items():
        for point in points:
            _time_to(point, by_run[point["run"]], target["perplexity"], rule)
        chosen, within = choose(points, max_climb, metric)
        varied = [k for k in (*TUNED, *MECHANISM) if len({p.get(k) for p in points}) > 1]
        out[group] = {
            "points": points,
            "varied": varied,
            "chosen": {key: chosen[key] for key in TUNED}
            | {key: chosen[key] for key in MECHANISM if key in varied},
            "chosen_run": chosen["run"],
            "within_max_climb": within,
            "by_final_perplexity": by_final[group]["run"],
            "edges": edges(points, chosen, chosen["method"]),
        }
    seeds = sorted({r.seed for r in runs if any(r.run in g for g in groups.values())})
    return {
        "experiment": config.experiment,
        "seed": config.seed,
        "seeds": seeds,
        "metric": metric,
        "value": METRIC,
        "rule": f"{RULES[metric]} among the points whose highest evaluated perplexity is at most "
        "max_climb times the base's; a tie in time goes to the point measured on more seeds, "
        "then to the smaller inner lr, outer lr and momentum",
        "target": {**target, "quantity": TIME, "reached": rule.reached, "between": rule.between},
        "widen_rule": f"a chosen point at an edge of a searched dimension proposes the next value "
        f"beyond it: lrs x{LR_FACTOR:g} or /{LR_FACTOR:g}, momenta the next of "
        f"{', '.join(f'{m:g}' for m in MOMENTUM_STEPS)}",
        "bracketed": not any(e["next"] for g in out.values() for e in g["edges"].values()),
        "max_climb": max_climb,
        "base_perplexity": base_perplexity,
        "groups": out,
        "main_target": main,
    }


def suggested_main(
    config: Config,
    by_run: dict[str, list[RunSeed]],
    chosen: dict[str, str],
    base_perplexity: float | None,
) -> dict[str, Any] | None:
    """The hardest target level the AdLoCo and DiLoCo points reach early enough.

    ``chosen``: group -> the run final perplexity chooses in it (never the
    time to a target: the module docstring). A point reaches a level early
    enough when, on every seed, it reaches it (``report.reached``) within
    :data:`MAIN_WITHIN` of its final tokens. None without a base (levels
    relative to it) or without such groups.
    """
    targets = config.report.targets
    if targets.relative_to != "base" or base_perplexity is None:
        return None
    names = [chosen[name] for name in MAIN_METHODS if name in chosen]
    if not names:
        return None
    reached = {name: _levels_reached(by_run[name], targets.levels, base_perplexity, config)
               for name in names}  # fmt: skip
    common = set(targets.levels).intersection(*reached.values())
    return {
        "level": min(common) if common else None,
        "runs": names,
        "within": MAIN_WITHIN,
        "rule": f"the hardest level the points final perplexity chooses in groups "
        f"{' and '.join(MAIN_METHODS)} reach (report.reached: {config.report.reached}) within "
        f"{MAIN_WITHIN:g} of their tokens",
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


def tuning_table(
    record: dict[str, Any], configured: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per tuned run: its grid, the chosen point, the configured one, what differs.

    ``configured``: run -> its :data:`TUNED` settings in this configuration. A
    tuned run this configuration does not have is listed with none. Each row
    carries the record's criterion (``metric``; a record written before it
    was stated chose by final perplexity), the point final perplexity chooses
    and the chosen point's edges (:func:`edges`, from its grid when the record
    does not hold them).
    """
    metric = record.get("metric")
    metric = metric if metric in METRICS else "final_perplexity"
    out = []
    for name, group in record["groups"].items():
        mine = configured.get(name)
        chosen = group["chosen"]
        differs = (
            []
            if mine is None
            else [k for k in TUNED if not math.isclose(float(mine[k]), float(chosen[k]))]
            + [k for k in MECHANISM if k in chosen and k in mine and mine[k] != chosen[k]]
        )
        point = next((p for p in group["points"] if p.get("run") == group.get("chosen_run")), {})
        method = point.get("method") or group["points"][0].get("method") or "adloco"
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
                "metric": metric,
                "by_final_perplexity": group.get("by_final_perplexity", group.get("chosen_run")),
                "edges": group.get("edges") or edges(group["points"], chosen, method),
            }
        )
    return out
