"""The inner learning rate of each method: the tuning record, read and written.

Part of ``adloco report``. A tuning experiment trains, for each run of the
default configuration, a few copies that differ only in ``inner_lr``; its
``report.tuning_groups`` maps each default run to those copies, and its
report writes ``tuning.json`` (:func:`tuning_record`): for each group the
grid of learning rates, the median final validation perplexity over the
copy's seeds, and the chosen rate, the one with the lowest median (a tie goes
to the smaller rate, the more conservative step). The record is committed
as ``config/tuning.json``; the default configuration names it in
``report.tuning``, and its report shows it as a table (:func:`tuning_table`),
beside each run's configured ``inner_lr``, flagged where they differ.

Record: ``{"experiment", "seed", "seeds", "metric": "final_val_perplexity",
"groups": {run: {"inner_lr": [...], "value": [...], "runs": [...], "chosen": lr}}}``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from adloco.config import Config, ConfigError
from adloco.io import read_json_object
from adloco.records import is_number
from adloco.report.inputs import RunSeed
from adloco.report.stats import median

METRIC = "final_val_perplexity"


def tuning_record(
    config: Config, runs: list[RunSeed], groups: dict[str, tuple[str, ...]]
) -> dict[str, Any]:
    """The tuning.json of a tuning experiment: per group, the grid and the chosen inner lr."""
    by_run: dict[str, list[RunSeed]] = {}
    for r in runs:
        by_run.setdefault(r.run, []).append(r)
    out = {}
    for target, names in groups.items():
        unknown = [n for n in names if n not in by_run]
        if unknown:
            raise ConfigError(
                f"report.tuning_groups.{target}: no run named {', '.join(unknown)} "
                f"(runs: {', '.join(by_run)})"
            )
        grid = []
        for name in names:
            seeds = by_run[name]
            values = [r.summary.get(METRIC) for r in seeds]
            values = [float(v) if is_number(v) else math.inf for v in values]
            grid.append((seeds[0].settings.inner_lr, median(values), name))
        grid.sort()
        # Lowest median; the sort puts the smaller lr first, so a tie keeps it.
        chosen = min(grid, key=lambda g: g[1])
        out[target] = {
            "inner_lr": [g[0] for g in grid],
            "value": [None if math.isinf(g[1]) else g[1] for g in grid],
            "runs": [g[2] for g in grid],
            "chosen": chosen[0],
        }
    seeds = sorted({r.seed for r in runs if any(r.run in g for g in groups.values())})
    return {
        "experiment": config.experiment,
        "seed": config.seed,
        "seeds": seeds,
        "metric": METRIC,
        "rule": "lowest median final validation perplexity over seeds; a tie goes to the "
        "smaller inner lr",
        "groups": out,
    }


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
        lrs, values = group.get("inner_lr"), group.get("value")
        if not (isinstance(lrs, list) and isinstance(values, list) and len(lrs) == len(values)):
            raise ValueError(
                f"{path}: groups.{name}: inner_lr and value must be lists of one length"
            )
        if not is_number(group.get("chosen")):
            raise ValueError(f"{path}: groups.{name}: chosen must be a number")
    return record


def tuning_table(record: dict[str, Any], configured: dict[str, float]) -> list[dict[str, Any]]:
    """One row per tuned run: grid, values, chosen lr, the configured lr, whether they differ.

    ``configured``: run -> inner_lr of this configuration. A tuned run this
    configuration does not have is listed with no configured value.
    """
    out = []
    for name, group in record["groups"].items():
        mine = configured.get(name)
        chosen = float(group["chosen"])
        out.append(
            {
                "run": name,
                "grid": list(zip(group["inner_lr"], group["value"], strict=True)),
                "chosen": chosen,
                "configured": mine,
                "differs": mine is not None and not math.isclose(mine, chosen, rel_tol=1e-9),
            }
        )
    return out
