"""Calibration of a device: its max micro-batch and its step-time curve.

``adloco calibrate`` runs after tokenization (it needs the vocabulary and the
sequence length from the manifest) and before training, once per entry of
``cluster.devices``, and writes ``results/<experiment>/calibration/<device>.json``
(:func:`adloco.paths.calibration_file`).

*Max batch.* Training reads it through
:func:`adloco.calibration_record.load_max_batch` to cap
micro-batches (the switch mode's ``max_batch``). A trial trains the configured
model for ``calibration.steps_per_trial`` AdamW steps on one batch of random
tokens at the real sequence length and dtype and records its peak memory;
:func:`search_max_batch` doubles the batch until a trial fails, then bisects
(Lightning's ``BatchSizeFinder`` in ``binsearch`` mode). A trial fails when its
peak exceeds the slot's memory share (:func:`slot_budget_bytes`) or when it
runs out of memory. On a CUDA device the peak is ``max_memory_allocated`` with
the share enforced by ``set_per_process_memory_fraction``; on a simulated CPU
device it is the live tensor storage counted by :mod:`adloco.memory`. A device
whose ``max_batch`` is set in the config skips the search.

*Step time.* Every device then times, on the device the command runs on, one
forward+backward pass at micro-batches 1, 2, 4, … up to ``nodes_per_device ×
max_batch`` and one optimizer update (:func:`measure_step_times`: warm-up, then
the median of ``calibration.timing_repeats`` timed repetitions). The simulated
clock (:mod:`adloco.clock`) charges steps from the curve the device's
``step_time`` block selects: the measured one times ``scale``, or a declared
roofline; training reads it through
:func:`adloco.calibration_record.load_step_time_curve`. The formulas
are in ``docs/calibration.md``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from adloco.calibration_record import CalibrationRecord, step_time_settings
from adloco.clock import FLOPS_PER_TOKEN_PER_PARAM, SLOT_SHARING, StepTimeCurve
from adloco.config import load_config
from adloco.data.reader import read_checked_manifest
from adloco.memory import SimulatedOutOfMemoryError, StorageTracker, storage_bytes
from adloco.model import DTYPES, batch_loss, build_model, num_parameters

log = logging.getLogger(__name__)

GIB = 1 << 30
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
    sharing: str = "concurrent",
) -> int:
    """Bytes one slot's training step may peak at on a device shared by several slots.

    ``sharing`` is ``cluster.slot_sharing`` (:data:`adloco.clock.SLOT_SHARING`).
    ``concurrent`` (default): the device's slots step at the same time, so each
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


# ---------------------------------------------------------------- step time


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


def roofline_seconds_per_sequence(num_params: int, seq_len_tokens: int, tflops: float) -> float:
    """6 · parameters · seq_len_tokens FLOPs of one sequence's pass at ``tflops``."""
    return FLOPS_PER_TOKEN_PER_PARAM * num_params * seq_len_tokens / (tflops * 1e12)


def declared_step_time(
    device_cfg: dict, num_params: int, seq_len_tokens: int, measured: StepTimeCurve
) -> tuple[dict[str, Any], StepTimeCurve]:
    """The ``step_time`` record of a device and the curve its clock uses.

    ``measured``: this machine's curve times ``scale``. ``roofline``: flat at
    ``saturation_batch`` sequences' worth of compute up to ``saturation_batch``,
    then linear at ``speed_tflops``, with ``update_s`` per update.
    """
    settings = step_time_settings(device_cfg)
    tflops = float(device_cfg.get("speed_tflops", 1.0))
    record = {**settings, "speed_tflops": tflops}
    if settings["model"] == "measured":
        return record, measured.scaled(settings["scale"])
    per_sequence = roofline_seconds_per_sequence(num_params, seq_len_tokens, tflops)
    record.update(
        seconds_per_sequence=per_sequence,
        flops_per_sequence=FLOPS_PER_TOKEN_PER_PARAM * num_params * seq_len_tokens,
    )
    curve = StepTimeCurve.roofline(per_sequence, settings["saturation_batch"], settings["update_s"])
    return record, curve


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
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Calibrate one device: the max-batch search (unless configured), then the step time."""
    cluster = config["cluster"]
    sharing = cluster.get("slot_sharing", "concurrent")
    if sharing not in SLOT_SHARING:
        raise ValueError(f"cluster.slot_sharing must be one of {SLOT_SHARING}, got {sharing!r}")
    device = torch_device(device_cfg)
    model_cfg = config["model"]
    model = build_model(model_cfg, vocab_size, seq_len_tokens, config["seed"]).to(device)
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


def torch_device(device_cfg: dict) -> torch.device:
    """The torch device a configured device is measured on."""
    if device_cfg["kind"] != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"device {device_cfg['name']} is kind cuda, but no CUDA device is visible")
    return torch.device("cuda", torch.cuda.current_device())


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
        "slot_sharing": cluster.get("slot_sharing", "concurrent"),
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


@dataclass
class Bench:
    """The model on its device and what both measurements share."""

    config: dict
    model: Any
    device: torch.device
    generator: torch.Generator
    vocab_size: int
    seq_len_tokens: int

    @property
    def train(self) -> dict:
        return self.config.get("train", {})

    @property
    def autocast_dtype(self):
        dtype = self.config["calibration"]["dtype"]
        return None if dtype == "float32" else DTYPES[dtype]

    def optimizer(self, params, foreach=None):
        """The inner optimizer (AdamW) as the engine builds it."""
        return torch.optim.AdamW(
            params,
            lr=self.train.get("inner_lr", 1e-3),
            betas=tuple(self.train.get("betas", (0.9, 0.95))),
            weight_decay=self.train.get("weight_decay", 0.0),
            foreach=foreach,
        )


def search_device_max_batch(bench: Bench, device_cfg: dict, record: dict) -> dict[str, Any]:
    """The largest micro-batch that fits one slot's memory share, with the margin applied."""
    cal, cluster = bench.config["calibration"], bench.config["cluster"]
    device = bench.device
    budget_bytes = slot_budget_bytes(
        record["memory_bytes"],
        cluster["nodes_per_device"],
        record["param_bytes"],
        record["slot_sharing"],
    )

    def run_batch(batch: int) -> None:
        train_steps(
            bench.model,
            bench.optimizer,
            batch,
            bench.seq_len_tokens,
            bench.vocab_size,
            cal["steps_per_trial"],
            autocast_dtype=bench.autocast_dtype,
            grad_clip_norm=bench.train.get("grad_clip_norm"),
            generator=bench.generator,
        )

    if device.type == "cuda":
        total_bytes = record["gpu_total_bytes"]
        if budget_bytes > total_bytes:
            raise ValueError(
                f"device {device_cfg['name']}: slot budget {budget_bytes} bytes exceeds the "
                f"visible GPU's {total_bytes} bytes; lower memory_gib"
            )
        torch.cuda.set_per_process_memory_fraction(budget_bytes / total_bytes, device)
        trial = cuda_trial(run_batch, bench.model, budget_bytes)
        method = "cuda-max-memory-allocated"
    else:
        trial = cpu_trial(run_batch, bench.model, budget_bytes)
        method = "cpu-simulated-dispatch-tracker"
    try:
        raw, trials = search_max_batch(trial, cal["max_batch_limit"])
    except ValueError as exc:
        raise ValueError(
            f"device {device_cfg['name']}: {exc} ({budget_bytes} bytes per slot, model of "
            f"{record['param_bytes']} parameter bytes)"
        ) from exc
    finally:
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    return {
        "method": method,
        "budget_bytes": budget_bytes,
        "raw_max_batch": raw,
        "max_batch": apply_margin(raw, cal["margin"]),
        "max_batch_limit": cal["max_batch_limit"],
        "steps_per_trial": cal["steps_per_trial"],
        "trials": [asdict(t) for t in trials],
    }


def time_device_steps(
    bench: Bench, device_cfg: dict, record: dict, clock: Callable[[], float]
) -> dict[str, Any]:
    """The step-time curve: one pass per micro-batch up to k × max_batch, and one update.

    Concurrent slots of one device run up to k × max_batch sequences in one
    pass, so the curve reaches that size.
    """
    cal = bench.config["calibration"]
    model, device = bench.model, bench.device
    params = list(model.parameters())
    largest = record["nodes_per_device"] * record["max_batch"]
    inputs = {
        b: torch.randint(
            bench.vocab_size, (b, bench.seq_len_tokens), device=device, generator=bench.generator
        )
        for b in timing_batches(largest)
    }
    optimizer = bench.optimizer(params, foreach=True)  # as adloco.engine.inner.Worker
    clip = bench.train.get("grad_clip_norm")
    autocast_dtype = bench.autocast_dtype

    def clear_grads() -> None:
        for p in params:
            p.grad = None

    def run_pass(batch: int) -> None:
        # One micro-batch of an inner step (adloco.engine.inner.Worker._backward).
        if autocast_dtype is not None:
            with torch.autocast(device.type, dtype=autocast_dtype):
                loss_sum, n_tokens = batch_loss(model, inputs[batch])
        else:
            loss_sum, n_tokens = batch_loss(model, inputs[batch])
        (loss_sum / n_tokens).backward()

    def run_update() -> None:
        # The update of an inner step: clipping (when configured) and AdamW.
        # The timed update does not depend on gradient values; zeros stand in
        # (created once, in the warm-up, since the step keeps them).
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        optimizer.step()

    sync = None
    oom_errors: tuple[type[BaseException], ...] = ()
    how: dict[str, Any] = {
        "method": "cpu-perf-counter",
        "clock": "time.perf_counter",
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        # The timing may use the whole simulated device: all its slots' memory.
        fraction = min(1.0, record["memory_bytes"] / record["gpu_total_bytes"])
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
        oom_errors = (torch.cuda.OutOfMemoryError,)
        how = {
            "method": "cuda-synchronized-perf-counter",
            "clock": "time.perf_counter after torch.cuda.synchronize",
            "memory_fraction": fraction,
        }
    try:
        timed = measure_step_times(
            run_pass,
            run_update,
            list(inputs),
            cal["timing_repeats"],
            cal["timing_warmup"],
            clock=clock,
            sync=sync,
            before_pass=clear_grads,
            oom_errors=oom_errors,
        )
    except ValueError as exc:
        raise ValueError(f"device {device_cfg['name']}: step timing: {exc}") from exc
    finally:
        clear_grads()
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    measured = StepTimeCurve(tuple(timed["batches"]), tuple(timed["fwd_bwd_s"]), timed["update_s"])
    step_time, curve = declared_step_time(
        device_cfg, record["model_parameters"], bench.seq_len_tokens, measured
    )
    return {
        "step_time": step_time,
        "step_time_measured": {
            **measured.as_dict(),
            "fwd_bwd_repeats_s": timed["fwd_bwd_repeats_s"],
            "update_repeats_s": timed["update_repeats_s"],
            "largest_batch": largest,
            "stopped_by_oom": timed["stopped_by_oom"],
            "timing_repeats": cal["timing_repeats"],
            "timing_warmup": cal["timing_warmup"],
            "device": str(device),
            **how,
            "pass": "forward and backward of the mean next-token loss, calibration.dtype autocast",
            "update": "AdamW step (foreach)"
            + (f" after clip_grad_norm_ to {clip}" if clip is not None else ""),
        },
        "step_time_curve": curve.as_dict(),
    }


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    device_cfg = find_device(config, args.device)
    manifest = read_checked_manifest(args.data)
    if manifest["seq_len_tokens"] != config["data"]["seq_len_tokens"]:
        raise ValueError(
            f"{Path(args.data) / 'manifest.json'}: seq_len_tokens {manifest['seq_len_tokens']} "
            f"differs from the config's data.seq_len_tokens {config['data']['seq_len_tokens']}; "
            "re-run `adloco tokenize`"
        )
    record = calibrate_device(
        config, device_cfg, manifest["vocab_size"], manifest["seq_len_tokens"]
    )
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
