"""Regimes: time to target recomputed under other clocks and bandwidths, without retraining.

Every metrics row records what the simulated clock charged (``slot_work``,
``sync``), so :func:`adloco.clock.recompute_sim_time_s` gives a finished run's
simulated time under any step-time curve, slot-sharing policy and network.
The round at which a run reaches a target does not depend on the clock; only
the time of that round does. For each clock model (:func:`clock_models`),
each policy of :data:`adloco.clock.SLOT_SHARING` and each bandwidth of
``report.bandwidths_gbit_s`` (latency from ``cluster.network``), this module
recomputes the time to target of every seed of the AdLoCo run and of every
baseline, and gives the ratio of medians AdLoCo / DiLoCo and AdLoCo / best
baseline with its bootstrap interval (:func:`adloco.report.stats.bootstrap_ratio`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adloco.clock import SLOT_SHARING, Network, StepTimeCurve, recompute_sim_time_s
from adloco.report.inputs import RunSeed
from adloco.report.settings import ReportSettings, Roles
from adloco.report.stats import Interval, bootstrap_ratio, median
from adloco.report.summary import round_to_target


@dataclass(frozen=True)
class ClockModel:
    """A step-time curve for every device, or the reason there is none."""

    key: str  # linear, run, measured
    label: str
    curves: Mapping[str, StepTimeCurve] | None
    note: str


CLOCK_LABELS = {
    "linear": "linear in tokens",
    "run": "the runs' own curve",
    "measured": "measured on this machine",
}


def _record(cal_dir: Path, name: str) -> dict | None:
    path = cal_dir / f"{name}.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def clock_models(config: dict, cal_dir: Path) -> list[ClockModel]:
    """The three clock models of the sweep, from each device's calibration file.

    linear: 6 · parameters FLOPs per token at the device's ``speed_tflops``
    (:meth:`StepTimeCurve.linear_in_tokens`); run: the ``step_time_curve``
    the runs were charged with; measured: ``step_time_measured``, the curve
    timed on the machine that ran the calibration.
    """
    records = {d["name"]: (_record(cal_dir, d["name"]), d) for d in config["cluster"]["devices"]}
    seq_len = config["data"].get("seq_len_tokens")
    out = []
    for key in ("linear", "run", "measured"):
        curves: dict[str, StepTimeCurve] = {}
        missing = []
        for name, (record, device) in records.items():
            try:
                if record is None:
                    raise KeyError("no calibration file")
                if key == "run":
                    curves[name] = StepTimeCurve.from_dict(record["step_time_curve"])
                elif key == "measured":
                    curves[name] = StepTimeCurve.from_dict(record["step_time_measured"])
                else:
                    tflops = (record.get("step_time") or {}).get("speed_tflops") or device.get(
                        "speed_tflops"
                    )
                    if not tflops:
                        raise KeyError("speed_tflops")
                    curves[name] = StepTimeCurve.linear_in_tokens(
                        int(record["model_parameters"]),
                        int(record.get("seq_len_tokens") or seq_len),
                        float(tflops),
                    )
            except (KeyError, TypeError, ValueError) as exc:
                missing.append(f"{name}: {exc}")
        if missing:
            out.append(
                ClockModel(
                    key, CLOCK_LABELS[key], None, "not available (" + "; ".join(missing) + ")"
                )
            )
        else:
            out.append(ClockModel(key, CLOCK_LABELS[key], curves, ""))
    return out


def is_linear(curve: StepTimeCurve) -> bool:
    """True when a pass costs the same per sequence at every batch and updates are free."""
    if curve.update_s:
        return False
    top = 2 * max(curve.batches)
    per = [curve.pass_s(b) / b for b in range(1, top + 1)]
    return all(math.isclose(p, per[0], rel_tol=1e-9) for p in per)


def sweep_bandwidths(config: dict, settings: ReportSettings) -> tuple[float, ...]:
    """The configured sweep plus the cluster's own bandwidth, so the runs' setting is a cell."""
    own = float(config["cluster"]["network"]["bandwidth_gbit_s"])
    values = set(settings.bandwidths_gbit_s)
    if not any(math.isclose(own, b, rel_tol=1e-9) for b in values):
        values.add(own)
    return tuple(sorted(values))


@dataclass(frozen=True)
class RegimeCell:
    target: float
    clock: str
    sharing: str
    bandwidth_gbit_s: float
    against: str  # "diloco" (the DiLoCo baseline) or "best" (the best baseline of this cell)
    baseline: str  # the run compared with; for "best", the best baseline by median
    interval: Interval
    adloco_median_s: float
    baseline_median_s: float
    own: bool  # the clock, sharing and bandwidth the runs were trained under

    @property
    def holds(self) -> str:
        """ "holds", "fails" or "unclear" for AdLoCo faster than the baseline."""
        i = self.interval
        if i.low is None or i.high is None or math.isnan(i.low) or math.isnan(i.high):
            return "unclear"
        if i.high < 1:
            return "holds"
        if i.low >= 1:
            return "fails"
        return "unclear"

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_perplexity": self.target,
            "clock": self.clock,
            "slot_sharing": self.sharing,
            "bandwidth_gbit_s": self.bandwidth_gbit_s,
            "against": self.against,
            "baseline": self.baseline,
            "adloco_median_s": None if math.isinf(self.adloco_median_s) else self.adloco_median_s,
            "baseline_median_s": None
            if math.isinf(self.baseline_median_s)
            else self.baseline_median_s,
            "own_setting": self.own,
            "claim": self.holds,
            **{f"ratio_{k}": v for k, v in self.interval.as_dict().items()},
        }


def times_to_target(
    runs: list[RunSeed],
    name: str,
    targets: tuple[float, ...],
    curves: Mapping[str, StepTimeCurve],
    network: Network,
    sharing: str,
) -> dict[float, list[float]]:
    """Target -> per seed (seed order) the recomputed time to target; inf when never reached."""
    out: dict[float, list[float]] = {t: [] for t in targets}
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        clock = recompute_sim_time_s(r.rows, curves, network, sharing)
        for t in targets:
            round_ = round_to_target(r.rows, t)
            out[t].append(math.inf if round_ is None else clock[round_])
    return out


def regime_cells(
    runs: list[RunSeed],
    roles: Roles,
    targets: tuple[float, ...],
    config: dict,
    models: list[ClockModel],
    settings: ReportSettings,
) -> list[RegimeCell]:
    """Every (target, clock, sharing, bandwidth) against DiLoCo and against the best baseline."""
    baselines = roles.all_baselines()
    if roles.adloco is None or not baselines or not targets:
        return []
    compared = [r for r in runs if r.run in (roles.adloco, *baselines)]
    if any("slot_work" not in row or "sync" not in row for r in compared for row in r.rows):
        return []  # rows written before the clock recorded its work cannot be recomputed
    latency = float(config["cluster"]["network"]["latency_s"])
    own_bw = float(config["cluster"]["network"]["bandwidth_gbit_s"])
    own_sharing = config["cluster"].get("slot_sharing", "concurrent")
    cells = []
    for model in models:
        if model.curves is None:
            continue
        for sharing in SLOT_SHARING:
            for bw in sweep_bandwidths(config, settings):
                network = Network(bw * 1e9 / 8, latency)
                times = {
                    name: times_to_target(runs, name, targets, model.curves, network, sharing)
                    for name in [roles.adloco, *baselines]
                }
                own = (
                    model.key == "run"
                    and sharing == own_sharing
                    and math.isclose(bw, own_bw, rel_tol=1e-9)
                )
                for t in targets:
                    ad = times[roles.adloco][t]
                    groups = {"diloco": [roles.diloco] if roles.diloco else [], "best": baselines}
                    for against, names in groups.items():
                        if not names:
                            continue
                        medians = {n: median(times[n][t]) for n in names}
                        best = min(names, key=lambda n: medians[n])
                        interval = bootstrap_ratio(
                            ad,
                            [times[n][t] for n in names],
                            settings.bootstrap_samples,
                            settings.bootstrap_seed,
                            settings.confidence,
                        )
                        cells.append(
                            RegimeCell(
                                t,
                                model.key,
                                sharing,
                                bw,
                                against,
                                best,
                                interval,
                                median(ad),
                                medians[best],
                                own,
                            )
                        )
    return cells


REGIME_COLUMNS = [
    "target_perplexity",
    "clock",
    "slot_sharing",
    "bandwidth_gbit_s",
    "against",
    "baseline",
    "adloco_median_s",
    "baseline_median_s",
    "ratio_estimate",
    "ratio_low",
    "ratio_high",
    "ratio_confidence",
    "ratio_bootstrap_samples",
    "ratio_undetermined_samples",
    "claim",
    "own_setting",
]
