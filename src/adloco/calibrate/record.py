"""One device's calibration: the record ``adloco calibrate`` writes, measured in order.

Part of ``adloco calibrate`` (:mod:`adloco.calibrate`): what the file says of
the device, the model and the settings (:func:`device_record`), then the
max-batch search (unless ``max_batch`` is configured) and the step timing
(:func:`calibrate_device`). :class:`adloco.calibration_record.CalibrationRecord`
writes and reads the file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from adloco.calibrate.bench import Bench, torch_device
from adloco.calibrate.memory_search import search_device_max_batch
from adloco.calibrate.step_timing import time_device_steps
from adloco.clock import SLOT_SHARING
from adloco.config import model_config
from adloco.model import build_model, num_parameters

GIB = 1 << 30


def calibrate_device(
    config: dict,
    device_cfg: dict,
    vocab_size: int,
    seq_len_tokens: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Calibrate one device: the max-batch search (unless configured), then the step time."""
    cluster = config["cluster"]
    sharing = cluster["slot_sharing"]
    if sharing not in SLOT_SHARING:
        raise ValueError(f"cluster.slot_sharing must be one of {SLOT_SHARING}, got {sharing!r}")
    device = torch_device(device_cfg)
    model_cfg = config["model"]
    model = build_model(model_config(model_cfg), vocab_size, seq_len_tokens, config["seed"]).to(
        device
    )
    model.train()
    record = device_record(config, device_cfg, device, model, vocab_size, seq_len_tokens)
    # One generator for the search's batches, then the timing's: the order is part of the seed.
    generator = torch.Generator(device=device)
    generator.manual_seed(config["seed"])
    bench = Bench(config, model, device, generator, vocab_size, seq_len_tokens)
    if device_cfg.get("max_batch") is not None:
        max_batch = int(device_cfg["max_batch"])
        record.update(
            method="configured",
            budget_bytes=None,
            raw_max_batch=max_batch,
            max_batch=max_batch,
            trials=[],
        )
    else:
        record.update(search_device_max_batch(bench, device_cfg, record))
    record.update(time_device_steps(bench, device_cfg, record, clock))
    return record


def device_record(
    config: dict,
    device_cfg: dict,
    device: torch.device,
    model,
    vocab_size: int,
    seq_len_tokens: int,
) -> dict[str, Any]:
    """What the calibration file says of the device, the model and the settings."""
    cluster, cal = config["cluster"], config["calibration"]
    record: dict[str, Any] = {
        "device": device_cfg["name"],
        "kind": device_cfg["kind"],
        "memory_bytes": int(device_cfg["memory_gib"] * GIB),
        "nodes_per_device": cluster["nodes_per_device"],
        "slot_sharing": cluster["slot_sharing"],
        "margin": cal["margin"],
        "seq_len_tokens": seq_len_tokens,
        "vocab_size": vocab_size,
        "dtype": cal["dtype"],
        "torch_version": torch.__version__,
    }
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    record.update(param_bytes=param_bytes, model_parameters=num_parameters(model))
    if device.type == "cuda":
        record.update(
            gpu_name=torch.cuda.get_device_name(device),
            gpu_total_bytes=torch.cuda.get_device_properties(device).total_memory,
        )
    return record
