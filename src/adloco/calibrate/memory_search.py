"""The max-batch search: the largest micro-batch whose training step fits one slot's memory.

Part of ``adloco calibrate`` (:mod:`adloco.calibrate`). A trial trains the
configured model for ``calibration.steps_per_trial`` inner steps on one batch
of random tokens at the real sequence length and dtype and records its peak
memory; :func:`search_max_batch` doubles the batch until a trial fails, then
bisects (Lightning's ``BatchSizeFinder`` in ``binsearch`` mode). A trial fails
when its peak exceeds the slot's memory share (:func:`slot_budget_bytes`) or
when it runs out of memory. On a CUDA device the peak is
``max_memory_allocated`` with the share enforced by
``set_per_process_memory_fraction``; on a simulated CPU device it is the live
tensor storage counted by :mod:`adloco.calibrate.memory`.

The trial's step is the engine's inner step (:class:`~adloco.calibrate.bench.Bench`:
the worker's optimizer, pass and update), but a trial creates its own
optimizer, so the AdamW state is allocated inside the measured interval as on
a slot's first inner step, and its pass autocasts to ``calibration.dtype`` on
every kind of device (the worker: ``train.autocast_dtype``, on CUDA only).
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from adloco.calibrate.bench import Bench, memory_bytes
from adloco.calibrate.memory import SimulatedOutOfMemoryError, StorageTracker, storage_bytes
from adloco.config import ClusterConfig, DeviceConfig
from adloco.formats.clock import SLOT_SHARING

# What a slot that is not stepping holds, in units of its parameter bytes:
# the parameters and AdamW's two moment buffers (exp_avg, exp_avg_sq) of the
# same dtype. Gradients are not counted: the inner loop frees them after every
# optimizer step (zero_grad(set_to_none=True)).
IDLE_SLOT_PARAM_MULTIPLE = 3


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
    sharing: str,
) -> int:
    """Bytes one slot's training step may peak at on a device shared by several slots.

    ``sharing`` is ``cluster.slot_sharing`` (:data:`adloco.formats.clock.SLOT_SHARING`).
    ``concurrent``: the device's slots step at the same time, so each
    may be at its activation peak together with the others; all slots run at
    most the same max batch, so k slots fit when each one's whole peak
    (parameters, gradients, AdamW state, activations, input) is at most M / k.
    ``time_slicing``: slots take turns, so while one steps the other k − 1 hold
    only parameters and AdamW state (3 × param_bytes each), and the stepping
    slot gets M − (k − 1) × 3 × param_bytes.
    """
    k = nodes_per_device
    if k < 1:
        raise ValueError(f"cluster.nodes_per_device must be >= 1, got {k}")
    if sharing == "concurrent":
        budget = device_memory_bytes // k
    elif sharing == "time_slicing":
        budget = device_memory_bytes - (k - 1) * IDLE_SLOT_PARAM_MULTIPLE * param_bytes
    else:
        raise ValueError(f"slot sharing must be one of {SLOT_SHARING}, got {sharing!r}")
    if budget <= 0:
        raise ValueError(
            f"no memory left for a slot: device {device_memory_bytes} bytes, {k} slots, "
            f"{param_bytes} parameter bytes per slot ({sharing})"
        )
    return int(budget)


def train_steps(bench: Bench, batch: int, steps: int) -> None:
    """``steps`` inner steps of the bench's model on one batch of random tokens, as training does.

    The optimizer is created here so its state is allocated inside the trial,
    as on a slot's first inner step. Gradients are freed after each step.
    """
    params = bench.params
    optimizer = bench.optimizer()
    ids = bench.random_tokens(batch)
    for _ in range(steps):
        bench.run_pass(ids)
        bench.update(optimizer, params)
        optimizer.zero_grad(set_to_none=True)


def cpu_trial(run_batch: Callable[[int], None], model, budget_bytes: int) -> Callable:
    """Trial function for a simulated CPU device: peak live tensor bytes ≤ budget.

    The trial is stopped at the first operator that takes the live bytes past
    the budget (the simulated out-of-memory error), so the recorded peak of a
    failing trial is the first value over the budget, not the full peak.
    """

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


def search_device_max_batch(
    bench: Bench, device: DeviceConfig, cluster: ClusterConfig
) -> dict[str, Any]:
    """The largest micro-batch that fits one slot's memory share, with the margin applied."""
    cal = bench.calibration
    budget_bytes = slot_budget_bytes(
        memory_bytes(device), cluster.nodes_per_device, bench.param_bytes, cluster.slot_sharing
    )

    def run_batch(batch: int) -> None:
        train_steps(bench, batch, cal.steps_per_trial)

    with slot_share(bench.device, device, budget_bytes):
        if bench.device.type == "cuda":
            trial = cuda_trial(run_batch, bench.model, budget_bytes)
            method = "cuda-max-memory-allocated"
        else:
            trial = cpu_trial(run_batch, bench.model, budget_bytes)
            method = "cpu-simulated-dispatch-tracker"
        try:
            raw, trials = search_max_batch(trial, cal.max_batch_limit)
        except ValueError as exc:
            raise ValueError(
                f"device {device.name}: {exc} ({budget_bytes} bytes per slot, model of "
                f"{bench.param_bytes} parameter bytes)"
            ) from exc
    return {
        "method": method,
        "budget_bytes": budget_bytes,
        "raw_max_batch": raw,
        "max_batch": apply_margin(raw, cal.margin),
        "max_batch_limit": cal.max_batch_limit,
        "steps_per_trial": cal.steps_per_trial,
        "trials": [asdict(t) for t in trials],
    }


@contextlib.contextmanager
def slot_share(on: torch.device, device: DeviceConfig, budget_bytes: int) -> Iterator[None]:
    """On CUDA, the process limited to one slot's share of the GPU while inside; else nothing."""
    if on.type != "cuda":
        yield
        return
    total_bytes = torch.cuda.get_device_properties(on).total_memory
    if budget_bytes > total_bytes:
        raise ValueError(
            f"device {device.name}: slot budget {budget_bytes} bytes exceeds the "
            f"visible GPU's {total_bytes} bytes; lower memory_gib"
        )
    torch.cuda.set_per_process_memory_fraction(budget_bytes / total_bytes, on)
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, on)
