"""``adloco calibrate``: one device of the configuration, calibrated and its record written."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from adloco.calibrate.device import calibrate_device
from adloco.calibrate.record import CalibrationRecord
from adloco.config import Config, ConfigError, DeviceConfig, load_config
from adloco.core import paths
from adloco.data.reader import TokenData

log = logging.getLogger(__name__)


def find_device(config: Config, name: str) -> DeviceConfig:
    """The entry of ``cluster.devices`` that ``--device`` names."""
    try:
        return config.cluster.device(name)
    except ConfigError as exc:
        raise ValueError(f"--device {name}: {exc}") from exc


def check_seq_len(config: Config, data: str | Path, manifest: dict) -> None:
    """The tokenized data's sequence length is the config's ``data.seq_len_tokens``."""
    wanted = config.data.seq_len_tokens
    if manifest["seq_len_tokens"] != wanted:
        raise ValueError(
            f"{paths.manifest_file(data)}: seq_len_tokens {manifest['seq_len_tokens']} "
            f"differs from the config's data.seq_len_tokens {wanted}; re-run `adloco tokenize`"
        )


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    device = find_device(config, args.device)
    # Opened as training opens it: a damaged or edited folder is refused the same way.
    manifest = TokenData.open(args.data).manifest
    check_seq_len(config, args.data, manifest)
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
