"""What the round loop and its driver share: the replicated state and the wall clock.

:class:`RunState` is what the rounds advance and every process holds the same
of (round, counters, slot owners, trainers): the round loop
(:mod:`adloco.engine.loop`) changes it, the driver (:mod:`adloco.engine.driver`)
saves it once per checkpoint (``state_dict``) and restores it; its digest is
what the processes compare to agree (:func:`agree`).
:class:`WallClock` counts the seconds a run has trained over its resumed jobs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from adloco.algo import trust
from adloco.engine.sampler import SubsetSampler
from adloco.engine.trainers import Trainer

# θ -> the trainer's optimizer of θ (its method's, :mod:`adloco.engine.methods`).
MakeOuter = Callable[[list[torch.Tensor]], torch.optim.Optimizer]


@dataclass
class RunState:
    """The replicated state of a run: identical on every process after every round."""

    round: int = 0  # rounds trained
    tokens_total: int = 0  # tokens trained by all trainers together
    communications: int = 0  # trainer rounds so far (the paper's count; ddp: its all-reduces)
    messages: int = 0  # network messages so far: all-reduces over 2 or more slots, merge transfers
    bytes_total: int = 0  # bytes moved by all communications so far
    sim_time_s: float = 0.0  # simulated time of the rounds so far
    slot_owner: dict[int, int] = field(default_factory=dict)  # slot index -> trainer id
    trainers: list[Trainer] = field(default_factory=list)  # the active trainers

    def trainer_by_id(self, trainer_id: int) -> Trainer:
        return next(t for t in self.trainers if t.id == trainer_id)

    def counters(self) -> dict:
        """The round and the counters, as a checkpoint holds them."""
        return {
            "round": self.round,
            "tokens_total": self.tokens_total,
            "communications": self.communications,
            "messages": self.messages,
            "bytes_total": self.bytes_total,
            "sim_time_s": self.sim_time_s,
        }

    def owners_and_trainers(self) -> dict:
        """The slot owners and the trainers, as a checkpoint holds them."""
        return {
            "slot_owner": [[s, t] for s, t in sorted(self.slot_owner.items())],
            "trainers": [trainer_state(t) for t in self.trainers],
        }

    def load_state_dict(self, state: dict, make_outer: MakeOuter, device) -> None:
        """Restore from a checkpoint's dict of :meth:`counters` and :meth:`owners_and_trainers`."""
        self.round = state["round"]
        self.tokens_total = state["tokens_total"]
        self.communications = state["communications"]
        if "messages" not in state:
            raise ValueError(
                "the checkpoint was written before runs counted network messages; move its "
                "folder away to train this run from the start"
            )
        self.messages = state["messages"]
        self.bytes_total = state["bytes_total"]
        self.sim_time_s = state["sim_time_s"]
        self.slot_owner = {int(s): int(t) for s, t in state["slot_owner"]}
        self.trainers = [restore_trainer(ts, make_outer, device) for ts in state["trainers"]]


def trainer_state(t: Trainer) -> dict:
    """One trainer as a checkpoint holds it (tensors on the host)."""
    return {
        "id": t.id,
        "params": [p.cpu() for p in t.params],
        "outer_state": t.outer_opt.state_dict(),
        "global_batch": t.global_batch,
        "sampler": t.sampler.state_dict(),
        "tokens": t.tokens,
        "direction": None if t.direction is None else [d.cpu() for d in t.direction],
        "smoothed": json.dumps(None if t.smoothed is None else t.smoothed.as_dict()),
    }


def restore_trainer(ts: dict, make_outer: MakeOuter, device) -> Trainer:
    """The trainer of :func:`trainer_state`, its θ and direction on ``device``."""
    params = [p.to(device) for p in ts["params"]]
    opt = make_outer(params)
    opt.load_state_dict(ts["outer_state"])
    direction = ts["direction"]
    return Trainer(
        ts["id"],
        params,
        opt,
        ts["global_batch"],
        SubsetSampler.from_state_dict(ts["sampler"]),
        ts["tokens"],
        None if direction is None else [d.to(device) for d in direction],
        trust.Smoothed.from_dict(json.loads(ts["smoothed"])),
    )


def replica_digest(state: RunState) -> int:
    """A 31-bit digest of the replicated state; equal on all processes whose replicas agree."""
    values = [state.round, state.tokens_total]
    for t in state.trainers:
        # The bit patterns of θ: any changed bit changes the sum (barring cancellation).
        bits = torch.stack(
            [p.detach().contiguous().view(torch.int32).sum(dtype=torch.int64) for p in t.params]
        ).sum()
        values += [t.id, t.global_batch, t.sampler.epoch, t.sampler.position, int(bits)]
    digest = 0
    for v in values:
        digest = (digest * 1_000_003 + v) % (2**31 - 1)
    return digest


def agree(comm, device, state: RunState, when: str) -> None:
    """Fail on every process unless all hold the same round and replicated state.

    Also a barrier. Sums of small integers are exact in float64, so the
    check is exact; a second reduction makes every process reach the same
    verdict.
    """
    mine = torch.tensor([state.round, replica_digest(state)], dtype=torch.float64, device=device)
    total = mine.clone()
    comm.all_reduce_sum_([total])
    verdict = torch.tensor(
        [0.0 if torch.equal(total, mine * comm.world_size) else 1.0],
        dtype=torch.float64,
        device=device,
    )
    comm.all_reduce_sum_([verdict])
    if verdict.item() > 0:
        raise RuntimeError(
            f"rank {comm.rank}: the {comm.world_size} processes disagree on the "
            f"round or the trainers' state {when}; their replicas diverged (different "
            "checkpoints, code or non-deterministic kernels)"
        )


class WallClock:
    """Wall-clock seconds of a run: those of its earlier jobs (``offset_s``) and this one's."""

    def __init__(self) -> None:
        self.offset_s = 0.0  # seconds trained before this job (from the checkpoint)
        self.t0 = time.perf_counter()

    def restart(self) -> None:
        """This job's seconds count from now."""
        self.t0 = time.perf_counter()

    def elapsed_s(self) -> float:
        return self.offset_s + (time.perf_counter() - self.t0)
