"""One rank of test_distributed's collective checks, launched by torchrun (2 processes).

Each rank feeds seeded groups to a statistics accumulator, reduces through
:class:`TorchCollective`, and compares with one accumulator fed every rank's
groups in one process (every rank can rebuild all groups from the seeds). It
then checks that the engine's replica check passes on equal replicas and fails
on every rank when one replica differs by one bit, and that a collective whose
peer does not answer fails within the group's timeout. Results go to
``<out>/rank<k>.json``; the test reads them.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from array_data import ArrayData, new_engine

from adloco.algo.accumulate import GradientStatsAccumulator
from adloco.algo.estimators import estimate
from adloco.config import load_config
from adloco.engine import distributed

SHAPES = [(3, 4), (5,), (2, 2, 2)]


def groups_of(rank: int, case: str) -> list[tuple[list[torch.Tensor], int]]:
    """Seeded (mean gradient, size) groups this rank contributes in ``case``."""
    counts = {"both": (3, 2), "one_empty": (4, 0)}[case]
    gen = torch.Generator().manual_seed(100 * rank + len(case))
    return [
        (
            [torch.randn(s, generator=gen) + 0.5 for s in SHAPES],
            1 + int(torch.randint(4, (1,), generator=gen)),
        )
        for _ in range(counts[rank])
    ]


def direction_for(with_direction: bool) -> list[torch.Tensor] | None:
    if not with_direction:
        return None
    gen = torch.Generator().manual_seed(7)
    return [3.0 * torch.randn(s, generator=gen) for s in SHAPES]


def stats_cases(comm: distributed.TorchCollective, world: int) -> dict:
    results = {}
    for case in ("both", "one_empty"):
        for with_direction in (True, False):
            like = [torch.zeros(s) for s in SHAPES]
            acc = GradientStatsAccumulator(like, direction_for(with_direction))
            for grads, n in groups_of(comm.rank, case):
                acc.add_group(grads, n)
            got = comm.reduce_stats(acc)
            reference = GradientStatsAccumulator(like, direction_for(with_direction))
            for r in range(world):
                for grads, n in groups_of(r, case):
                    reference.add_group(grads, n)
            want = reference.finalize()
            pooled_gap = max(
                float((a - b).abs().max())
                for a, b in zip(acc.pooled_sum(), reference.pooled_sum(), strict=True)
            )
            est = estimate(got)
            results[f"{case}/{'direction' if with_direction else 'plain'}"] = {
                "got": vars(got),
                "want": vars(want),
                "pooled_gap": pooled_gap,
                "trace_cov": None if est is None else est.trace_cov,
                "want_trace_cov": estimate(want).trace_cov,
            }
    return results


def sums_case(comm: distributed.TorchCollective) -> dict:
    a = torch.full((2, 3), float(comm.rank + 1))
    b = torch.tensor([0.25 * (comm.rank + 1)], dtype=torch.float64)
    c = torch.arange(4, dtype=torch.float32) * (comm.rank + 1)
    comm.all_reduce_sum_([a, b, c])
    return {"a": a.tolist(), "b": b.tolist(), "c": c.tolist(), "b_dtype": str(b.dtype)}


def replica_case(comm: distributed.TorchCollective, config_path: str, out: Path) -> dict:
    cfg = load_config(config_path)
    engine = new_engine(
        cfg,
        cfg.run("r"),
        ArrayData(),
        out / f"ckpt{comm.rank}",
        batches={"sim": 3},
        collective=comm,
    )
    engine.loop.init_trainers()
    engine.loop.agree("in the equal case")
    if comm.rank == 1:
        p = engine.trainers[0].params[0]
        p.view(-1).view(torch.int32)[0] += 1  # one bit of one weight
    try:
        engine.loop.agree("after the flip")
    except RuntimeError as exc:
        return {"flip_error": str(exc)}
    return {"flip_error": None}


def timeout_case(comm: distributed.TorchCollective) -> dict:
    group = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=2))
    short = distributed.TorchCollective(
        comm.slot_owner, comm.rank, comm.world_size, comm.device, 2.0, group=group
    )
    if comm.rank == 1:
        time.sleep(4)  # joins nothing: rank 0 must give up after ~2 s
        return {}
    start = time.perf_counter()
    try:
        short.barrier()
    except distributed.PeerFailure as exc:
        return {"timeout_error": str(exc), "waited_s": time.perf_counter() - start}
    return {"timeout_error": None, "waited_s": time.perf_counter() - start}


def main() -> None:
    config_path, out = sys.argv[1], Path(sys.argv[2])
    env = distributed.launch_env()
    cfg = load_config(config_path)
    comm = distributed.init(cfg.cluster, env, torch.device("cpu"), timeout_s=60.0)
    result: dict = {"rank": comm.rank, "owned": [s for s in range(4) if comm.owns(s)]}
    try:
        result["stats"] = stats_cases(comm, env.world_size)
        result["sums"] = sums_case(comm)
        result.update(replica_case(comm, config_path, out))
        comm.barrier()
        result.update(timeout_case(comm))
    except Exception:
        result["error"] = traceback.format_exc()
    (out / f"rank{comm.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
