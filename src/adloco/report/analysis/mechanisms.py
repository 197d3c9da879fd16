"""Mechanism checks: does each AdLoCo component do what it is there for, in these runs?

Not claims of the paper, so reported apart from them (:mod:`adloco.report.analysis.claims`):
for every run of method adloco and every seed, whether the batch grew (the
largest requested global batch of the last round against the first), how
many merges happened, and in how many rounds switch mode capped the batch or
accumulated gradients. Each check says "observed" with the count of seeds, or
"not observed", or "off" when the run's settings turn the component off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adloco.report.analysis.seed_stats import median
from adloco.report.analysis.summary import merges, round_values
from adloco.report.inputs.results import RunSeed


@dataclass
class Check:
    run: str
    mechanism: str  # "batch grows", "trainers merge", "switch mode engages"
    status: str  # "observed", "not observed", "off"
    seeds_observed: int
    seeds: int
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _first_last(rows: list[dict], key: str) -> tuple[float, float] | None:
    values = round_values(rows, key)
    if not values:
        return None
    return values[min(values)], values[max(values)]


def switch_rounds(rows: list[dict]) -> dict[str, int]:
    """Rounds in which some trainer ran in each non-plain switch mode."""
    rounds: dict[str, set[int]] = {"accumulate": set(), "capped": set()}
    for r in rows:
        if r.get("switch_mode") in rounds:
            rounds[r["switch_mode"]].add(r["round"])
    return {mode: len(found) for mode, found in rounds.items()}


def _status(off: bool, observed: int) -> str:
    if off:
        return "off"
    return "observed" if observed else "not observed"


def check_run(seeds: list[RunSeed]) -> list[Check]:
    name = seeds[0].run
    settings = seeds[0].settings
    n = len(seeds)
    out = []

    pairs = [_first_last(r.rows, "requested_batch") for r in seeds]
    pairs = [p for p in pairs if p is not None]
    grew = sum(end > start for start, end in pairs)
    detail = (
        f"largest requested global batch {median([p[0] for p in pairs]):g} in the first round, "
        f"{median([p[1] for p in pairs]):g} in the last (medians over seeds)"
        if pairs
        else "no requested_batch logged"
    )
    off = settings.batch_test == "none"
    out.append(Check(name, "batch grows", _status(off, grew), grew, n, detail))

    counts = [len(merges(r.rows)) for r in seeds]
    off = settings.merge == "none" or settings.initial_trainers < 2
    merged = sum(c > 0 for c in counts)
    detail = "merges per seed: " + ", ".join(str(c) for c in counts)
    out.append(Check(name, "trainers merge", _status(off, merged), merged, n, detail))

    modes = [switch_rounds(r.rows) for r in seeds]
    engaged = sum(m["accumulate"] + m["capped"] > 0 for m in modes)
    detail = "rounds capped / accumulating per seed: " + ", ".join(
        f"{m['capped']}/{m['accumulate']}" for m in modes
    )
    policy = settings.switch
    if policy != "switch":
        detail += f" (policy {policy})"
    out.append(
        Check(name, "switch mode engages", _status(policy != "switch", engaged), engaged, n, detail)
    )
    return out


def mechanism_checks(runs: list[RunSeed]) -> list[Check]:
    """The checks of every adloco run, in configuration order."""
    names = list(dict.fromkeys(r.run for r in runs if r.method == "adloco"))
    return [c for name in names for c in check_run([r for r in runs if r.run == name])]
