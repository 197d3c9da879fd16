"""Where DiLoCo keeps ddp's gain: workers × local batch at ddp's global batch.

Part of ``adloco report``. The DiLoCo family splits one global batch over
its workers; with few sequences per worker each inner step sees a noisy
gradient, far below the base model's noise scale B_simple. The map's runs
are DiLoCo runs that differ from the headline DiLoCo run only in how they
split ddp's global batch (``train.nodes_per_device`` and ``initial_batch``)
and in how their learning rate is stated (``inner_lr``, ``lr_scaling``), and
that step at one effective peak inner lr (inner lr × its lr scale at the first
round): 1 × 16, 2 × 8, 4 × 4, 8 × 2, 16 × 1. Where runs at several effective
lrs qualify, the map is the largest group of one lr (a tie: the group of the
headline run), so it varies the split alone; config/config.yaml holds its runs
at ddp's effective lr, and the page names the lr. Per run: its workers,
its local batch, its median final perplexity over seeds and its share of
ddp's log-perplexity gain (:mod:`adloco.report.analysis.gain`). Beside them, the
base's B_simple (the variance stage) and the local batches the AdLoCo run
trains with over its rounds, on the same axis: whether AdLoCo's growing
batch takes it where DiLoCo keeps its gain.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from adloco.config import RunSettings
from adloco.formats.metrics import is_number
from adloco.report.analysis.gain import GainShares, median_final
from adloco.report.analysis.tuning import effective_inner_lr
from adloco.report.inputs.results import RunSeed

# Settings a map run may change against the headline DiLoCo run: the split, its name, seeds,
# and how its lr is stated (the map holds one effective lr, checked from the rows).
SPLIT_KEYS = ("name", "nodes_per_device", "initial_batch", "inner_lr", "lr_scaling")


@dataclass(frozen=True)
class MapPoint:
    run: str
    workers: int
    local_batch: int
    final: float | None  # median final validation perplexity over seeds
    share: float | None  # share of ddp's log-perplexity gain
    seeds: int
    climb: float | None = None  # median highest evaluated perplexity over the base's


@dataclass(frozen=True)
class WorkersMap:
    global_batch: int | None = None
    points: list[MapPoint] = field(default_factory=list)
    b_simple: float | None = None  # the base's noise scale, sequences
    adloco: str | None = None
    adloco_batches: list[float] = field(default_factory=list)  # its local batch, each row
    adloco_final: float | None = None
    adloco_share: float | None = None
    note: str = ""  # why there is no map ("" when there is one)
    effective_lr: float | None = None  # the points' effective peak inner lr (None: not logged)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["adloco_batches"] = _spread(self.adloco_batches)
        return out


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": median(values), "max": max(values)}


def _first(runs: list[RunSeed], name: str) -> RunSeed | None:
    return next((r for r in runs if r.run == name), None)


def _split(run: RunSeed) -> tuple[int, int, int] | None:
    """(workers, local batch, global batch) of its first row; None without rows."""
    row = next(iter(run.rows), None)
    keys = ("nodes", "local_batch", "effective_batch")
    if row is None or not all(is_number(row.get(k)) for k in keys):
        return None
    return int(row["nodes"]), int(row["local_batch"]), int(row["effective_batch"])


def _same_but_split(a: RunSettings, b: RunSettings) -> bool:
    blank = dict.fromkeys(SPLIT_KEYS)
    return dataclasses.replace(a, **blank) == dataclasses.replace(b, **blank)


def _on_the_map(runs: list[RunSeed], head: RunSeed, global_batch: int):
    """(name, workers, local batch, seeds) of the map's runs, and their effective lr.

    Every DiLoCo run that splits ``global_batch`` and is the headline run but for
    :data:`SPLIT_KEYS` qualifies; the map keeps the largest group of one effective
    peak lr (a tie: the headline run's group), one run per split (the headline run where
    it is one).
    """
    groups: dict[float | None, list[tuple[str, int, int, int]]] = {}
    for name in dict.fromkeys(r.run for r in runs):
        first = _first(runs, name)
        split = _split(first)
        if first.method != "diloco" or split is None or split[2] != global_batch:
            continue
        if _same_but_split(first.settings, head.settings):
            lr = effective_inner_lr(first)
            key = None if lr is None else float(f"{lr:.12g}")
            seeds = sum(1 for r in runs if r.run == name)
            groups.setdefault(key, []).append((name, split[0], split[1], seeds))
    if not groups:
        return [], None
    lr = max(groups, key=lambda k: (len(groups[k]), any(g[0] == head.run for g in groups[k])))
    # One point per split: where the headline run and a map run split the batch alike (the
    # same run in all but how its lr is stated), the headline run stands for both.
    by_split: dict[tuple[int, int], tuple[str, int, int, int]] = {}
    for point in groups[lr]:
        kept = by_split.get(point[1:3])
        if kept is None or point[0] == head.run:
            by_split[point[1:3]] = point
    return [p for p in groups[lr] if by_split[p[1:3]] is p], lr


def workers_map(
    runs: list[RunSeed],
    diloco: str | None,
    ddp: str | None,
    adloco: str | None,
    gains: GainShares,
    b_simple: float | None,
) -> WorkersMap:
    """The map's points (see the module docstring); a note says why there are none.

    ``gains``: every run's share of ddp's gain and climb
    (:func:`adloco.report.analysis.gain.gain_shares`).
    """
    anchor = _first(runs, ddp) if ddp else None
    head = _first(runs, diloco) if diloco else None
    if anchor is None or head is None or _split(anchor) is None:
        return WorkersMap(note="needs a DiLoCo run and a ddp run")
    global_batch = _split(anchor)[2]
    found, lr = _on_the_map(runs, head, global_batch)
    points = [
        MapPoint(name, workers, local, median_final(runs, name), gains.shares.get(name), seeds,
                 gains.climbs.get(name))
        for name, workers, local, seeds in found
    ]  # fmt: skip
    points.sort(key=lambda p: p.workers)
    if len(points) < 2:
        return WorkersMap(
            global_batch,
            points,
            b_simple,
            note=f"fewer than two DiLoCo runs that split ddp's global batch of {global_batch} "
            "differently (train.nodes_per_device with initial_batch)",
        )
    if adloco is None:
        return WorkersMap(global_batch, points, b_simple, effective_lr=lr)
    batches = [
        float(r["local_batch"])
        for x in runs
        if x.run == adloco
        for r in x.rows
        if is_number(r.get("local_batch"))
    ]
    final = median_final(runs, adloco)
    return WorkersMap(
        global_batch, points, b_simple, adloco, batches, final, gains.shares.get(adloco),
        effective_lr=lr,
    )  # fmt: skip
