"""Regimes: time to target recomputed under other clocks and bandwidths, without retraining.

Every metrics row records what the simulated clock charged (``slot_work``,
``sync``), so :func:`adloco.formats.clock.recompute_sim_time_s` gives a finished run's
simulated time under any step-time curve, slot-sharing policy and network.
The round at which a run reaches a target does not depend on the clock; only
the time of that round does. For each clock model (:func:`clock_models`),
each policy of :data:`adloco.formats.clock.SLOT_SHARING` and each bandwidth of
``report.bandwidths_gbit_s`` (latency from ``cluster.network``), this module
recomputes the time to target of every seed of the AdLoCo run, of every
baseline and of the ddp anchor, and compares them as the claims do
(:func:`adloco.report.analysis.claims.measure` and ``judge``: the median paired ratio
AdLoCo / DiLoCo, AdLoCo / best baseline and AdLoCo / ddp, with its
order-statistic interval and the exact paired test). A cell's verdict and
its reason are the report's own (supported, not supported, inconclusive, not
testable); a run that never reaches a target is censored, as in the claims:
``regimes.csv`` leaves its time and the ratio empty and names it in
``censored``, never writing a ratio of 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adloco.config import ClusterConfig, Config, DeviceConfig, NetworkConfig
from adloco.core.paths import device_calibration_file
from adloco.formats.calibration import CalibrationRecord
from adloco.formats.clock import SLOT_SHARING, Network, StepTimeCurve
from adloco.report.analysis.claims import NOT_TESTABLE, Effect, _counts, judge, measure
from adloco.report.analysis.seed_stats import median
from adloco.report.analysis.summary import TargetCrossing, crossing
from adloco.report.analysis.targets import Ladder
from adloco.report.inputs.devices import BroughtDevice, NetworkPoint
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import DEFAULT_RULE, ReachRule, ReportSettings, Roles


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


def calibration_record(cal_dir: Path, name: str) -> CalibrationRecord | None:
    """A device's calibration file, or None when there is none (a malformed one raises)."""
    return CalibrationRecord.read_if_present(device_calibration_file(cal_dir, name), name)


def _device_curve(
    key: str, record: CalibrationRecord | None, device: DeviceConfig, seq_len: int
) -> StepTimeCurve:
    """One device's curve under clock model ``key``; KeyError, TypeError or ValueError: none."""
    if record is None:
        raise KeyError("no calibration file")
    if key == "run":
        return record.curve("step_time_curve")
    if key == "measured":
        return record.curve("step_time_measured")
    tflops = (record.get("step_time") or {}).get("speed_tflops") or device.speed_tflops
    if not tflops:
        raise KeyError("speed_tflops")
    return StepTimeCurve.linear_in_tokens(
        int(record.require("model_parameters")),
        int(record.get("seq_len_tokens") or seq_len),
        float(tflops),
    )


def clock_models(config: Config, cal_dir: Path) -> list[ClockModel]:
    """The three clock models of the sweep, from each device's calibration file.

    linear: 6 · parameters FLOPs per token at the device's ``speed_tflops``
    (:meth:`StepTimeCurve.linear_in_tokens`); run: the ``step_time_curve``
    the runs were charged with; measured: ``step_time_measured``, the curve
    timed on the machine that ran the calibration.
    """
    records = {d.name: (calibration_record(cal_dir, d.name), d) for d in config.cluster.devices}
    out = []
    for key in ("linear", "run", "measured"):
        curves: dict[str, StepTimeCurve] = {}
        missing = []
        for name, (record, device) in records.items():
            try:
                curves[name] = _device_curve(key, record, device, config.data.seq_len_tokens)
            except (KeyError, TypeError, ValueError) as exc:
                missing.append(f"{name}: {exc}")
        if missing:
            note = "not available (" + "; ".join(missing) + ")"
            out.append(ClockModel(key, CLOCK_LABELS[key], None, note))
        else:
            out.append(ClockModel(key, CLOCK_LABELS[key], curves, ""))
    return out


def clock_source(config: Config, cal_dir: Path) -> str:
    """The device the runs' clock comes from, in words, from each device's calibration file.

    A ``measured_record`` clock names the GPU, the model shape and the
    sequence length it was timed at (the record's ``source``); a roofline its
    knee and peak rate; a measured one this machine. "" when no file says.
    """
    words = []
    for device in config.cluster.devices:
        record = calibration_record(cal_dir, device.name)
        step = (record.get("step_time") if record else None) or {}
        model = step.get("model")
        if model == "measured_record":
            source = step.get("source") or {}
            shape = (source.get("provenance") or {}).get("shape")
            params = source.get("model_parameters")
            what = ", ".join(
                w
                for w in (
                    f"{params:,} parameters" if isinstance(params, int) else "",
                    f"{step.get('record_seq_len_tokens')} tokens a sequence",
                    str(source.get("dtype") or ""),
                )
                if w
            )
            gpu = source.get("gpu_name") or step.get("record")
            at = f" at {shape}" if shape else ""
            words.append(
                f"{device.name}: an {gpu}{at} ({what}), mapped at equal tokens per pass "
                f"({config.data.seq_len_tokens}-token sequences here)"
            )
        elif model == "roofline":
            words.append(
                f"{device.name}: a roofline flat up to {step.get('saturation_batch')} sequences a "
                f"pass, then {step.get('speed_tflops'):g} TFLOP/s"
            )
        elif model == "measured":
            words.append(
                f"{device.name}: the curve measured on the calibrating machine "
                f"× {step.get('scale')}"
            )
    return "; ".join(words)


def is_linear(curve: StepTimeCurve) -> bool:
    """True when a pass costs the same per sequence at every batch and updates are free."""
    if curve.update_s:
        return False
    top = 2 * max(curve.batches)
    per = [curve.pass_s(b) / b for b in range(1, top + 1)]
    return all(math.isclose(p, per[0], rel_tol=1e-9) for p in per)


def sweep_bandwidths(network: NetworkConfig, settings: ReportSettings) -> tuple[float, ...]:
    """The configured sweep plus the cluster's own bandwidth, so the runs' setting is a cell."""
    own = float(network.bandwidth_gbit_s)
    values = set(settings.bandwidths_gbit_s)
    if not any(math.isclose(own, b, rel_tol=1e-9) for b in values):
        values.add(own)
    return tuple(sorted(values))


def brought_model(device: BroughtDevice, device_names: list[str]) -> ClockModel:
    """A clock model that charges every device of the cluster with a brought device's curve."""
    # The label is the name alone: it heads table rows and legends; the source is
    # listed with the brought devices.
    return ClockModel(
        f"device:{device.name}", device.name, {d: device.curve for d in device_names}, ""
    )


def bandwidth_text(gbit: float) -> str:
    if gbit >= 1:
        return f"{gbit:.3g} Gbit/s"
    return f"{gbit * 1000:.3g} Mbit/s"


def sweep_networks(
    network: NetworkConfig, settings: ReportSettings, brought: tuple[NetworkPoint, ...] = ()
) -> list[NetworkPoint]:
    """The swept bandwidths at the cluster's latency, then every network brought."""
    latency = float(network.latency_s)
    return [NetworkPoint(bw, latency) for bw in sweep_bandwidths(network, settings)] + list(brought)


@dataclass(frozen=True)
class RegimeCell:
    target: float
    clock: str  # a clock model's key (linear, run, measured, device:<name>, roofline)
    sharing: str
    bandwidth_gbit_s: float
    against: str  # "diloco", "best" (the best baseline of this cell), "ddp", "baseline:<run>"
    baseline: str  # the run compared with; for "best", the best baseline by median
    effect: Effect  # AdLoCo / baseline time to target, paired by seed
    verdict: str  # the claim's verdict in this cell, in the report's words (claims.VERDICTS)
    adloco_median_s: float  # inf: the median seed never reaches the target (censored)
    baseline_median_s: float
    own: bool  # the clock, sharing and bandwidth the runs were trained under
    saturation_batch: int | None = None  # roofline sweeps: the curve's saturation batch
    latency_s: float | None = None
    network: str = ""  # a brought network's name
    reason: str = ""  # why the verdict, as the report says it (claims.judge)

    @property
    def censored(self) -> str:
        """Which side never reaches the target: "adloco", "baseline", "both" or ""."""
        e = self.effect
        mine = math.isinf(self.adloco_median_s) or e.estimate == math.inf
        theirs = math.isinf(self.baseline_median_s) or e.estimate == 0
        if math.isnan(e.estimate) and e.both_censored:
            mine = theirs = True
        return {(True, True): "both", (True, False): "adloco", (False, True): "baseline"}.get(
            (mine, theirs), ""
        )

    def as_dict(self) -> dict[str, Any]:
        e = self.effect
        interval = e.interval

        def measured(v):
            # A censored value (a run that never gets there: inf, or a ratio of 0) is empty.
            return None if v is None or not (math.isfinite(v) and v > 0) else v

        return {
            "target_perplexity": self.target,
            "clock": self.clock,
            "saturation_batch": self.saturation_batch,
            "slot_sharing": self.sharing,
            "bandwidth_gbit_s": self.bandwidth_gbit_s,
            "latency_s": self.latency_s,
            "network": self.network or None,
            "against": self.against,
            "baseline": self.baseline,
            "adloco_median_s": measured(self.adloco_median_s),
            "baseline_median_s": measured(self.baseline_median_s),
            "ratio_estimate": measured(e.estimate),
            "ratio_low": None if interval is None else measured(interval.low),
            "ratio_high": None if interval is None else measured(interval.high),
            "ratio_interval": None if interval is None else interval.name(),
            "censored": self.censored or None,
            "pairs": len(e.seeds),
            "p_adloco_faster": e.test.p_less,
            "p_adloco_slower": e.test.p_greater,
            "verdict": self.verdict,
            "own_setting": self.own,
        }


Times = dict[str, dict[float, dict[int, float]]]  # run -> target -> seed -> seconds


# (run, seed) -> target -> where it is reached
Reached = dict[tuple[str, int], dict[float, TargetCrossing | None]]


def reach_rounds(
    runs: list[RunSeed], names: list[str], targets: tuple[float, ...], rule: ReachRule | str
) -> Reached:
    """Where each seed of the runs ``names`` reaches each target (no clock needed)."""
    return {
        (r.run, r.seed): {t: crossing(r.rows, t, rule) for t in targets}
        for r in runs
        if r.run in names
    }


def times_to_target(
    runs: list[RunSeed],
    name: str,
    targets: tuple[float, ...],
    curves: Mapping[str, StepTimeCurve],
    network: Network,
    sharing: str,
    rule: ReachRule | str = DEFAULT_RULE,
    reached: Reached | None = None,
) -> dict[float, dict[int, float]]:
    """Target -> seed -> the recomputed time to target; inf when never reached.

    ``reached``: the crossings of :func:`reach_rounds`, when the caller sweeps
    many clocks over the same runs (where a run crosses a target does not
    depend on the clock; its time there does).
    """
    reached = reached or reach_rounds(runs, [name], targets, rule)
    out: dict[float, dict[int, float]] = {t: {} for t in targets}
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        crossings = reached[(r.run, r.seed)]
        last = max((c.round for c in crossings.values() if c is not None), default=None)
        # Time to target needs the rounds up to the last one reached, not the whole run.
        clock = {} if last is None else r.clock.cumulative_s(curves, network, sharing, last)
        for t in targets:
            c = crossings[t]
            out[t][r.seed] = math.inf if c is None else c.value(clock)
    return out


def times_of(
    runs: list[RunSeed],
    names: list[str],
    targets: tuple[float, ...],
    curves: Mapping[str, StepTimeCurve],
    network: Network,
    sharing: str,
    reached: Reached,
) -> Times:
    """Every run of ``names`` under one clock setting: run -> target -> seed -> seconds."""
    return {
        n: times_to_target(runs, n, targets, curves, network, sharing, reached=reached)
        for n in names
    }


def recomputable(runs: list[RunSeed], names: list[str]) -> bool:
    """Whether every row of the runs ``names`` records what the clock charged."""
    return all(
        "slot_work" in row and "sync" in row for r in runs if r.run in names for row in r.rows
    )


def compared_groups(roles: Roles) -> dict[str, list[str]]:
    """The cell kinds: against DiLoCo, the best baseline, the ddp anchor, each other baseline.

    Claim 1 compares AdLoCo with every one of them, so every setting does too.
    """
    groups = {
        "diloco": [roles.diloco] if roles.diloco else [],
        "best": roles.all_baselines(),
        "ddp": [roles.ddp] if roles.ddp else [],
        **{f"baseline:{b}": [b] for b in roles.baselines},
    }
    return {k: v for k, v in groups.items() if v}


def compared_runs(roles: Roles) -> list[str]:
    """AdLoCo and every run it is compared with in a regime cell."""
    groups = compared_groups(roles)
    return list(dict.fromkeys([roles.adloco, *(n for g in groups.values() for n in g)]))


def judge_cell(
    subject: dict[int, float],
    other: dict[int, float],
    names: tuple[str, str],
    target: float,
    settings: ReportSettings,
    ladder: Ladder | None = None,
) -> tuple[Effect, str, str]:
    """The effect, verdict and reason of one cell, as the report judges claim 1.

    ``names``: AdLoCo's run and the label of the run compared with. As in
    :func:`adloco.report.analysis.claims.compare`, a target the ladder finds not
    testable (at or above the unigram perplexity) gives no verdict, and the
    ladder's caveat follows the reason.
    """
    effect = measure(subject, other, settings)
    why = ladder.untestable.get(target, "") if ladder else ""
    if why:
        return effect, NOT_TESTABLE, why
    counts = _counts(names[0], names[1], subject, other)
    verdict, reason = judge(effect, *names, "simulated time", settings, counts)
    caveat = ladder.caveat if ladder else ""
    return effect, verdict, "; ".join(r for r in (reason, caveat) if r)


def sweep_cells(
    times: Times,
    roles: Roles,
    targets: tuple[float, ...],
    settings: ReportSettings,
    where: dict[str, Any],
    ladder: Ladder | None = None,
) -> list[RegimeCell]:
    """The cells of one clock setting: ``times`` is run -> target -> seed -> seconds."""
    cells = []
    for t in targets:
        ad = times[roles.adloco][t]
        for against, names in compared_groups(roles).items():
            medians = {n: median(list(times[n][t].values())) for n in names}
            best = min(names, key=lambda n: medians[n])
            label = best if len(names) == 1 else f"the best baseline ({best})"
            effect, verdict, reason = judge_cell(
                ad, times[best][t], (roles.adloco, label), t, settings, ladder
            )
            cells.append(
                RegimeCell(
                    t, where["clock"], where["sharing"], where["bandwidth_gbit_s"], against,
                    best, effect, verdict, median(list(ad.values())), medians[best],
                    where.get("own", False), where.get("saturation_batch"),
                    where.get("latency_s"), where.get("network", ""), reason,
                )
            )  # fmt: skip
    return cells


def regime_cells(
    runs: list[RunSeed],
    roles: Roles,
    targets: tuple[float, ...],
    cluster: ClusterConfig,
    models: list[ClockModel],
    settings: ReportSettings,
    networks: list[NetworkPoint] | None = None,
    ladder: Ladder | None = None,
) -> list[RegimeCell]:
    """Every (target, clock, sharing, network) against DiLoCo, the best baseline and ddp.

    ``networks``: the swept bandwidths at the cluster's latency by default
    (:func:`sweep_networks`), then any brought. Every cell compares AdLoCo
    with each run of :func:`compared_groups`: every comparison of claim 1.
    ``ladder``: the targets' ladder, whose untestable targets and caveat the
    verdicts take as the report's do.
    """
    names = compared_runs(roles)
    if roles.adloco is None or len(names) < 2 or not targets or not recomputable(runs, names):
        return []  # rows written before the clock recorded its work cannot be recomputed
    networks = networks if networks is not None else sweep_networks(cluster.network, settings)
    own_bw = float(cluster.network.bandwidth_gbit_s)
    own_latency = float(cluster.network.latency_s)
    own_sharing = cluster.slot_sharing
    reached = reach_rounds(runs, names, targets, settings.reach_rule)
    cells = []
    for model in models:
        if model.curves is None:
            continue
        for sharing in SLOT_SHARING:
            for point in networks:
                times = times_of(
                    runs, names, targets, model.curves, point.network(), sharing, reached
                )
                own = (
                    model.key == "run"
                    and not point.name  # a brought network is not the runs' own
                    and sharing == own_sharing
                    and math.isclose(point.bandwidth_gbit_s, own_bw, rel_tol=1e-9)
                    and math.isclose(point.latency_s, own_latency, rel_tol=1e-9)
                )
                where = {
                    "clock": model.key, "sharing": sharing, "own": own,
                    "bandwidth_gbit_s": point.bandwidth_gbit_s, "latency_s": point.latency_s,
                    "network": point.name,
                }  # fmt: skip
                cells.extend(sweep_cells(times, roles, targets, settings, where, ladder))
    return cells


REGIME_COLUMNS = [
    "target_perplexity",
    "clock",
    "saturation_batch",
    "slot_sharing",
    "bandwidth_gbit_s",
    "latency_s",
    "network",
    "against",
    "baseline",
    "adloco_median_s",
    "baseline_median_s",
    "ratio_estimate",
    "ratio_low",
    "ratio_high",
    "ratio_interval",
    "censored",
    "pairs",
    "p_adloco_faster",
    "p_adloco_slower",
    "verdict",
    "own_setting",
]
