"""``adloco calibrate``: one device of the configuration, calibrated and its record written."""

from __future__ import annotations

import argparse
import logging

from adloco.core import paths
from adloco.stages.common import CONFIG, DEVICE, EXP, EXPERIMENT, PARAMS_FILE, TOKENIZED, threads
from adloco.stages.declaration import Dvc, Key, Path_, Stage, arg, keys

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    from adloco.calibrate.device import calibrate_device, check_seq_len, find_device
    from adloco.config import load_config
    from adloco.data.reader import TokenData
    from adloco.formats.calibration import CalibrationRecord, check_replaceable

    data: str = args.data
    config = load_config(args.config)
    device = find_device(config, args.device)
    # Before any work: a file at --out that is not a record of this stage is kept.
    check_replaceable(args.out)
    # Opened as training opens it: a damaged or edited folder is refused the same way.
    manifest = TokenData.open(data).manifest
    check_seq_len(config, data, manifest)
    record = calibrate_device(config, device, manifest["vocab_size"], manifest["seq_len_tokens"])
    CalibrationRecord.write(args.out, record)
    measured = record["step_time_measured"]
    log.info(
        "device %s: max batch %d (raw %d, method %s)",
        record["device"],
        record["max_batch"],
        record["raw_max_batch"],
        record["method"],
    )
    log.info(
        "device %s: measured pass seconds %s at batches %s, update %.3g s; clock uses %s (%s)",
        record["device"],
        [f"{t:.3g}" for t in measured["fwd_bwd_s"]],
        measured["batches"],
        measured["update_s"],
        record["step_time"]["model"],
        record["step_time_curve"],
    )
    return 0


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
