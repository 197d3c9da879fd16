#!/usr/bin/env python3
"""Measure this machine's device on the runs' model and replay the runs on it, in one command.

    scripts/replay-on-this-device.py [--config config/config.yaml] [--kind cuda]
        [--name my-gpu] [--network NAME=GBIT_S,LATENCY_S ...]

For a GPU owner who has the runs of a configuration (``make run``, or ``dvc
pull``) and its tokenized data: writes a copy of the configuration whose
devices are this machine's (``kind``, ``step_time.model: measured``, the
runs' calibrated ``max_batch`` fixed, so the timing covers every pass the
runs could log), times the step-time curve with ``adloco calibrate``, and
replays every run on it with ``adloco regimes`` — nothing is retrained.
Everything goes to ``results/<experiment>/replay/<name>/``: ``calibrate.yaml``,
``<name>.json`` (the measured curve; a GPU keeps its own name), ``regimes.csv``,
``regimes.json`` and ``figures/``. docs/calibration.md ("Replaying the runs on your device") says
what the result means and what it cannot show.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import sys
from pathlib import Path

from adloco import paths
from adloco.calibration_record import read_device_record
from adloco.cli import main as adloco
from adloco.config import ClusterConfig, DeviceConfig, load_config, read_yaml, thaw
from adloco.config.yaml_file import dump_yaml

# Memory a CUDA device may use while timing (the max batch is fixed, so no search runs).
TIMING_MEMORY_GIB = 4.0


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/config.yaml", help="the runs' configuration")
    parser.add_argument("--kind", default="cuda", choices=("cuda", "cpu"), help="device to time")
    parser.add_argument("--name", default=socket.gethostname(), help="name of this device")
    parser.add_argument(
        "--network", action="append", default=[], help="NAME=GBIT_S,LATENCY_S (repeatable)"
    )
    args = parser.parse_args(argv)

    config = load_config(args.config)
    experiment = config.experiment
    calibration = paths.calibration_dir(experiment)
    out = paths.experiment_dir(experiment) / "replay" / args.name
    out.mkdir(parents=True, exist_ok=True)
    measured = out / "calibrate.yaml"
    measured.write_text(dump_yaml(calibrate_config(args.config, calibration, args.kind)))
    device = config.cluster.devices[0].name
    data = paths.tokenized_dir(config.data.dataset)
    rc = adloco(["calibrate", "--config", str(measured), "--data", str(data),
                 "--device", device, "--out", str(out / f"{args.name}.json")])  # fmt: skip
    if rc:
        return rc
    base = paths.base_dir(experiment)
    replay = ["regimes", "--config", args.config, "--runs", str(paths.runs_dir(experiment)),
              "--calibration", str(calibration), "--device", str(out / f"{args.name}.json"),
              "--data", str(data), "--out", str(out)]  # fmt: skip
    if config.model.source == "base":
        replay += ["--base", str(base)]
    for network in args.network:
        replay += ["--network", network]
    return adloco(replay)


if __name__ == "__main__":
    sys.exit(main())
