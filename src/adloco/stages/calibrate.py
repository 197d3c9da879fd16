"""``adloco calibrate``: one device calibrated, its record written (adloco.calibrate.device)."""

from __future__ import annotations

import argparse

from adloco.core import paths
from adloco.stages.common import CONFIG, DEVICE, EXP, EXPERIMENT, PARAMS_FILE, TOKENIZED, threads
from adloco.stages.declaration import Dvc, Key, Path_, Stage, arg, keys


def run(args: argparse.Namespace) -> int:
    from adloco.calibrate.device import calibrate

    return calibrate(STAGE.request_from(args))


STAGE = Stage(
    name="calibrate",
    help="find a device's max micro-batch and time its step-time curve",
    description="Doubling then binary search over the micro-batch at the real sequence length, "
    "dtype and model, within one node slot's memory share, with a safety margin "
    "(skipped when the config fixes max_batch); then the time of one forward+backward "
    "pass at micro-batches 1, 2, 4, ... up to nodes_per_device x max_batch and of one "
    "optimizer update (median of timed repeats), and the curve the simulated clock "
    "uses (measured x scale, or the device's roofline). Slot sharing comes from "
    f"cluster.slot_sharing. Writes {paths.calibration_file(EXP, DEVICE)}, which "
    "training reads.",
    arguments=(
        CONFIG,
        arg("--data", required=True, help="tokenized data folder (vocabulary, sequence length)"),
        arg("--device", required=True, help="device name from cluster.devices"),
        arg("--out", required=True, help=f"output JSON, {paths.calibration_file(EXP, DEVICE)}"),
        threads("Snakemake passes those of one training process"),
    ),
    run=run,
    request="adloco.calibrate.device.CalibrateRequest",
    out_files=("out",),
    trains=True,
    keys=(
        *keys("seed", "model", "cluster", "calibration"),
        Key(
            "train.inner_optimizer",
            note=("The step it times is a training step: the inner optimizer, and clipping.",),
        ),
        Key("train.grad_clip_norm"),
    ),
    dvc=Dvc(
        args=(
            ("--config", PARAMS_FILE),
            ("--data", TOKENIZED),
            ("--device", "{device}"),
            ("--out", str(paths.calibration_file(EXPERIMENT, "{device}"))),
        ),
        deps=(
            Path_(TOKENIZED),
            Path_(
                "config/devices",
                note=(
                    "The measured records a device's clock may be mapped from",
                    "(step_time.model: measured_record): editing one re-runs calibration.",
                ),
            ),
        ),
        outs=(Path_(str(paths.calibration_file(EXPERIMENT, "{device}"))),),
        foreach="${cluster.devices}",
        wildcards={"device": "${item.name}"},
    ),
)
