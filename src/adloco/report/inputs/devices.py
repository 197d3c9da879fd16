"""Devices and networks brought from elsewhere: would AdLoCo win on *this* cluster?

Part of ``adloco report`` and ``adloco regimes``. A reader brings a device
— a calibration file that ``adloco calibrate`` wrote on another machine (its
``step_time_measured``, the curve timed there; docs/calibration.md), or a
roofline given as numbers — and networks (bandwidth and latency); the regime
sweep then recomputes every run's time to target under them without
retraining (:mod:`adloco.report.analysis.regime_sweep`), and claim 1's comparisons are
judged there. A brought curve replaces the step-time curve of every device
of the cluster; slots that shared a device in the runs share it still.

What is replayed is only the time of the passes the runs logged, and those
are the passes the runs' memory allowed: a curve that does not cover every
logged pass size is refused, naming the device and the size
(:func:`check_coverage`; the sizes are those the clock itself would charge,
found by running it with a recording curve, :func:`logged_pass_sizes`). A
device file must name the model it was measured on (``model_parameters``),
and one measured on another model than the runs' is refused too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adloco.formats.calibration import CalibrationRecord
from adloco.formats.clock import SLOT_SHARING, Network, StepTimeCurve, recompute_sim_time_s
from adloco.report.inputs.results import RunSeed


@dataclass(frozen=True)
class BroughtDevice:
    name: str
    curve: StepTimeCurve
    source: str  # where it comes from, in words
    covers_every_size: bool  # a roofline given as numbers extends to any pass by construction


@dataclass(frozen=True)
class NetworkPoint:
    """One network of a sweep: a swept bandwidth at the cluster's latency, or one brought."""

    bandwidth_gbit_s: float
    latency_s: float
    name: str = ""  # a brought network's name; "" for the sweep

    def network(self) -> Network:
        return Network(self.bandwidth_gbit_s * 1e9 / 8, self.latency_s)


# The longest name a figure's legend shows.
NAME_MAX = 60


def _numbers(spec: str, option: str, count: tuple[int, int]) -> tuple[str, list[float]]:
    name, sep, values = spec.partition("=")
    if not sep or not name:
        raise ValueError(f"{option} {spec!r}: expected NAME=NUMBER,NUMBER[,...]")
    # The name labels the figures, where matplotlib reads text between two $ as
    # mathematics (a bad formula failed the figure after the replay's work).
    odd = next((c for c in name if c == "$" or not c.isprintable()), None)
    if odd is not None or len(name) > NAME_MAX:
        what = f"holds {odd!r}" if odd is not None else f"is over {NAME_MAX} characters"
        raise ValueError(
            f"{option} {spec!r}: the name {name!r} {what}, and it labels the figures; name it "
            "with letters, digits, spaces and - _ . ( ) ,"
        )
    try:
        numbers = [float(v) for v in values.split(",")]
    except ValueError:
        raise ValueError(f"{option} {spec!r}: {values!r} are not numbers") from None
    if not count[0] <= len(numbers) <= count[1] or not all(
        math.isfinite(v) and v >= 0 for v in numbers
    ):
        raise ValueError(f"{option} {spec!r}: expected {count[0]} to {count[1]} numbers >= 0")
    return name, numbers


def parse_roofline(spec: str) -> BroughtDevice:
    """``NAME=SECONDS_PER_SEQUENCE,SATURATION_BATCH[,UPDATE_S]``: a roofline as numbers."""
    name, numbers = _numbers(spec, "--roofline", (2, 3))
    per_sequence, saturation = numbers[0], numbers[1]
    if per_sequence <= 0 or saturation < 1 or not saturation.is_integer():
        raise ValueError(
            f"--roofline {spec!r}: seconds per sequence must be > 0 and the saturation batch "
            "an integer >= 1"
        )
    update = numbers[2] if len(numbers) == 3 else 0.0
    curve = StepTimeCurve.roofline(per_sequence, int(saturation), update)
    source = (
        f"roofline: {per_sequence:g} s a sequence, flat up to {int(saturation)} sequences, "
        f"update {update:g} s"
    )
    return BroughtDevice(name, curve, source, True)


def parse_network(spec: str) -> NetworkPoint:
    """``NAME=GBIT_S,LATENCY_S``: a network to replay the runs on."""
    name, numbers = _numbers(spec, "--network", (2, 2))
    if numbers[0] <= 0:
        raise ValueError(f"--network {spec!r}: the bandwidth must be > 0")
    return NetworkPoint(numbers[0], numbers[1], name)


# What a device file must share with the runs: a curve of another model times other passes.
MODEL_KEYS = ("model_parameters", "seq_len_tokens")


def load_device_file(path: Path, runs_model: Mapping[str, int | None]) -> BroughtDevice:
    """A calibration file from another machine: its measured curve, on the runs' model.

    ``runs_model``: the runs' ``model_parameters`` and ``seq_len_tokens``
    (None where unknown), which the file must match. The file must name its
    model: one without ``model_parameters`` is refused, since nothing says
    its curve timed the runs' passes.
    """
    record = CalibrationRecord.read(path, missing=f"{path}: device file not found")
    curve = record.curve("step_time_measured", " (write it with `adloco calibrate`)")
    redo = (
        "time it with `adloco calibrate` on the runs' configuration (docs/calibration.md, "
        '"Replaying the runs on your device")'
    )
    if record.get("model_parameters") is None:
        raise ValueError(
            f"{path}: has no model_parameters, so the model its curve was timed on is unknown; "
            + redo
        )
    for key in MODEL_KEYS:
        mine, theirs = runs_model.get(key), record.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            raise ValueError(
                f"{path}: measured with {key} {theirs}, the runs' model has {mine}: its curve "
                f"times other passes than the runs logged; {redo}"
            )
    # The GPU's own name when the file has one, else the file's: the record's "device" is
    # the configured device it stood in for, not the machine measured.
    name = str(record.get("gpu_name") or path.stem)
    return BroughtDevice(name, curve, f"measured, {path.name}", False)


class PassRecorder:
    """A step-time curve that charges nothing and records every pass size it is asked for."""

    update_s = 0.0

    def __init__(self) -> None:
        self.sizes: set[int] = set()

    def pass_s(self, micro_batch: int) -> float:
        self.sizes.add(micro_batch)
        return 0.0


def logged_pass_sizes(runs: list[RunSeed], names: list[str], sharing: str) -> set[int]:
    """Every pass size the clock charges the runs ``names`` under ``sharing``.

    The clock itself composes the passes (concurrent slots of a device add
    their micro-batches into one pass), so it runs here with a recording
    curve on every device.
    """
    recorder = PassRecorder()
    for r in runs:
        if r.run not in names:
            continue
        devices = {w["device"] for row in r.rows for w in row["slot_work"]}
        recompute_sim_time_s(r.rows, {d: recorder for d in devices}, Network(1.0, 0.0), sharing)
    return recorder.sizes


def check_coverage(device: BroughtDevice, sizes: set[int], sharing: str) -> None:
    """Refuse a curve that does not cover every logged pass size, naming the device and size."""
    if device.covers_every_size or not sizes:
        return
    low, high = device.curve.batches[0], device.curve.batches[-1]
    outside = sorted(s for s in sizes if not low <= s <= high)
    if outside:
        raise ValueError(
            f"device {device.name}: its curve covers passes of {low} to {high} sequences; the "
            f"runs logged passes of {', '.join(map(str, outside))} sequences (slots "
            f"{sharing.replace('_', ' ')}), which it does not: measure it from "
            f"{min(sizes)} up to {max(sizes)} sequences"
        )


def check_devices(devices: list[BroughtDevice], runs: list[RunSeed], names: list[str]) -> None:
    """Every brought device covers the passes of the runs ``names`` under both policies."""
    for sharing in SLOT_SHARING:
        sizes = logged_pass_sizes(runs, names, sharing) if devices else set()
        for device in devices:
            check_coverage(device, sizes, sharing)
