"""Calibration of a device: its max micro-batch and its step-time curve.

``adloco calibrate`` runs after tokenization (it needs the vocabulary and the
sequence length from the manifest) and before training, once per entry of
``cluster.devices``, and writes ``results/<experiment>/calibration/<device>.json``
(:func:`adloco.paths.calibration_file`).

*Max batch.* Training reads it through
:func:`adloco.calibration_record.load_max_batch` to cap micro-batches (the
switch mode's ``max_batch``). The search trains the configured model on
random tokens and doubles, then bisects, the batch until a trial's peak
memory exceeds the slot's share (:mod:`adloco.calibrate.memory_search`). A
device whose ``max_batch`` is set in the config skips the search.

*Step time.* Every device then times, on the device the command runs on, one
forward+backward pass at micro-batches 1, 2, 4, … up to ``nodes_per_device ×
max_batch`` and one optimizer update (:mod:`adloco.calibrate.step_timing`).
The simulated clock (:mod:`adloco.clock`) charges steps from the curve the
device's ``step_time`` block selects: the measured one times ``scale``, or a
declared roofline (:mod:`adloco.calibrate.step_time_model`); training reads it
through :func:`adloco.calibration_record.load_step_time_curve`. The formulas
are in ``docs/calibration.md``.

The package, one idea a module: :mod:`~adloco.calibrate.memory_search` (the
max batch), :mod:`~adloco.calibrate.step_timing` (the timed curve),
:mod:`~adloco.calibrate.step_time_model` (the curve the clock charges),
:mod:`~adloco.calibrate.record` (one device's record, measured in order) and
:mod:`~adloco.calibrate.bench` (the model they share, and the engine's inner
step they run on it).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from adloco import paths
from adloco.calibrate.record import calibrate_device
from adloco.calibration_record import CalibrationRecord
from adloco.config import Config, ConfigError, DeviceConfig, load_config
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
