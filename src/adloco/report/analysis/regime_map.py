"""The regime map: where the device saturates, against bandwidth, and where AdLoCo wins.

Part of ``adloco report`` and ``adloco regimes``. The paper's wall-clock
claim rests on a device that a small batch under-uses. A roofline curve
(:meth:`adloco.formats.clock.StepTimeCurve.roofline`) is flat up to its saturation
batch S and linear beyond, at the device's peak rate; S = 1 is a clock linear
in tokens, a large S a device that small passes leave mostly idle. This
module sweeps S (``report.saturation_batches``) against bandwidth, per
slot-sharing policy, keeping each device's peak rate (the seconds a sequence
costs along the last segment of the curve the runs were charged with: for
the runs' roofline, the rate it was built from) and its update time, so the
runs' own saturation batch and bandwidth reproduce their logged times, and
recomputes every seed's time to the main
target under each (:func:`adloco.formats.clock.recompute_sim_time_s`): a cell is the
median paired ratio AdLoCo / DiLoCo (and / best baseline) with its interval
and the exact test, as everywhere in the report.

The line where the ratio crosses 1 (:func:`crossings`) is found per
saturation batch between the two swept bandwidths whose ratios lie on both
sides of 1: each seed's time is interpolated linearly in 1 / bandwidth there
(a run's communication time is linear in it, its compute time does not
depend on it; exact unless a round's slowest trainer changes in between),
and the crossing solved by bisection. The same is done for the ends of the
interval of the median ratio: the band between those lines is the
uncertainty over seeds. At one bandwidth, :func:`verdict_changes` finds the
knees between which claim 1's verdict changes (the report's first screen
says where).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from adloco.config import ClusterConfig
from adloco.formats.calibration import CalibrationError
from adloco.formats.clock import SLOT_SHARING, StepTimeCurve
from adloco.report.analysis.claims import measure
from adloco.report.analysis.regime_sweep import (
    RegimeCell,
    Times,
    calibration_record,
    compared_groups,
    compared_runs,
    reach_rounds,
    recomputable,
    sweep_cells,
    times_of,
)
from adloco.report.analysis.seed_stats import median
from adloco.report.inputs.devices import NetworkPoint, logged_pass_sizes
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import ReportSettings, Roles

LINES = ("median", "low", "high")  # the estimate and the two ends of its interval


@dataclass(frozen=True)
class Rates:
    """Per device: seconds of a sequence at saturation and of an update, or why none."""

    per_sequence_s: dict[str, float]
    update_s: dict[str, float]
    own_saturation: int | None  # the runs' roofline saturation batch (None: not a roofline)
    note: str

    def curves(self, saturation: int) -> dict[str, StepTimeCurve]:
        return {
            d: StepTimeCurve.roofline(s, saturation, self.update_s[d])
            for d, s in self.per_sequence_s.items()
        }


def peak_seconds_per_sequence(curve: StepTimeCurve) -> float:
    """Seconds a sequence costs where the curve is steepest at its end: its last segment's slope.

    For the runs' roofline that is the peak rate it was built from; for a
    measured curve, the rate the device reached at the largest pass timed.
    """
    if len(curve.batches) == 1:
        return curve.fwd_bwd_s[0] / curve.batches[0]
    (x0, x1), (y0, y1) = curve.batches[-2:], curve.fwd_bwd_s[-2:]
    return (y1 - y0) / (x1 - x0)


def roofline_rates(cluster: ClusterConfig, cal_dir: Path) -> Rates:
    """Every device's peak rate and update time, from the curve the runs were charged with."""
    per_sequence, update, saturations, missing = {}, {}, set(), []
    for device in cluster.devices:
        name = device.name
        record = calibration_record(cal_dir, name)
        try:
            if record is None:
                raise CalibrationError(name)
            curve = record.curve()
        except CalibrationError:
            missing.append(f"{name}: no calibration file with a step_time_curve")
            continue
        rate = peak_seconds_per_sequence(curve)
        if not rate > 0:
            missing.append(f"{name}: the runs' curve does not rise at its end")
            continue
        per_sequence[name], update[name] = rate, curve.update_s
        step = record.get("step_time") or {}
        saturations.add(step.get("saturation_batch") if step.get("model") == "roofline" else None)
    if missing:
        return Rates({}, {}, None, "; ".join(missing))
    own = saturations.pop() if len(saturations) == 1 else None
    return Rates(per_sequence, update, own, "")


def default_saturations(runs: list[RunSeed], names: list[str], own: int | None) -> tuple[int, ...]:
    """1, 2, 4, … up to twice the largest pass the runs logged, and the runs' own."""
    largest = max(
        (max(logged_pass_sizes(runs, names, s), default=1) for s in SLOT_SHARING), default=1
    )
    values = {2**i for i in range(0, 64) if 2**i <= 2 * largest}
    if own:
        values.add(int(own))
    return tuple(sorted(values))


MapTimes = dict[tuple[str, int, int], Times]  # (sharing, saturation, network index) -> times


@dataclass
class RegimeMap:
    """The swept grid: saturation batches, networks, each point's times, its cells."""

    target: float
    saturations: tuple[int, ...]
    networks: list[NetworkPoint]
    times: MapTimes
    cells: list[RegimeCell]
    own_saturation: int | None
    note: str  # why there is no map (empty when there is one)


def regime_map(
    runs: list[RunSeed],
    roles: Roles,
    target: float | None,
    cluster: ClusterConfig,
    cal_dir: Path,
    settings: ReportSettings,
    networks: list[NetworkPoint],
) -> RegimeMap:
    """Time to ``target`` of every compared run under each (sharing, saturation, network)."""
    names = compared_runs(roles)
    rates = roofline_rates(cluster, cal_dir)
    empty = RegimeMap(target or math.nan, (), networks, {}, [], rates.own_saturation, "")
    if roles.adloco is None or len(names) < 2 or target is None:
        return replace(empty, note="no AdLoCo run, baseline or target")
    if not recomputable(runs, names):
        return replace(empty, note="the runs' rows do not record the clock's work")
    if rates.note:
        return replace(empty, note=rates.note)
    saturations = settings.saturation_batches or default_saturations(
        runs, names, rates.own_saturation
    )
    own_bw = float(cluster.network.bandwidth_gbit_s)
    own_sharing = cluster.slot_sharing
    reached = reach_rounds(runs, names, (target,), settings.reach_rule)
    times: MapTimes = {}
    cells = []
    for sharing in SLOT_SHARING:
        for s in saturations:
            curves = rates.curves(s)
            for i, point in enumerate(networks):
                times[(sharing, s, i)] = times_of(
                    runs, names, (target,), curves, point.network(), sharing, reached
                )
                own = (
                    s == rates.own_saturation
                    and sharing == own_sharing
                    and math.isclose(point.bandwidth_gbit_s, own_bw, rel_tol=1e-9)
                )
                where = {
                    "clock": "roofline", "sharing": sharing, "own": own, "saturation_batch": s,
                    "bandwidth_gbit_s": point.bandwidth_gbit_s, "latency_s": point.latency_s,
                }  # fmt: skip
                cells.extend(sweep_cells(times[(sharing, s, i)], roles, (target,), settings, where))
    # The map answers for DiLoCo and the best baseline; the others are in the bandwidth sweep.
    cells = [c for c in cells if c.against in ("diloco", "best")]
    return RegimeMap(target, saturations, networks, times, cells, rates.own_saturation, "")


@dataclass(frozen=True)
class Crossing:
    """Where one line of the map (the median ratio, or an end of its interval) crosses 1."""

    sharing: str
    against: str  # diloco or best
    saturation_batch: int
    line: str  # median, low or high
    bandwidth_gbit_s: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _statistic(times: Times, roles: Roles, against: str, target: float, line: str, settings):
    """log of the line's ratio at one point; NaN when undetermined."""
    names = compared_groups(roles)[against]
    best = min(names, key=lambda n: median(list(times[n][target].values())))
    effect = measure(times[roles.adloco][target], times[best][target], settings)
    if line == "median":
        value = effect.estimate
    elif effect.interval is None or effect.interval.kind == "none":
        return math.nan
    else:
        value = effect.interval.low if line == "low" else effect.interval.high
    if value is None or math.isnan(value):
        return math.nan
    return math.log(value) if value > 0 else -math.inf


def _between(a: Times, b: Times, weight: float) -> Times:
    """Each seed's time interpolated linearly: ``weight`` 0 gives ``a``, 1 gives ``b``."""
    out: Times = {}
    for name, by_target in a.items():
        out[name] = {}
        for t, seeds in by_target.items():
            out[name][t] = {
                s: v if math.isinf(v) else v + (b[name][t][s] - v) * weight
                for s, v in seeds.items()
            }
    return out


def crossings(grid: RegimeMap, roles: Roles, settings: ReportSettings) -> list[Crossing]:
    """Every crossing of 1 by each line, per sharing, comparison and saturation batch."""
    out = []
    points = sorted(range(len(grid.networks)), key=lambda i: grid.networks[i].bandwidth_gbit_s)
    groups = [g for g in ("diloco", "best") if g in compared_groups(roles)]
    for sharing in SLOT_SHARING:
        for against in groups:
            for s in grid.saturations:
                for line in LINES:

                    def g(times: Times, line=line, against=against) -> float:
                        return _statistic(times, roles, against, grid.target, line, settings)

                    for i, j in zip(points, points[1:], strict=False):
                        a, b = grid.times[(sharing, s, i)], grid.times[(sharing, s, j)]
                        ga, gb = g(a), g(b)
                        if math.isnan(ga) or math.isnan(gb) or (ga < 0) == (gb < 0):
                            continue
                        bw = _solve(a, b, grid.networks[i], grid.networks[j], g)
                        out.append(Crossing(sharing, against, s, line, bw))
    return out


def _solve(a: Times, b: Times, pa: NetworkPoint, pb: NetworkPoint, g) -> float:
    """The bandwidth between ``pa`` and ``pb`` where ``g`` of the interpolated times is 0."""
    ua, ub = 1 / pa.bandwidth_gbit_s, 1 / pb.bandwidth_gbit_s
    lo, hi = 0.0, 1.0  # weights of b
    below = g(a) < 0
    for _ in range(60):
        mid = (lo + hi) / 2
        if (g(_between(a, b, mid)) < 0) == below:
            lo = mid
        else:
            hi = mid
    return 1 / (ua + (ub - ua) * (lo + hi) / 2)


@dataclass(frozen=True)
class VerdictChange:
    """Two neighbouring knees of the map, in increasing order, where a verdict changes."""

    below: int  # the smaller saturation batch, with verdict ``before``
    above: int  # the next one swept, with verdict ``after``
    before: str
    after: str


def verdict_changes(
    cells: list[RegimeCell], against: str, sharing: str, bandwidth_gbit_s: float
) -> tuple[list[tuple[int, str]], list[VerdictChange]]:
    """The knees swept at one bandwidth and sharing, and where claim 1's verdict changes.

    ``cells``: the map's rows (:attr:`RegimeMap.cells`); ``against``: diloco
    or best. Returns (saturation batch, verdict) of every knee found there,
    in increasing order, and each pair of neighbours whose verdicts differ
    (none: the verdict is the same at every knee of the swept range).
    """
    row = sorted(
        (c.saturation_batch, c.verdict)
        for c in cells
        if c.clock == "roofline" and c.against == against and c.sharing == sharing
        and not c.network and c.saturation_batch is not None
        and math.isclose(c.bandwidth_gbit_s, bandwidth_gbit_s, rel_tol=1e-9)
    )  # fmt: skip
    changes = [
        VerdictChange(s, t, v, w) for (s, v), (t, w) in zip(row, row[1:], strict=False) if v != w
    ]
    return row, changes
