"""Step timing: seconds of one forward+backward pass per micro-batch, and of one update.

Part of ``adloco calibrate`` (:mod:`adloco.calibrate`). Every device times, on
the device the command runs on, one pass at micro-batches 1, 2, 4, … up to
``nodes_per_device × max_batch`` and one optimizer update
(:func:`measure_step_times`: warm-up, then the median of
``calibration.timing_repeats`` timed repetitions). The pass and the update
are those of :class:`adloco.engine.inner.Worker`
(:func:`~adloco.engine.inner.micro_batch_pass`,
:func:`~adloco.engine.inner.clip_and_step`), run on the bench
(:class:`~adloco.calibrate.bench.Bench`).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from adloco.calibrate.bench import Bench, memory_bytes
from adloco.calibrate.step_time_model import declared_step_time
from adloco.config import DeviceConfig
from adloco.formats.clock import StepTimeCurve
from adloco.model.llama import num_parameters


def timing_batches(largest: int) -> list[int]:
    """The micro-batches the step time is measured at: 1, 2, 4, … below ``largest``, and it."""
    if largest < 1:
        raise ValueError(f"the largest timed micro-batch must be >= 1, got {largest}")
    batches = []
    b = 1
    while b < largest:
        batches.append(b)
        b *= 2
    return [*batches, largest]


def time_repeats(
    run: Callable[[], None],
    repeats: int,
    warmup: int,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] | None = None,
    setup: Callable[[], None] | None = None,
) -> list[float]:
    """Seconds of ``repeats`` calls of ``run``, after ``warmup`` untimed ones.

    ``setup`` runs before every call, outside the timed interval. ``sync``
    (``torch.cuda.synchronize`` on CUDA) runs before the clock is read at both
    ends, so queued kernels are inside the interval they belong to.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    for _ in range(warmup):
        if setup is not None:
            setup()
        run()
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        if sync is not None:
            sync()
        start = clock()
        run()
        if sync is not None:
            sync()
        times.append(clock() - start)
    return times


def measure_step_times(
    run_pass: Callable[[int], None],
    run_update: Callable[[], None],
    batches: Sequence[int],
    repeats: int,
    warmup: int,
    clock: Callable[[], float] = time.perf_counter,
    sync: Callable[[], None] | None = None,
    before_pass: Callable[[], None] | None = None,
    oom_errors: tuple[type[BaseException], ...] = (),
) -> dict[str, Any]:
    """The measured step-time curve: median seconds of a pass per batch, and of an update.

    Each size of ``batches`` (increasing) gets ``warmup`` untimed then
    ``repeats`` timed calls of ``run_pass(size)``; the update likewise. The
    result holds the curve (``batches``, ``fwd_bwd_s``, ``update_s``: the form
    of :meth:`StepTimeCurve.as_dict`) and every timed repeat. A size whose pass
    raises one of ``oom_errors`` ends the curve at the sizes before it
    (``stopped_by_oom``); the clock extrapolates along the last segment.
    """
    if repeats < 5:
        raise ValueError(f"calibration.timing_repeats must be >= 5, got {repeats}")
    measured: list[int] = []
    pass_repeats: list[list[float]] = []
    stopped_by_oom = None
    for batch in batches:
        try:
            times = time_repeats(
                lambda b=batch: run_pass(b), repeats, warmup, clock, sync, before_pass
            )
        except oom_errors as exc:
            if not measured:
                raise ValueError(f"a pass of {batch} sequences runs out of memory") from exc
            stopped_by_oom = batch
            break
        measured.append(int(batch))
        pass_repeats.append(times)
    if before_pass is not None:
        before_pass()
    update_repeats = time_repeats(run_update, repeats, warmup, clock, sync)
    return {
        "batches": measured,
        "fwd_bwd_s": [statistics.median(t) for t in pass_repeats],
        "update_s": statistics.median(update_repeats),
        "fwd_bwd_repeats_s": pass_repeats,
        "update_repeats_s": update_repeats,
        "stopped_by_oom": stopped_by_oom,
    }


class TimedStep:
    """One inner step of a slot on the bench, cut in what is timed: a pass, the update.

    The pass is one micro-batch of an inner step (the worker's
    :func:`~adloco.engine.inner.micro_batch_pass`); the update is clipping
    (when configured) and the step of the worker's optimizer (AdamW with
    ``foreach``): :func:`~adloco.engine.inner.clip_and_step`.
    """

    def __init__(self, bench: Bench, batches: Sequence[int]):
        self.bench = bench
        self.params = bench.params
        self.inputs = {b: bench.random_tokens(b) for b in batches}
        self.optimizer = bench.optimizer()

    def clear_grads(self) -> None:
        for p in self.params:
            p.grad = None

    def run_pass(self, batch: int) -> None:
        self.bench.run_pass(self.inputs[batch])

    def run_update(self) -> None:
        # The timed update does not depend on gradient values; zeros stand in
        # (created once, in the warm-up, since the step keeps them).
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.bench.update(self.optimizer, self.params)


def timing_clock(
    on: torch.device, device: DeviceConfig
) -> tuple[Callable[[], None] | None, tuple[type[BaseException], ...], dict[str, Any]]:
    """How a device is timed: the sync, the out-of-memory errors, and the words for the record.

    On CUDA the process may use the whole simulated device (all its slots'
    memory) while it is timed; :func:`time_device_steps` gives it back.
    """
    if on.type != "cuda":
        how = {
            "method": "cpu-perf-counter",
            "clock": "time.perf_counter",
            "torch_threads": torch.get_num_threads(),
        }
        return None, (), how
    gc.collect()
    torch.cuda.empty_cache()
    total_bytes = torch.cuda.get_device_properties(on).total_memory
    fraction = min(1.0, memory_bytes(device) / total_bytes)
    torch.cuda.set_per_process_memory_fraction(fraction, on)
    how = {
        "method": "cuda-synchronized-perf-counter",
        "clock": "time.perf_counter after torch.cuda.synchronize",
        "memory_fraction": fraction,
    }
    return (lambda: torch.cuda.synchronize(on)), (torch.cuda.OutOfMemoryError,), how


def time_device_steps(
    bench: Bench, device: DeviceConfig, largest: int, clock: Callable[[], float]
) -> dict[str, Any]:
    """The step-time curve: one pass per micro-batch up to ``largest``, and one update.

    Concurrent slots of one device run up to k × max_batch sequences in one
    pass, so the caller asks for that size (:func:`adloco.calibrate.device.calibrate_device`).
    """
    cal = bench.calibration
    step = TimedStep(bench, timing_batches(largest))
    sync, oom_errors, how = timing_clock(bench.device, device)
    try:
        timed = measure_step_times(
            step.run_pass,
            step.run_update,
            list(step.inputs),
            cal.timing_repeats,
            cal.timing_warmup,
            clock=clock,
            sync=sync,
            before_pass=step.clear_grads,
            oom_errors=oom_errors,
        )
    except ValueError as exc:
        raise ValueError(f"device {device.name}: step timing: {exc}") from exc
    finally:
        step.clear_grads()
        if bench.device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, bench.device)
    measured = StepTimeCurve(tuple(timed["batches"]), tuple(timed["fwd_bwd_s"]), timed["update_s"])
    num_params = num_parameters(bench.model)
    step_time, curve = declared_step_time(device, num_params, bench.seq_len_tokens, measured)
    return {
        "step_time": step_time,
        "step_time_measured": {
            **measured.as_dict(),
            "fwd_bwd_repeats_s": timed["fwd_bwd_repeats_s"],
            "update_repeats_s": timed["update_repeats_s"],
            "largest_batch": largest,
            "stopped_by_oom": timed["stopped_by_oom"],
            "timing_repeats": cal.timing_repeats,
            "timing_warmup": cal.timing_warmup,
            "device": str(bench.device),
            **how,
            "pass": "forward and backward of the mean next-token loss, calibration.dtype autocast",
            "update": bench.describe_update(),
        },
        "step_time_curve": curve.as_dict(),
    }
