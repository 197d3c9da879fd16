"""The tuning record ``report.tuning`` names (config/tuning.json), read and checked.

The tune experiment's report writes it; the report of another experiment
reads it to show, beside each run's settings, the grid its method was tuned
on and the point chosen (:mod:`adloco.report.analysis.tuning`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adloco.core.io import read_json_object
from adloco.formats.metrics import is_number

TUNED = ("inner_lr", "outer_lr", "outer_momentum", "nesterov")  # a point's tuned settings


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
