"""Engine speed against a plain PyTorch loop, and the cost of the batch-test statistics.

Prints ratios measured in one run on the same model, data and thread count:

1. engine tokens/s vs a plain AdamW training loop of the same model and batch
   (goal >= 0.95x): the engine's per-slot inner loop (``Worker.run_node``)
   against ``forward, backward, clip, step`` written out by hand;
2. the first inner step of a round with the statistics on (groups, scalar
   norms, running sum) vs off: per step, and amortised over a round of H steps
   (goal <= 5 % per round);
3. the exact per-sample estimator (``torch.func`` vmap) on the same batch, for
   comparison;
4. the bytes of one communication of every run of the configuration (the
   pseudo-gradient and, with a batch test, the statistics), from the engine's
   own accounting;
5. simulated node slots (``train.slot_execution``): k slots x local batch b
   for k in --slots and b in --slot-batches, run vectorized (one stack,
   ``engine.stacked.Stack``) against the same slots run sequentially
   (``Worker.run_node`` each) and against one plain loop of batch k·b (goals:
   vectorized >= 0.8x the plain loop, >= 2x sequential at b = 1).

Usage: .venv/bin/python benchmarks/bench_engine.py [--config config/config.yaml]
       [--batch 8] [--steps 10] [--repeats 7] [--threads 1]
       [--slots 4 16] [--slot-batches 1 4] [--slot-steps 4] [--slot-repeats 3]
       [--device cuda --model microllama --seq-len 512 --peak-tflops 989]
       [--json PATH]
On CUDA both loops run under bf16 autocast, and with --peak-tflops the model
FLOPs utilisation (6 x parameters x tokens/s / peak) is printed too.
With --json every figure printed is also written to PATH (scripts/gpu-check.sh
reads it). Every repeat runs all variants in a fresh random order and ratios use the
fastest repeat of each (the one least disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time

import torch

from adloco.algo import exact, stats, switch
from adloco.config import Config, load_config, section
from adloco.engine.inner import NodeState, Worker
from adloco.engine.stacked import SlotJob, Stack
from adloco.engine.trainers import sync_payload_bytes
from adloco.formats.clock import allreduce_bytes
from adloco.model.llama import MICROLLAMA_ARCHITECTURE, batch_loss, build_model

# keeeeenw/MicroLlama's architecture, for random-weight runs.
MICROLLAMA = section(
    "model", {"source": "config", "name": None, **MICROLLAMA_ARCHITECTURE, "dtype": "float32"}
)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_loop(model, params, batches, settings, device, autocast) -> float:
    """AdamW on ``batches`` with the run's lr, betas, weight decay and clipping; seconds."""
    opt = torch.optim.AdamW(
        params,
        lr=settings.inner_lr,
        betas=settings.betas,
        weight_decay=settings.weight_decay,
        foreach=True,
    )
    sync(device)
    start = time.perf_counter()
    for seqs in batches:
        for p in params:
            p.grad = None
        with autocast():
            loss_sum, n = batch_loss(model, seqs.to(device, non_blocking=True))
        (loss_sum / n).backward()
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip_norm, foreach=True)
        opt.step()
    sync(device)
    return time.perf_counter() - start


def first_step(acc):
    """``run_node``'s ``stats``: the accumulator at the first step only (the default block)."""
    return None if acc is None else (lambda h: acc if h == 0 else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10, help="H: inner steps per round")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=None, help="default: the config's BPE vocabulary")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="config", choices=["config", "microllama"])
    ap.add_argument("--seq-len", type=int, default=None, help="default: the config's")
    ap.add_argument("--peak-tflops", type=float, default=None, help="device peak, for MFU")
    ap.add_argument("--slots", type=int, nargs="+", default=[4, 16], help="k of the slot grid")
    ap.add_argument("--slot-batches", type=int, nargs="+", default=[1, 4], help="b of the grid")
    ap.add_argument("--slot-steps", type=int, default=4, help="inner steps per grid round")
    ap.add_argument("--slot-repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument(
        "--skip-exact",
        action="store_true",
        help="no exact per-sample estimator (batch x parameters floats: too large at 300M)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    config = load_config(args.config)
    settings = config.run(next(iter(config.runs)))
    if device.type == "cuda":
        settings = dataclasses.replace(
            settings, autocast_dtype=settings.autocast_dtype or "bfloat16"
        )
    model = MICROLLAMA if args.model == "microllama" else config.model
    vocab = (
        32000 if args.model == "microllama" else (args.vocab or config.data.tokenizer.vocab_size)
    )
    seq_len = args.seq_len or config.data.seq_len_tokens
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, vocab, (args.batch * args.steps, seq_len), generator=gen)
    batches = list(data.view(args.steps, args.batch, seq_len))
    indices = torch.arange(data.size(0))
    plan = switch.plan_step(args.batch, args.batch, "switch")
    groups = settings.stats_microbatches
    steps_off = switch.step_micro_batches(plan, [args.batch] * args.steps)
    steps_on = switch.step_micro_batches(plan, [args.batch] * args.steps, groups)
    lrs = [settings.inner_lr] * args.steps
    tokens = data.numel()

    worker = Worker(build_model(model, vocab, seq_len, 0), settings, device)
    theta = [p.detach().clone() for p in worker.params]
    reference = build_model(model, vocab, seq_len, 0).to(device)
    ref_params = list(reference.parameters())
    autocast = worker._autocast

    def engine_round(with_stats: bool) -> float:
        acc = stats.GradientStatsAccumulator(theta) if with_stats else None
        node = NodeState(0)
        sync(device)
        start = time.perf_counter()
        steps = steps_on if with_stats else steps_off
        worker.run_node(theta, node, indices, data.__getitem__, steps, lrs, first_step(acc))
        if acc is not None:
            stats.estimate(acc.finalize())
        sync(device)
        return time.perf_counter() - start

    def engine_first_step(with_stats: bool) -> float:
        acc = stats.GradientStatsAccumulator(theta) if with_stats else None
        sync(device)
        start = time.perf_counter()
        steps = (steps_on if with_stats else steps_off)[:1]
        worker.run_node(
            theta,
            NodeState(0),
            indices[: args.batch],
            data.__getitem__,
            steps,
            lrs[:1],
            first_step(acc),
        )
        sync(device)
        return time.perf_counter() - start

    def exact_stats() -> float:
        sync(device)
        start = time.perf_counter()
        grads = exact.per_sample_grads(worker.model, batches[0].to(device))
        exact.exact_estimate(grads)
        sync(device)
        return time.perf_counter() - start

    def plain(steps: list[torch.Tensor]) -> float:
        return plain_loop(reference, ref_params, steps, settings, device, autocast)

    # Warm-up of every path (allocator, first-call dispatch).
    engine_round(True)
    plain(batches[:2])
    variants = {
        "plain": lambda: plain(batches),
        "engine": lambda: engine_round(False),
        "engine_stats": lambda: engine_round(True),
        "step_off": lambda: engine_first_step(False),
        "step_on": lambda: engine_first_step(True),
        "exact": exact_stats,
    }
    if args.skip_exact:
        del variants["exact"]
    times = {k: [] for k in variants}
    order = random.Random(0)
    for _ in range(args.repeats):
        names = list(variants)
        order.shuffle(names)
        for name in names:
            times[name].append(variants[name]())
    best = {k: min(v) for k, v in times.items()}
    spread = {k: statistics.median(v) / min(v) - 1 for k, v in times.items()}
    print(
        f"model {sum(p.numel() for p in ref_params):,} parameters, "
        f"batch {args.batch} x {seq_len} tokens, H = {args.steps}, "
        f"{device}, {args.threads} thread(s), fastest of {args.repeats} repeats "
        f"(median {max(spread.values()):.0%} slower at most)"
    )
    print(f"plain loop        {tokens / best['plain']:10.0f} tokens/s")
    print(
        f"engine            {tokens / best['engine']:10.0f} tokens/s   "
        f"ratio {best['plain'] / best['engine']:.3f} (goal >= 0.95)"
    )
    print(
        f"engine + stats    {tokens / best['engine_stats']:10.0f} tokens/s   round overhead "
        f"{best['engine_stats'] / best['engine'] - 1:+.1%} (goal <= 5 %)"
    )
    print(
        f"first step: stats off {best['step_off'] * 1e3:.1f} ms, on {best['step_on'] * 1e3:.1f} ms "
        f"({best['step_on'] / best['step_off'] - 1:+.1%} for that one step)"
    )
    if "exact" in best:
        print(
            f"exact per-sample estimator on one batch: {best['exact'] * 1e3:.1f} ms "
            f"({best['exact'] / best['step_off']:.1f}x an inner step)"
        )
    num_params = sum(p.numel() for p in ref_params)
    figures = {
        "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch_version": torch.__version__,
        "parameters": num_params,
        "batch": args.batch,
        "seq_len_tokens": seq_len,
        "inner_steps": args.steps,
        "threads": args.threads,
        "autocast_dtype": settings.autocast_dtype if device.type == "cuda" else None,
        "plain_tokens_per_s": tokens / best["plain"],
        "engine_tokens_per_s": tokens / best["engine"],
        "engine_vs_plain": best["plain"] / best["engine"],
        "stats_round_overhead": best["engine_stats"] / best["engine"] - 1,
        "stats_first_step_overhead": best["step_on"] / best["step_off"] - 1,
        "exact_estimator_vs_inner_step": best["exact"] / best["step_off"]
        if "exact" in best
        else None,
    }
    if args.peak_tflops:
        flops_per_s = 6 * num_params * tokens / best["engine"]
        figures["engine_mfu"] = flops_per_s / (args.peak_tflops * 1e12)
        figures["peak_tflops"] = args.peak_tflops
        print(f"engine MFU {figures['engine_mfu']:.1%} of {args.peak_tflops} TFLOP/s")
    figures["bytes_per_communication"] = print_bytes_per_communication(config, num_params)
    figures["slots"] = slot_grid(
        args, worker, settings, reference, vocab, seq_len, device, autocast
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=1)


def slot_grid(args, worker, settings, reference, vocab, seq_len, device, autocast) -> list[dict]:
    """k slots x local batch b: vectorized vs sequential vs one plain loop of batch k·b."""
    print(
        f"node slots: k slots x batch b, {args.slot_steps} steps of {seq_len} tokens, "
        f"fastest of {args.slot_repeats} repeats (tokens/s"
        + (" of process CPU time)" if device.type == "cpu" else ")")
    )
    print(f"  {'k':>3} {'b':>3} {'vectorized':>11} {'sequential':>11} {'plain k·b':>10}  ratios")
    rows = []
    for k in args.slots:
        for b in args.slot_batches:
            tokens, variants = slot_variants(
                k, b, args.slot_steps, worker, settings, reference, vocab, seq_len, device, autocast
            )
            for fn in variants.values():
                fn()  # warm-up
            times = {name: [] for name in variants}
            order = random.Random(k * 100 + b)
            for _ in range(args.slot_repeats):
                names = list(variants)
                order.shuffle(names)
                for name in names:
                    times[name].append(variants[name]())
            rate = {name: tokens / min(t) for name, t in times.items()}
            vec_plain = rate["vectorized"] / rate["plain"]
            vec_seq = rate["vectorized"] / rate["sequential"]
            print(
                f"  {k:3d} {b:3d} {rate['vectorized']:11.0f} {rate['sequential']:11.0f} "
                f"{rate['plain']:10.0f}  vectorized/plain {vec_plain:.2f} (goal >= 0.8), "
                f"vectorized/sequential {vec_seq:.2f}" + (" (goal >= 2)" if b == 1 else "")
            )
            rows.append(
                {
                    "k": k,
                    "b": b,
                    "tokens_per_s": rate,
                    "vectorized_vs_plain": vec_plain,
                    "vectorized_vs_sequential": vec_seq,
                }
            )
    return rows


def slot_variants(k, b, steps, worker, settings, reference, vocab, seq_len, device, autocast):
    """The tokens of one round of k slots x batch b, and a timer of each way to run it.

    Every variant runs the same sequences for ``steps`` optimizer steps from
    the same θ, and a round includes what the engine's does (loading θ, the
    slots' AdamW states in and out, per-slot clipping); each slot's state
    persists from repeat to repeat, as from round to round.
    """
    lrs = [settings.inner_lr] * steps
    theta = [p.detach().clone() for p in worker.params]
    stack = Stack(worker, settings)
    gen = torch.Generator().manual_seed(k * 100 + b)
    data = torch.randint(0, vocab, (k * b * steps, seq_len), generator=gen)
    own = [torch.arange(j * b * steps, (j + 1) * b * steps) for j in range(k)]
    vec_nodes = [NodeState(j) for j in range(k)]
    seq_nodes = [NodeState(j) for j in range(k)]
    # Step h of the plain loop takes step h of every slot: one batch of k·b.
    by_step = data.view(k, steps, b, seq_len).transpose(0, 1).reshape(steps, k * b, seq_len)

    # On a CPU the process's own CPU time: the machine is shared, and a
    # one-thread loop's CPU time is its work whoever else runs.
    now = time.process_time if device.type == "cpu" else time.perf_counter

    def timed(fn) -> float:
        sync(device)
        start = now()
        fn()
        sync(device)
        return now() - start

    def vectorized() -> None:
        jobs = [SlotJob(n, i, [(b,)] * steps) for n, i in zip(vec_nodes, own, strict=True)]
        outcomes = stack.run(theta, jobs, data.__getitem__, lrs)
        # A fast path that computes non-finite losses is no result (cuDNN attention under vmap did).
        if any(o.result is None for o in outcomes):
            raise RuntimeError(f"vectorized {k} x {b}: a slot's loss or gradient is not finite")

    def sequential() -> None:
        for n, i in zip(seq_nodes, own, strict=True):
            worker.run_node(theta, n, i, data.__getitem__, [(b,)] * steps, lrs)

    def plain() -> None:
        plain_loop(
            reference, list(reference.parameters()), list(by_step), settings, device, autocast
        )

    variants = {
        "vectorized": lambda: timed(vectorized),
        "sequential": lambda: timed(sequential),
        "plain": lambda: timed(plain),
    }
    return data.numel(), variants


def print_bytes_per_communication(config: Config, num_params: int) -> dict[str, int]:
    """Bytes of one trainer's round (ring all-reduce over its slots) for every run."""
    slots = config.cluster.slots()
    moved_by_run = {}
    print(f"bytes per communication ({num_params:,} parameters, {slots} slots):")
    for name in config.runs:
        run = config.run(name)
        nodes = config.cluster.for_run(run).slots() // run.initial_trainers
        payloads = sync_payload_bytes(run, num_params)
        moved = sum(allreduce_bytes(p, nodes) for p in payloads)
        pseudo = allreduce_bytes(payloads[0], nodes)
        # A trainer of one slot all-reduces nothing (it communicates when it merges).
        share = f"{moved / pseudo:.4f}x the pseudo-gradient alone" if pseudo else "no all-reduce"
        print(f"  {name:22s} {moved:12,d} bytes over {nodes} slots ({share})")
        moved_by_run[name] = moved
    return moved_by_run


if __name__ == "__main__":
    main()
