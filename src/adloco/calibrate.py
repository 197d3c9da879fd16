"""Max-batch calibration: the largest micro-batch one node slot can train.

``adloco calibrate`` runs after tokenization (it needs the vocabulary and the
sequence length from the manifest) and before training, which reads
``results/calibration/<device>.json`` through :func:`load_max_batch` to cap
micro-batches (the switch mode's ``max_batch``). A trial trains the configured
model for ``calibration.steps_per_trial`` AdamW steps on one batch of random
tokens at the real sequence length and dtype and records its peak memory;
:func:`search_max_batch` doubles the batch until a trial fails, then bisects
(Lightning's ``BatchSizeFinder`` in ``binsearch`` mode). A trial fails when its
peak exceeds the slot's memory share (:func:`slot_budget_bytes`) or when it
runs out of memory. On a CUDA device the peak is ``max_memory_allocated`` with
the share enforced by ``set_per_process_memory_fraction``; on a simulated CPU
device it is the live tensor storage counted by :mod:`adloco.memory`. The
formulas are in ``docs/calibration.md``.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adloco.io import read_json_object

log = logging.getLogger(__name__)

GIB = 1 << 30
# What a slot that is not stepping holds, in units of its parameter bytes:
# the parameters and AdamW's two moment buffers (exp_avg, exp_avg_sq) of the
# same dtype. Gradients are not counted: the inner loop frees them after every
# optimizer step (zero_grad(set_to_none=True)).
IDLE_SLOT_PARAM_MULTIPLE = 3
SHARING_MODES = ("concurrent", "sequential")


@dataclass
class TrialResult:
    batch: int
    peak_bytes: int
    fits: bool


def search_max_batch(
    trial: Callable[[int], TrialResult], max_batch_limit: int
) -> tuple[int, list[TrialResult]]:
    """Largest batch in [1, max_batch_limit] whose trial fits, and the trials run.

    Doubles from 1 until a trial fails or the limit is reached, then bisects
    between the last fitting and the first failing batch. Assumes that fitting
    is monotonic in the batch (a batch that fits means every smaller one fits).
    Raises ValueError if not even a batch of 1 fits.
    """
    if max_batch_limit < 1:
        raise ValueError(f"max_batch_limit must be >= 1, got {max_batch_limit}")
    trials: list[TrialResult] = []

    def fits(batch: int) -> bool:
        result = trial(batch)
        trials.append(result)
        return result.fits

    if not fits(1):
        raise ValueError("not even a batch of 1 fits the memory budget")
    low, high = 1, None  # low fits; high fails (None: none failed yet)
    while high is None and low < max_batch_limit:
        batch = min(2 * low, max_batch_limit)
        if fits(batch):
            low = batch
        else:
            high = batch
    if high is None:
        return low, trials
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low, trials


def apply_margin(raw_max_batch: int, margin: float) -> int:
    """floor(raw × margin), at least 1."""
    if not 0 < margin <= 1:
        raise ValueError(f"calibration.margin must be in (0, 1], got {margin}")
    # The epsilon keeps floor(10 × 0.9) at 9 despite 0.9's binary rounding.
    return max(1, math.floor(raw_max_batch * margin + 1e-9))


def slot_budget_bytes(
    device_memory_bytes: int,
    nodes_per_device: int,
    param_bytes: int,
    sharing: str = "concurrent",
) -> int:
    """Bytes one slot's training step may peak at on a device shared by several slots.

    ``concurrent`` (default): the device's slots step at the same time, so each
    may be at its activation peak together with the others; all slots run at
    most the same max batch, so k slots fit when each one's whole peak
    (parameters, gradients, AdamW state, activations, input) is at most M / k.
    ``sequential``: slots take turns, so while one steps the other k − 1 hold
    only parameters and AdamW state (3 × param_bytes each), and the stepping
    slot gets M − (k − 1) × 3 × param_bytes.
    """
    k = nodes_per_device
    if k < 1:
        raise ValueError(f"cluster.nodes_per_device must be >= 1, got {k}")
    if sharing == "concurrent":
        budget = device_memory_bytes // k
    elif sharing == "sequential":
        budget = device_memory_bytes - (k - 1) * IDLE_SLOT_PARAM_MULTIPLE * param_bytes
    else:
        raise ValueError(f"slot sharing must be one of {SHARING_MODES}, got {sharing!r}")
    if budget <= 0:
        raise ValueError(
            f"no memory left for a slot: device {device_memory_bytes} bytes, {k} slots, "
            f"{param_bytes} parameter bytes per slot ({sharing})"
        )
    return int(budget)


def train_steps(
    model,
    optimizer_factory: Callable,
    batch: int,
    seq_len_tokens: int,
    vocab_size: int,
    steps: int,
    autocast_dtype=None,
    grad_clip_norm: float | None = None,
    generator=None,
) -> None:
    """``steps`` AdamW steps of ``model`` on one batch of random tokens, as training does.

    The optimizer is created here so its state is allocated inside the trial,
    as on a slot's first inner step. Gradients are freed after each step.
    """
    import torch

    from adloco.model import batch_loss

    device = next(model.parameters()).device
    optimizer = optimizer_factory(model.parameters())
    ids = torch.randint(vocab_size, (batch, seq_len_tokens), device=device, generator=generator)
    for _ in range(steps):
        if autocast_dtype is not None:
            with torch.autocast(device.type, dtype=autocast_dtype):
                loss_sum, n_tokens = batch_loss(model, ids)
        else:
            loss_sum, n_tokens = batch_loss(model, ids)
        (loss_sum / n_tokens).backward()
        del loss_sum, n_tokens
        if grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def cpu_trial(run_batch: Callable[[int], None], model, budget_bytes: int) -> Callable:
    """Trial function for a simulated CPU device: peak live tensor bytes ≤ budget.

    The trial is stopped at the first operator that takes the live bytes past
    the budget (the simulated out-of-memory error), so the recorded peak of a
    failing trial is the first value over the budget, not the full peak.
    """
    from adloco.memory import SimulatedOutOfMemoryError

    def trial(batch: int) -> TrialResult:
        try:
            peak = measure_cpu_peak_bytes(run_batch, model, batch, limit_bytes=budget_bytes)
        except SimulatedOutOfMemoryError as exc:
            return TrialResult(batch, exc.live_bytes, False)
        return TrialResult(batch, peak, peak <= budget_bytes)

    return trial


def measure_cpu_peak_bytes(
    run_batch: Callable[[int], None], model, batch: int, limit_bytes: int | None = None
) -> int:
    """Peak live tensor bytes of ``run_batch(batch)``, with ``model``'s parameters and buffers."""
    from adloco.memory import StorageTracker, storage_bytes

    # No gc.collect(): the tracker counts only storages created inside the
    # trial, so garbage left from earlier trials does not enter the figure.
    for p in model.parameters():
        p.grad = None
    baseline = storage_bytes([*model.parameters(), *model.buffers()])
    tracker = StorageTracker(baseline_bytes=baseline, limit_bytes=limit_bytes)
    try:
        with tracker:
            run_batch(batch)
    finally:
        for p in model.parameters():
            p.grad = None
    return tracker.peak_bytes


def cuda_trial(run_batch: Callable[[int], None], model, budget_bytes: int) -> Callable:
    """Trial function for a CUDA device: ``max_memory_allocated`` ≤ budget, OOM = fail.

    The caller limits the process to the budget with
    ``torch.cuda.set_per_process_memory_fraction``, so a batch over the share
    fails with ``torch.cuda.OutOfMemoryError`` as it would on a device of that size.
    """
    import gc

    import torch

    device = next(model.parameters()).device

    def trial(batch: int) -> TrialResult:
        for p in model.parameters():
            p.grad = None
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        fits = True
        try:
            run_batch(batch)
            torch.cuda.synchronize(device)
        except torch.cuda.OutOfMemoryError:
            fits = False
        peak = int(torch.cuda.max_memory_allocated(device))
        for p in model.parameters():
            p.grad = None
        gc.collect()
        torch.cuda.empty_cache()
        return TrialResult(batch, peak, fits and peak <= budget_bytes)

    return trial


def find_device(config: dict, name: str) -> dict:
    devices = config["cluster"]["devices"]
    for dev in devices:
        if dev["name"] == name:
            return dev
    known = ", ".join(d["name"] for d in devices)
    raise ValueError(f"--device {name}: not in cluster.devices (known: {known})")


def calibrate_device(
    config: dict,
    device_cfg: dict,
    vocab_size: int,
    seq_len_tokens: int,
    sharing: str = "concurrent",
) -> dict[str, Any]:
    """Run the search for one device and return the calibration record."""
    import torch

    from adloco.model import DTYPES, build_model, num_parameters

    cal = config["calibration"]
    nodes_per_device = config["cluster"]["nodes_per_device"]
    memory_bytes = int(device_cfg["memory_gib"] * GIB)
    record: dict[str, Any] = {
        "device": device_cfg["name"],
        "kind": device_cfg["kind"],
        "memory_bytes": memory_bytes,
        "nodes_per_device": nodes_per_device,
        "margin": cal["margin"],
        "seq_len_tokens": seq_len_tokens,
        "vocab_size": vocab_size,
        "dtype": cal["dtype"],
        "torch_version": torch.__version__,
    }
    if device_cfg.get("max_batch") is not None:
        max_batch = int(device_cfg["max_batch"])
        record.update(
            method="configured",
            budget_bytes=None,
            raw_max_batch=max_batch,
            max_batch=max_batch,
            trials=[],
            model_parameters=None,
        )
        return record

    if device_cfg["kind"] == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device_cfg['name']} is kind cuda, but no CUDA device is visible"
            )
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    model = build_model(config["model"], vocab_size, seq_len_tokens, config["seed"]).to(device)
    model.train()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    budget_bytes = slot_budget_bytes(memory_bytes, nodes_per_device, param_bytes, sharing)
    train = config.get("train", {})
    autocast_dtype = None if cal["dtype"] == "float32" else DTYPES[cal["dtype"]]
    generator = torch.Generator(device=device)
    generator.manual_seed(config["seed"])

    def optimizer_factory(params):
        return torch.optim.AdamW(
            params,
            lr=train.get("inner_lr", 1e-3),
            betas=tuple(train.get("betas", (0.9, 0.95))),
            weight_decay=train.get("weight_decay", 0.0),
        )

    def run_batch(batch: int) -> None:
        train_steps(
            model,
            optimizer_factory,
            batch,
            seq_len_tokens,
            vocab_size,
            cal["steps_per_trial"],
            autocast_dtype=autocast_dtype,
            grad_clip_norm=train.get("grad_clip_norm"),
            generator=generator,
        )

    if device.type == "cuda":
        total_bytes = torch.cuda.get_device_properties(device).total_memory
        if budget_bytes > total_bytes:
            raise ValueError(
                f"device {device_cfg['name']}: slot budget {budget_bytes} bytes exceeds the "
                f"visible GPU's {total_bytes} bytes; lower memory_gib"
            )
        torch.cuda.set_per_process_memory_fraction(budget_bytes / total_bytes, device)
        record.update(gpu_name=torch.cuda.get_device_name(device), gpu_total_bytes=total_bytes)
        trial, method = cuda_trial(run_batch, model, budget_bytes), "cuda-max-memory-allocated"
    else:
        trial, method = cpu_trial(run_batch, model, budget_bytes), "cpu-simulated-dispatch-tracker"
    try:
        raw, trials = search_max_batch(trial, cal["max_batch_limit"])
    except ValueError as exc:
        raise ValueError(
            f"device {device_cfg['name']}: {exc} ({budget_bytes} bytes per slot, model of "
            f"{param_bytes} parameter bytes)"
        ) from exc
    finally:
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    record.update(
        method=method,
        slot_sharing=sharing,
        budget_bytes=budget_bytes,
        param_bytes=param_bytes,
        raw_max_batch=raw,
        max_batch=apply_margin(raw, cal["margin"]),
        max_batch_limit=cal["max_batch_limit"],
        steps_per_trial=cal["steps_per_trial"],
        trials=[asdict(t) for t in trials],
        model_parameters=num_parameters(model),
    )
    return record


def load_max_batch(calibration_dir: str | Path, device_cfg: dict) -> int:
    """The micro-batch cap of a device: its configured ``max_batch``, else its calibration file."""
    if device_cfg.get("max_batch") is not None:
        return int(device_cfg["max_batch"])
    path = Path(calibration_dir) / f"{device_cfg['name']}.json"
    record = read_json_object(
        path,
        f"{path}: no calibration for device {device_cfg['name']}; run `adloco calibrate "
        f"--device {device_cfg['name']} --out {path} ...` or set its max_batch in the config",
    )
    if record.get("device") != device_cfg["name"]:
        raise ValueError(
            f"{path}: calibrates device {record.get('device')!r}, not {device_cfg['name']!r}"
        )
    max_batch = record.get("max_batch")
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"{path}: max_batch missing or not a positive integer")
    return max_batch


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument(
        "--data", required=True, help="tokenized data folder (vocabulary, sequence length)"
    )
    parser.add_argument("--device", required=True, help="device name from cluster.devices")
    parser.add_argument(
        "--out", required=True, help="output JSON, results/calibration/<device>.json"
    )
    parser.add_argument(
        "--slot-sharing",
        choices=SHARING_MODES,
        default="concurrent",
        help="how the slots of one device use its memory (docs/calibration.md)",
    )


def run(args: argparse.Namespace) -> int:
    from adloco.config import load_config
    from adloco.data.reader import read_manifest
    from adloco.io import write_json_atomic

    config = load_config(args.config)
    device_cfg = find_device(config, args.device)
    manifest = read_manifest(args.data)
    if manifest["seq_len_tokens"] != config["data"]["seq_len_tokens"]:
        raise ValueError(
            f"{Path(args.data) / 'manifest.json'}: seq_len_tokens {manifest['seq_len_tokens']} "
            f"differs from the config's data.seq_len_tokens {config['data']['seq_len_tokens']}; "
            "re-run `adloco tokenize`"
        )
    record = calibrate_device(
        config, device_cfg, manifest["vocab_size"], manifest["seq_len_tokens"], args.slot_sharing
    )
    write_json_atomic(args.out, record)
    log.info(
        "device %s: max batch %d (raw %d, method %s)",
        record["device"],
        record["max_batch"],
        record["raw_max_batch"],
        record["method"],
    )
    return 0
