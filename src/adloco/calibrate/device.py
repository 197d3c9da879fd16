"""One device's calibration: the record ``adloco calibrate`` writes, measured in order.

``adloco calibrate``'s library (:mod:`adloco.calibrate`): :func:`calibrate`
takes the stage's request (:class:`CalibrateRequest`), finds the device in the
configuration and opens the tokenized data; then what the file says of the
device, the model and the settings (:func:`device_record`), the max-batch
search (unless ``max_batch`` is configured) and the step timing
(:func:`calibrate_device`). :class:`adloco.formats.calibration.CalibrationRecord`
writes and reads the file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from adloco.calibrate.bench import Bench, memory_bytes
from adloco.calibrate.memory_search import search_device_max_batch
from adloco.calibrate.step_timing import time_device_steps
from adloco.config import Config, ConfigError, DeviceConfig, load_config
from adloco.core import paths
from adloco.data.reader import TokenData
from adloco.formats.calibration import CalibrationRecord, check_replaceable
from adloco.model.llama import num_parameters

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CalibrateRequest:
    """What ``adloco calibrate`` is asked: its command line, typed (:mod:`adloco.stages.calibrate`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks).
    """

    config: str | Path  # the configuration YAML
    data: str | Path  # the tokenized data folder (vocabulary, sequence length)
    device: str  # the device's name in cluster.devices
    out: str | Path  # the calibration record written


def calibrate(request: CalibrateRequest) -> int:
    """``adloco calibrate``: the request's device calibrated and its record written to ``out``."""
    data = request.data
    config = load_config(request.config)
    device = find_device(config, request.device)
    # Before any work: a file at --out that is not a record of this stage is kept.
    check_replaceable(request.out)
    # Opened as training opens it: a damaged or edited folder is refused the same way.
    manifest = TokenData.open(data).manifest
    check_seq_len(config, data, manifest)
    record = calibrate_device(config, device, manifest["vocab_size"], manifest["seq_len_tokens"])
    CalibrationRecord.write(request.out, record)
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


def calibrate_device(
    config: Config,
    device: DeviceConfig,
    vocab_size: int,
    seq_len_tokens: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Calibrate one device: the max-batch search (unless configured), then the step time."""
    bench = Bench.build(config, device, vocab_size, seq_len_tokens)
    record = device_record(config, device, bench)
    if device.max_batch is not None:
        record.update(configured_max_batch(device.max_batch))
    else:
        record.update(search_device_max_batch(bench, device, config.cluster))
    # Concurrent slots of one device run up to k × max_batch sequences in one pass.
    largest = config.cluster.nodes_per_device * record["max_batch"]
    record.update(time_device_steps(bench, device, largest, clock))
    return record


def configured_max_batch(max_batch: int) -> dict[str, Any]:
    """The search's fields of a device whose ``max_batch`` the config sets."""
    return {
        "method": "configured",
        "budget_bytes": None,
        "raw_max_batch": max_batch,
        "max_batch": max_batch,
        "trials": [],
    }


def device_record(config: Config, device: DeviceConfig, bench: Bench) -> dict[str, Any]:
    """What the calibration file says of the device, the model and the settings."""
    cluster, calibration = config.cluster, config.calibration
    record: dict[str, Any] = {
        "device": device.name,
        "kind": device.kind,
        "memory_bytes": memory_bytes(device),
        "nodes_per_device": cluster.nodes_per_device,
        "slot_sharing": cluster.slot_sharing,
        "margin": calibration.margin,
        "seq_len_tokens": bench.seq_len_tokens,
        "vocab_size": bench.vocab_size,
        "dtype": calibration.dtype,
        "torch_version": torch.__version__,
        "param_bytes": bench.param_bytes,
        "model_parameters": num_parameters(bench.model),
    }
    if bench.device.type == "cuda":
        record.update(
            gpu_name=torch.cuda.get_device_name(bench.device),
            gpu_total_bytes=torch.cuda.get_device_properties(bench.device).total_memory,
        )
    return record


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
