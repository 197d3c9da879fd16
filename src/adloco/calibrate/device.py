"""One device's calibration: the record ``adloco calibrate`` writes, measured in order.

Part of ``adloco calibrate`` (:mod:`adloco.calibrate`): what the file says of
the device, the model and the settings (:func:`device_record`), then the
max-batch search (unless ``max_batch`` is configured) and the step timing
(:func:`calibrate_device`). :class:`adloco.formats.calibration.CalibrationRecord`
writes and reads the file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from adloco.calibrate.bench import Bench, memory_bytes
from adloco.calibrate.memory_search import search_device_max_batch
from adloco.calibrate.step_timing import time_device_steps
from adloco.config import Config, ConfigError, DeviceConfig
from adloco.core import paths
from adloco.model.llama import num_parameters


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
