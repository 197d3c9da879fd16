"""The ``torch.distributed`` backend of the training engine (torchrun, gloo, NCCL).

``adloco train`` started by ``torchrun`` (the launcher sets ``WORLD_SIZE``,
``RANK`` and ``LOCAL_RANK``) initialises a process group (NCCL when the
cluster's devices are CUDA, gloo on CPU) and hands the engine a
:class:`TorchCollective` instead of the single-process one. Every process keeps
a full replica of the trainers and draws every slot's data, but runs only the
node slots of the devices it owns: device d (in the order of
``cluster.devices``, ``count`` expanded) belongs to rank d mod world size, and a
CUDA rank computes on ``cuda:LOCAL_RANK``. Partial sums are combined with SUM
all-reduces over the whole world, a process that holds no slot of a trainer
contributing zeros, so every process ends a round with the same bits and takes
the same outer step, merge and allocation. A collective that fails (a peer
died) or waits longer than the process-group timeout raises
:class:`PeerFailure` naming the operation, the rank and the timeout. torchrun
starts every rank in a session of its own, so a signal to the job's process
group (Ctrl-C, a cluster's cancel) that kills the launcher never reaches the
ranks: each rank watches its launcher (:func:`watch_launcher`) and stops
within a second of it being gone. Launch commands, costs and the failure and
checkpoint protocol are in ``docs/distributed.md``.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from adloco.algo.accumulate import GradientStatsAccumulator, GroupStats, NodeScalars, combine
from adloco.config import ClusterConfig

log = logging.getLogger(__name__)

TIMEOUT_ENV = "ADLOCO_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800.0  # torch's own default; a round's imbalance between ranks must fit
LAUNCH_KEYS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
# Set by torchrun's elastic agent in the environment of the ranks it starts.
AGENT_KEY = "TORCHELASTIC_RUN_ID"
# How often a rank looks whether its launcher is still there.
LAUNCHER_POLL_S = 0.5
# The exit status of a rank whose launcher is gone, as if killed by SIGTERM.
ORPHAN_EXIT_STATUS = 143
# GroupStats.to_tensor() entries: 4 counts the ranks that had a direction; an
# appended entry 7 counts the ranks that saw groups.
_HAS_DIRECTION = 4
_RANKS_WITH_GROUPS = 7


class PeerFailure(RuntimeError):
    """A collective failed or timed out: another process died, hung or was stopped."""


@dataclass(frozen=True)
class LaunchEnv:
    rank: int
    world_size: int
    local_rank: int


def launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """The torchrun launch this process belongs to, or None when started plainly."""
    environ = os.environ if environ is None else environ
    present = [k for k in LAUNCH_KEYS if k in environ]
    if not present:
        return None
    if len(present) != len(LAUNCH_KEYS):
        missing = ", ".join(k for k in LAUNCH_KEYS if k not in environ)
        raise ValueError(f"torch.distributed launch: {missing} not set (launch with torchrun)")
    try:
        env = LaunchEnv(
            int(environ["RANK"]), int(environ["WORLD_SIZE"]), int(environ["LOCAL_RANK"])
        )
    except ValueError as exc:
        raise ValueError(f"torch.distributed launch: non-integer {LAUNCH_KEYS}: {exc}") from exc
    if env.world_size < 1 or not 0 <= env.rank < env.world_size or env.local_rank < 0:
        raise ValueError(f"torch.distributed launch: inconsistent {env}")
    return env


def watch_launcher(
    env: LaunchEnv, poll_s: float = LAUNCHER_POLL_S, environ: Mapping[str, str] | None = None
) -> threading.Thread | None:
    """Stop this process once the torchrun agent that started it is gone.

    A daemon thread compares the parent's pid with the one at start: an
    orphan is re-parented (to init or a subreaper). Killing the job kills the
    launcher; without this its ranks, in sessions of their own, would train
    on. The rank exits at once, as a kill would: its checkpoints stay
    complete (their protocol survives a kill at any moment). Only under
    torchrun's agent (``TORCHELASTIC_RUN_ID`` set): a rank started by hand
    with torchrun's environment may outlive the shell that started it.
    """
    environ = os.environ if environ is None else environ
    if AGENT_KEY not in environ:
        return None
    launcher = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != launcher:
                log.error(
                    "rank %d of %d: the launcher (pid %d) is gone; stopping",
                    env.rank,
                    env.world_size,
                    launcher,
                )
                logging.shutdown()
                os._exit(ORPHAN_EXIT_STATUS)

    thread = threading.Thread(target=watch, name="adloco-launcher-watch", daemon=True)
    thread.start()
    return thread


def timeout_s(cli_value: float | None = None, environ: Mapping[str, str] | None = None) -> float:
    """Process-group timeout: the CLI value, else ``ADLOCO_DIST_TIMEOUT_S``, else 1800 s."""
    environ = os.environ if environ is None else environ
    if cli_value is not None:
        value = float(cli_value)
    elif TIMEOUT_ENV in environ:
        try:
            value = float(environ[TIMEOUT_ENV])
        except ValueError as exc:
            raise ValueError(f"{TIMEOUT_ENV}={environ[TIMEOUT_ENV]!r} is not a number") from exc
    else:
        value = DEFAULT_TIMEOUT_S
    if not math.isfinite(value) or value <= 0:
        where = "--dist-timeout-s" if cli_value is not None else TIMEOUT_ENV
        raise ValueError(
            f"{where}: the process-group timeout must be a positive, finite number of "
            f"seconds, got {value}; give one such as 1800"
        )
    return value


def device_owners(cluster: ClusterConfig, world_size: int) -> list[int]:
    """Rank of each device, in the order of ``cluster.devices`` with ``count`` expanded."""
    devices = cluster.device_count()
    if world_size > devices:
        raise ValueError(
            f"{world_size} processes but cluster.devices has {devices} devices: a device's slots "
            f"share one process, so launch at most {devices} (torchrun --nproc_per_node and "
            "--nnodes)"
        )
    return [d % world_size for d in range(devices)]


def slot_owners(cluster: ClusterConfig, world_size: int) -> list[int]:
    """Rank of each node slot, in the order ``trainers.build_slots`` numbers them."""
    per_device = cluster.nodes_per_device
    return [rank for rank in device_owners(cluster, world_size) for _ in range(per_device)]


class TorchCollective:
    """The engine's collective interface over a ``torch.distributed`` process group.

    ``slot_owner[s]`` is the rank that runs slot ``s``; ``device`` is where the
    reduced tensors live (CPU for gloo, this rank's GPU for NCCL).
    """

    def __init__(
        self,
        slot_owner: Sequence[int],
        rank: int,
        world_size: int,
        device: torch.device,
        timeout_s: float,
        group=None,
    ):
        self.slot_owner = list(slot_owner)
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.timeout_s = timeout_s
        self.group = group

    def owns(self, slot: int) -> bool:
        return self.slot_owner[slot] == self.rank

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    def _all_reduce(self, flat: torch.Tensor, what: str) -> None:
        try:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
        except RuntimeError as exc:  # gloo/NCCL errors, DistBackendError, timeouts
            raise PeerFailure(
                f"rank {self.rank} of {self.world_size}: all-reduce of {what} failed; another "
                f"process died, hung or did not answer within the {self.timeout_s:g} s "
                f"process-group timeout ({TIMEOUT_ENV} or --dist-timeout-s): {exc}"
            ) from exc

    def all_reduce_sum_(self, tensors: list[torch.Tensor], what: str = "partial sums") -> None:
        """Sum ``tensors`` in place over all processes: one all-reduce per dtype.

        Tensors are reduced in their own dtype (the pseudo-gradient partial sums
        in float32, scalars in float64), packed into one flat buffer so that a
        trainer's synchronisation is a single message per dtype.
        """
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for dtype, group in by_dtype.items():
            flat = torch.cat([t.reshape(-1) for t in group])
            self._all_reduce(flat, f"{len(group)} {str(dtype).removeprefix('torch.')} tensors")
            offset = 0
            with torch.no_grad():
                for t in group:
                    n = t.numel()
                    t.copy_(flat[offset : offset + n].view_as(t))
                    offset += n

    def reduce_stats(self, acc: GradientStatsAccumulator) -> GroupStats:
        """The trainer's statistics over every process's groups; S is summed in place.

        A process without a slot of the trainer has an empty accumulator and
        contributes zeros. The direction terms count only when every process
        that saw groups had them (else the single-process engine would have
        none either); ‖S‖² is recomputed from the summed S.
        """
        local = acc.finalize()
        saw_groups = torch.tensor([float(local.groups > 0)], dtype=torch.float64)
        scalars = torch.cat([local.to_tensor(self.device), saw_groups.to(self.device)])
        self.all_reduce_sum_([*acc.pooled_sum(), scalars], what="batch-test statistics")
        merged = GroupStats.from_tensor(scalars[:_RANKS_WITH_GROUPS])
        if scalars[_HAS_DIRECTION].item() != scalars[_RANKS_WITH_GROUPS].item():
            merged = replace(merged, sum_n_proj=None, sum_n_proj_sq=None)
        return combine([merged], acc.pooled_sum())

    def reduce_node_scalars(self, values: torch.Tensor) -> NodeScalars:
        """``stats_reduce: scalars``: one SUM all-reduce of 7 float64 numbers.

        ``values``: this process's sum over its nodes of
        :meth:`NodeScalars.to_tensor` (zeros when it ran none of the trainer's
        slots). The result equals the single-process sum up to the order of
        float64 additions.
        """
        flat = values.detach().to(self.device, torch.float64).reshape(-1).clone()
        if flat.numel() != NodeScalars.SIZE:
            raise ValueError(f"expected {NodeScalars.SIZE} node scalars, got {flat.numel()}")
        self._all_reduce(flat, "batch-test statistics (node scalars)")
        return NodeScalars.from_tensor(flat)

    def barrier(self) -> None:
        # An all-reduce rather than dist.barrier: the same timeout and error path
        # on gloo and NCCL, and no guess of the NCCL device.
        self._all_reduce(torch.zeros(1, device=self.device), "the barrier")


def compute_device(env: LaunchEnv, device: torch.device) -> torch.device:
    """This rank's device: ``cuda:LOCAL_RANK`` on CUDA clusters, else the CPU."""
    if device.type != "cuda":
        return device
    if env.local_rank >= torch.cuda.device_count():
        raise ValueError(
            f"LOCAL_RANK {env.local_rank} but {torch.cuda.device_count()} CUDA devices are "
            "visible: launch at most one process per GPU on each machine"
        )
    return torch.device("cuda", env.local_rank)


def init(
    cluster: ClusterConfig, env: LaunchEnv, device: torch.device, timeout_s: float
) -> TorchCollective:
    """Join the process group torchrun set up (``MASTER_ADDR``/``MASTER_PORT``)."""
    owners = slot_owners(cluster, env.world_size)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        dist.init_process_group(
            backend,
            rank=env.rank,
            world_size=env.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
    except RuntimeError as exc:
        raise PeerFailure(
            f"rank {env.rank} of {env.world_size}: could not join the {backend} process group "
            f"within {timeout_s:g} s: {exc}"
        ) from exc
    return TorchCollective(owners, env.rank, env.world_size, device, timeout_s)


def shutdown() -> None:
    """Leave the process group after a run that ended normally."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
