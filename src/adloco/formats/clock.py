"""The simulated clock: how long a round of training takes on the configured cluster.

The engine runs every node slot in one process (or a few), so the time a real
cluster would need is computed, not measured. Compute comes from a device's
*step-time curve* (:class:`StepTimeCurve`): seconds of one forward and backward
pass of a micro-batch, by micro-batch size, and seconds of one optimizer
update. ``adloco calibrate`` measures the curve on the real device or writes
the one a simulated device declares; :func:`round_time_s` charges a round from
it, with slots that share a device under a stated policy
(:data:`SLOT_SHARING`), and communication from bytes, bandwidth and latency
(ring all-reduce). Everything a round's time depends on is recorded in the
metrics rows (:class:`SlotWork`, :class:`TrainerSync`), so
:func:`recompute_sim_time_s` gives a finished run's time under other devices,
networks and policies without retraining. The model is stated in
``docs/engine.md`` ("The simulated clock").
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# How the slots of one device share it:
# - concurrent: the slots are parallel streams; the device runs the i-th
#   micro-batch of every slot as one pass of their summed size, so small
#   micro-batches fill an unsaturated device for free;
# - time_slicing: the slots take turns; the device runs every slot's passes one
#   after another.
# Optimizer updates are memory-bound and never overlap: k slots stepping cost k updates.
SLOT_SHARING = ("concurrent", "time_slicing")
FLOPS_PER_TOKEN_PER_PARAM = 6.0


@dataclass(frozen=True)
class StepTimeCurve:
    """Seconds of one device's work: a forward+backward pass by micro-batch, and an update.

    ``batches`` (strictly increasing, ≥ 1) and ``fwd_bwd_s`` are the points of
    a piecewise-linear curve. Below the first point the curve is flat (a pass
    never costs less than the smallest one measured); beyond the last it
    continues along its last segment (one point: proportional to the batch).
    """

    batches: tuple[int, ...]
    fwd_bwd_s: tuple[float, ...]
    update_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.batches or len(self.batches) != len(self.fwd_bwd_s):
            raise ValueError("a step-time curve needs as many times as batches, at least one")
        if self.batches[0] < 1 or any(
            b >= c for b, c in zip(self.batches, self.batches[1:], strict=False)
        ):
            raise ValueError(f"curve batches must be >= 1 and increasing, got {self.batches}")
        if any(not (math.isfinite(t) and t >= 0) for t in (*self.fwd_bwd_s, self.update_s)):
            raise ValueError("curve times must be finite and >= 0")

    def pass_s(self, micro_batch: int) -> float:
        """Seconds of one forward and backward pass of ``micro_batch`` sequences."""
        if micro_batch < 1:
            raise ValueError(f"micro-batch must be >= 1, got {micro_batch}")
        return self.at(micro_batch)

    def at(self, sequences: float) -> float:
        """The curve at any number of sequences > 0, a fraction too (flat below its first point).

        A pass of another sequence length is a fraction or a multiple of the
        curve's sequences at equal tokens (:func:`at_equal_tokens`).
        """
        if not sequences > 0:
            raise ValueError(f"sequences must be > 0, got {sequences}")
        xs, ys = self.batches, self.fwd_bwd_s
        if sequences <= xs[0]:
            return ys[0]
        if len(xs) == 1:
            return ys[0] * sequences / xs[0]
        i = min(bisect.bisect_left(xs, sequences), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (sequences - x0) / (x1 - x0)

    def scaled(self, factor: float) -> StepTimeCurve:
        """The same curve on a device ``factor`` times slower (factor < 1: faster)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"scale factor must be > 0, got {factor}")
        return StepTimeCurve(
            self.batches, tuple(t * factor for t in self.fwd_bwd_s), self.update_s * factor
        )

    @classmethod
    def roofline(
        cls, seconds_per_sequence: float, saturation_batch: int, update_s: float = 0.0
    ) -> StepTimeCurve:
        """Flat up to ``saturation_batch``, then linear at ``seconds_per_sequence``.

        A device that is not saturated takes as long for a small pass as for a
        full one; once saturated, time grows with the batch at the device's
        peak rate.
        """
        if saturation_batch < 1:
            raise ValueError(f"saturation_batch must be >= 1, got {saturation_batch}")
        flat = seconds_per_sequence * saturation_batch
        if saturation_batch == 1:
            return cls((1,), (flat,), update_s)
        # The third point sets the slope beyond saturation: the peak rate.
        return cls((1, saturation_batch, 2 * saturation_batch), (flat, flat, 2 * flat), update_s)

    @classmethod
    def linear_in_tokens(cls, num_params: int, seq_len_tokens: int, tflops: float) -> StepTimeCurve:
        """The clock of 6 · parameters FLOPs per token at ``tflops``, free updates."""
        per_sequence = FLOPS_PER_TOKEN_PER_PARAM * num_params * seq_len_tokens / (tflops * 1e12)
        return cls.roofline(per_sequence, 1)

    def as_dict(self) -> dict:
        return {
            "batches": list(self.batches),
            "fwd_bwd_s": list(self.fwd_bwd_s),
            "update_s": self.update_s,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> StepTimeCurve:
        return cls(
            tuple(int(b) for b in d["batches"]),
            tuple(float(t) for t in d["fwd_bwd_s"]),
            float(d.get("update_s", 0.0)),
        )


def at_equal_tokens(
    measured: StepTimeCurve, measured_seq_len_tokens: int, seq_len_tokens: int
) -> StepTimeCurve:
    """A device's curve measured at another sequence length, mapped at equal tokens per pass.

    A pass of ``b`` sequences of ``seq_len_tokens`` L costs what the measured
    device took for ``b · L / L_m`` sequences of ``measured_seq_len_tokens``
    L_m (:meth:`StepTimeCurve.at`: flat below its first point, its last segment
    beyond); an update costs the measured one. The result has integer
    batches, as every curve: each measured point ``b_m`` maps to ``b_m · L_m / L``
    sequences, and where that is not a whole number both whole numbers around
    it are points, so the mapped curve is exact at every whole batch (the only
    passes there are) and keeps the measured last segment beyond its end.
    """
    if measured_seq_len_tokens < 1 or seq_len_tokens < 1:
        raise ValueError(
            f"sequence lengths must be >= 1, got {measured_seq_len_tokens} and {seq_len_tokens}"
        )
    ratio = measured_seq_len_tokens / seq_len_tokens  # sequences here per measured sequence

    def value(b: int) -> float:
        return measured.at(b * seq_len_tokens / measured_seq_len_tokens)

    mapped = [b * ratio for b in measured.batches]
    points = {1}
    for x in mapped:
        points.update(b for b in (math.floor(x), math.ceil(x)) if b >= 1)
    ordered = sorted(points)
    # Beyond its last point a curve follows its last two points: both must lie on the
    # measured last segment (for one measured point, the proportional part past it).
    last_segment_from = mapped[-2] if len(mapped) > 1 else mapped[-1]
    if len(ordered) < 2 or ordered[-2] < last_segment_from:
        ordered.append(ordered[-1] + 1)
    return StepTimeCurve(tuple(ordered), tuple(value(b) for b in ordered), measured.update_s)


class NetworkSettings(Protocol):
    """What the network model reads of the configuration's ``cluster.network``."""

    bandwidth_gbit_s: float
    latency_s: float


@dataclass(frozen=True)
class Network:
    """Link bandwidth and per-message latency between node slots."""

    bandwidth_bytes_s: float
    latency_s: float

    @classmethod
    def from_config(cls, network: NetworkSettings) -> Network:
        return cls(network.bandwidth_gbit_s * 1e9 / 8, network.latency_s)


def allreduce_bytes(payload_bytes: int, nodes: int) -> int:
    """Bytes moved by all nodes together in a ring all-reduce of ``payload_bytes``.

    Every node sends 2 (M − 1) / M of the payload, so M nodes move 2 (M − 1) V.
    """
    return 2 * (nodes - 1) * payload_bytes if nodes > 1 else 0


def allreduce_time_s(payload_bytes: int, nodes: int, network: Network) -> float:
    """2 (M − 1) messages of V / M bytes each, one after another."""
    if nodes <= 1:
        return 0.0
    steps = 2 * (nodes - 1)
    return steps * (network.latency_s + payload_bytes / nodes / network.bandwidth_bytes_s)


def transfer_time_s(payload_bytes: int, messages: int, network: Network) -> float:
    """``messages`` point-to-point transfers of ``payload_bytes`` each, one after another."""
    return messages * (network.latency_s + payload_bytes / network.bandwidth_bytes_s)


@dataclass(frozen=True)
class SlotWork:
    """What one node slot computed in one round: the clock's input, kept in the metrics rows.

    ``steps`` is run-length encoded: ``((count, micro_batches), ...)`` means
    ``count`` optimizer steps, each of forward+backward passes of the given
    micro-batch sizes, in order.
    """

    slot: int
    device: str  # device name of cluster.devices (selects the curve)
    device_index: int  # which physical device of the cluster (slots of one share it)
    steps: tuple[tuple[int, tuple[int, ...]], ...]

    @property
    def sequences(self) -> int:
        return sum(count * sum(micro) for count, micro in self.steps)

    def expanded(self) -> list[tuple[int, ...]]:
        """The micro-batches of every optimizer step, in order."""
        return [micro for count, micro in self.steps for _ in range(count)]

    def as_dict(self) -> dict:
        return {
            "slot": self.slot,
            "device": self.device,
            "device_index": self.device_index,
            "steps": [[count, list(micro)] for count, micro in self.steps],
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> SlotWork:
        steps = tuple((int(c), tuple(int(m) for m in micro)) for c, micro in d["steps"])
        return cls(int(d["slot"]), str(d["device"]), int(d["device_index"]), steps)


def run_length(step_micro_batches: Iterable[tuple[int, ...]]) -> tuple:
    """Run-length encoding of a list of steps' micro-batches (see :class:`SlotWork`)."""
    out: list[list] = []
    for micro in step_micro_batches:
        if out and out[-1][1] == micro:
            out[-1][0] += 1
        else:
            out.append([1, tuple(micro)])
    return tuple((count, micro) for count, micro in out)


@dataclass(frozen=True)
class TrainerSync:
    """One trainer's communication in a round: all-reduces over its nodes, and a merge.

    ``allreduce_payload_bytes``: the payload of each all-reduce of the round
    (the pseudo-gradient, and the statistics when they are reduced apart).
    ``allreduce_count``: how many times they are all-reduced in the round:
    once at its end (the DiLoCo family), or after every optimizer step
    (``ddp``, whose trainer then waits for its slowest device at every step:
    ``per_step``). ``merge_payload_bytes`` and ``merge_messages``: the state
    sent to this trainer by the trainers merged into it (0 when none).
    """

    nodes: int
    allreduce_payload_bytes: tuple[int, ...]
    merge_payload_bytes: int = 0
    merge_messages: int = 0
    allreduce_count: int = 1
    per_step: bool = False

    def allreduces(self) -> int:
        """All-reduces that cross the network: none for a trainer on one slot."""
        return self.allreduce_count if self.nodes > 1 else 0

    def messages(self) -> int:
        """Network messages of the round: its all-reduces and the merge transfers into it."""
        return self.allreduces() + self.merge_messages

    def bytes_moved(self) -> int:
        moved = sum(allreduce_bytes(v, self.nodes) for v in self.allreduce_payload_bytes)
        return self.allreduce_count * moved + self.merge_payload_bytes * self.merge_messages

    def sync_time_s(self, network: Network) -> float:
        once = sum(allreduce_time_s(v, self.nodes, network) for v in self.allreduce_payload_bytes)
        return self.allreduce_count * once

    def merge_time_s(self, network: Network) -> float:
        return transfer_time_s(self.merge_payload_bytes, self.merge_messages, network)

    def as_dict(self) -> dict:
        out = {
            "nodes": self.nodes,
            "allreduce_payload_bytes": list(self.allreduce_payload_bytes),
            "merge_payload_bytes": self.merge_payload_bytes,
            "merge_messages": self.merge_messages,
        }
        if self.allreduce_count != 1 or self.per_step:
            out.update(allreduce_count=self.allreduce_count, per_step=self.per_step)
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> TrainerSync:
        return cls(
            int(d["nodes"]),
            tuple(int(v) for v in d["allreduce_payload_bytes"]),
            int(d.get("merge_payload_bytes", 0)),
            int(d.get("merge_messages", 0)),
            int(d.get("allreduce_count", 1)),
            bool(d.get("per_step", False)),
        )


def device_step_times_s(
    works: Sequence[SlotWork], curve: StepTimeCurve, sharing: str
) -> list[float]:
    """Seconds one device needs for each optimizer step of the slots it carries.

    Step h of the device is the h-th step of every slot that has one; a
    slot's updates are charged in its step.
    """
    if sharing not in SLOT_SHARING:
        raise ValueError(f"slot sharing must be one of {SLOT_SHARING}, got {sharing!r}")
    schedules = [w.expanded() for w in works]
    times = []
    for h in range(max((len(s) for s in schedules), default=0)):
        active = [s[h] for s in schedules if h < len(s)]
        if sharing == "time_slicing":
            passes = sum(curve.pass_s(m) for micro in active for m in micro)
        else:
            passes = sum(
                curve.pass_s(sum(micro[j] for micro in active if j < len(micro)))
                for j in range(max(len(micro) for micro in active))
            )
        times.append(passes + curve.update_s * len(active))
    return times


def device_time_s(works: Sequence[SlotWork], curve: StepTimeCurve, sharing: str) -> float:
    """Seconds one device needs for the round's work of the slots it carries."""
    return sum(device_step_times_s(works, curve, sharing))


def trainer_compute_s(
    trainers: Sequence[tuple[Sequence[SlotWork], TrainerSync]],
    curves: Mapping[str, StepTimeCurve],
    sharing: str,
) -> list[float]:
    """Seconds each trainer of a round computes: the part of its time the network does not set.

    Trainers run side by side on disjoint slots, but slots of different
    trainers may share a device: a device's time covers all its slots, and a
    trainer waits for the slowest device it uses: once a round, or at every
    step when it synchronises per step (``TrainerSync.per_step``, ``ddp``).
    """
    by_device: dict[int, list[SlotWork]] = {}
    for works, _ in trainers:
        for w in works:
            by_device.setdefault(w.device_index, []).append(w)
    step_s = {}
    for index, works in by_device.items():
        names = {w.device for w in works}
        if len(names) != 1:
            raise ValueError(f"device {index} is named {sorted(names)} by different slots")
        name = names.pop()
        if name not in curves:
            raise ValueError(f"no step-time curve for device {name!r}")
        step_s[index] = device_step_times_s(works, curves[name], sharing)
    out = []
    for works, sync in trainers:
        mine = [step_s[i] for i in dict.fromkeys(w.device_index for w in works)]
        if sync.per_step:
            steps = max((len(t) for t in mine), default=0)
            out.append(sum(max(t[h] for t in mine if h < len(t)) for h in range(steps)))
        else:
            out.append(max((sum(t) for t in mine), default=0.0))
    return out


def round_time_s(
    trainers: Sequence[tuple[Sequence[SlotWork], TrainerSync]],
    curves: Mapping[str, StepTimeCurve],
    network: Network,
    sharing: str,
) -> float:
    """Seconds of one round: the slowest trainer's compute and sync, then the merges."""
    return charge_round(trainers, trainer_compute_s(trainers, curves, sharing), network)


def charge_round(
    trainers: Sequence[tuple[Sequence[SlotWork], TrainerSync]],
    compute_s: Sequence[float],
    network: Network,
) -> float:
    """:func:`round_time_s` from each trainer's compute (:func:`trainer_compute_s`)."""
    slowest = 0.0
    merges = 0.0
    for (_, sync), compute in zip(trainers, compute_s, strict=True):
        slowest = max(slowest, compute + sync.sync_time_s(network))
        merges += sync.merge_time_s(network)
    return slowest + merges


Round = list[tuple[list[SlotWork], TrainerSync]]


class RunClock:
    """A finished run's rows, read once, and its time recomputed under any clock.

    Each row carries its trainer's ``slot_work`` and ``sync`` (docs/engine.md,
    "Run outputs"); rows of one round are charged together, as
    :func:`round_time_s` charges them. A round's compute depends on the devices' curves
    and the slot-sharing policy only, so it is kept per (curves, policy) and
    a sweep over networks computes it once.
    """

    def __init__(self, rows: Iterable[Mapping]):
        rounds: dict[int, Round] = {}
        for row in rows:
            works = [SlotWork.from_dict(w) for w in row["slot_work"]]
            sync = TrainerSync.from_dict(row["sync"])
            rounds.setdefault(int(row["round"]), []).append((works, sync))
        self.rounds = dict(sorted(rounds.items()))
        self._compute: dict[tuple, dict[int, list[float]]] = {}

    def cumulative_s(
        self,
        curves: Mapping[str, StepTimeCurve],
        network: Network,
        sharing: str,
        last_round: int | None = None,
    ) -> dict[int, float]:
        """Cumulative simulated time after each round (up to ``last_round``)."""
        key = (tuple(sorted(curves.items())), sharing)
        compute = self._compute.setdefault(key, {})
        elapsed = 0.0
        out = {}
        for r, trainers in self.rounds.items():
            if last_round is not None and r > last_round:
                break
            if r not in compute:
                compute[r] = trainer_compute_s(trainers, curves, sharing)
            elapsed += charge_round(trainers, compute[r], network)
            out[r] = elapsed
        return out


def recompute_sim_time_s(
    rows: Sequence[Mapping],
    curves: Mapping[str, StepTimeCurve],
    network: Network,
    sharing: str,
) -> dict[int, float]:
    """Cumulative simulated time after each round of a run, from its metrics rows alone."""
    return RunClock(rows).cumulative_s(curves, network, sharing)
