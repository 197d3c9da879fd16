#!/usr/bin/env python3
"""Measure this machine's device on the runs' model and replay the runs on it, in one command.

    scripts/replay-on-this-device.py [--config config/config.yaml] [--kind cuda]
        [--name my-gpu] [--network NAME=GBIT_S,LATENCY_S ...] [--out FOLDER]

For a GPU owner who has the runs of a configuration (``make run``, or ``dvc
pull``) and its tokenized data: writes a copy of the configuration whose
devices are this machine's (``kind``, ``step_time.model: measured``, the
runs' calibrated ``max_batch`` fixed, so the timing covers every pass the
runs could log), times the step-time curve with ``adloco calibrate``, and
replays every run on it with ``adloco regimes`` — nothing is retrained.
Everything goes to ``--out`` (default ``results/<experiment>/replay/<name>/``)
and nowhere else: ``calibrate.yaml``, ``<name>.json`` (the measured curve; a
GPU keeps its own name) and ``regimes/`` (``adloco regimes``' folder:
``regimes.csv``, ``regimes.json`` and ``figures/``). The folder is written
beside ``--out`` and swapped in whole once all of it is written
(:func:`adloco.core.io.atomic_dir`), so a failed timing leaves the previous replay
as it was; a folder holding anything this script did not write (a
``calibrate.yaml`` of the user's) is refused before any work. ``--name``
names files and a folder, so it follows the rule of the configuration's
names (:data:`adloco.config.RUN_NAME`): ``../x`` or ``a/b`` is refused.
docs/calibration.md ("Replaying the runs on your device") says what the
result means and what it cannot show.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import socket
import sys
from pathlib import Path

from adloco.cli import main as adloco
from adloco.config import (
    RUN_NAME,
    ClusterConfig,
    ConfigError,
    DeviceConfig,
    load_config,
    read_yaml,
    thaw,
)
from adloco.config.yaml_file import dump_yaml
from adloco.core import errors, paths
from adloco.core.io import atomic_dir, check_replaceable, write_text_atomic
from adloco.formats.calibration import read_device_record

# Memory a CUDA device may use while timing (the max batch is fixed, so no search runs).
TIMING_MEMORY_GIB = 4.0
# The writer named in --out's manifest (adloco.core.io.check_replaceable).
WRITER = "adloco replay-on-this-device"
PROGRAM = "replay-on-this-device"
# adloco regimes' folder inside --out.
REGIMES_DIR = "regimes"


class StepFailed(Exception):
    """An adloco command of the replay failed (it printed why); its exit status."""

    def __init__(self, rc: int):
        super().__init__(rc)
        self.rc = rc


def check_name(name: str) -> str:
    """``name``, if it may name the replay's folder and files (the configuration's name rule)."""
    if RUN_NAME.fullmatch(name):
        return name
    suggestion = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_-") or "my-gpu"
    raise ConfigError(
        f"--name {name!r}: a device name holds only letters, digits, '-' and '_', and starts "
        f"with a letter or digit (it names the replay folder and the measured curve's file "
        f"<name>.json); choose another, e.g. --name {suggestion}"
    )


def default_name() -> str:
    """This machine's short host name (before its first dot)."""
    return socket.gethostname().split(".")[0]


def measured_device(device: DeviceConfig, max_batch: int, kind: str) -> DeviceConfig:
    """``device`` as this machine's: its kind, the runs' max batch, a measured curve."""
    memory = device.memory_gib
    if kind == "cuda":
        memory = max(float(memory), TIMING_MEMORY_GIB)
    step_time = dataclasses.replace(device.step_time, model="measured", scale=1.0)
    return dataclasses.replace(
        device, kind=kind, max_batch=max_batch, memory_gib=memory, step_time=step_time
    )


def calibrate_cluster(cluster: ClusterConfig, calibration_dir: Path, kind: str) -> ClusterConfig:
    """The cluster whose devices are this machine's, at the runs' calibrated max batch."""
    what = " (the runs' calibration)"
    devices = tuple(
        measured_device(d, read_device_record(calibration_dir, d, what).max_batch, kind)
        for d in cluster.devices
    )
    return dataclasses.replace(cluster, devices=devices)


def calibrate_config(config_path: str | Path, calibration_dir: Path, kind: str) -> dict:
    """The configuration file's settings, its cluster replaced by :func:`calibrate_cluster`."""
    cluster = calibrate_cluster(load_config(config_path).cluster, calibration_dir, kind)
    return {**read_yaml(config_path), "cluster": thaw(cluster)}


def step(argv: list[str]) -> None:
    """One adloco command of the replay; :class:`StepFailed` when it fails."""
    rc = adloco(argv)
    if rc:
        raise StepFailed(rc)


def replay(args: argparse.Namespace) -> None:
    """Write the replay folder ``--out`` whole: the measured curve and the regimes."""
    name = check_name(args.name)
    config = load_config(args.config)
    experiment = config.experiment
    calibration = paths.calibration_dir(experiment)
    out = Path(args.out) if args.out else paths.experiment_dir(experiment) / "replay" / name
    check_replaceable(out, WRITER, "--out")  # before the timing
    measured = calibrate_config(args.config, calibration, args.kind)
    device = config.cluster.devices[0].name
    data = paths.tokenized_dir(config.data.dataset)
    with atomic_dir(out, WRITER, "--out") as tmp:
        write_text_atomic(tmp / "calibrate.yaml", dump_yaml(measured))
        curve = tmp / f"{name}.json"
        step(["calibrate", "--config", str(tmp / "calibrate.yaml"), "--data", str(data),
              "--device", device, "--out", str(curve)])  # fmt: skip
        replayed = ["regimes", "--config", args.config, "--runs",
                    str(paths.runs_dir(experiment)), "--calibration", str(calibration),
                    "--device", str(curve), "--data", str(data),
                    "--out", str(tmp / REGIMES_DIR)]  # fmt: skip
        if config.model.source == "base":
            replayed += ["--base", str(paths.base_dir(experiment))]
        for network in args.network:
            replayed += ["--network", network]
        step(replayed)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/config.yaml", help="the runs' configuration")
    parser.add_argument("--kind", default="cuda", choices=("cuda", "cpu"), help="device to time")
    parser.add_argument("--name", default=default_name(), help="name of this device")
    parser.add_argument(
        "--network", action="append", default=[], help="NAME=GBIT_S,LATENCY_S (repeatable)"
    )
    parser.add_argument(
        "--out", default=None, help="the replay's folder (results/<experiment>/replay/<name>)"
    )
    args = parser.parse_args(argv)
    try:
        replay(args)
    except StepFailed as failed:  # the command printed its own line
        return failed.rc
    except (OSError, ValueError) as exc:
        message = errors.describe(exc)
        if message is None:
            raise
        print(f"{PROGRAM}: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
