"""Communication ledger and simulated cluster clock.

The single-process engine runs every node slot on one machine, so what a real
deployment would communicate and how long a round would take are computed, not
measured: bytes from the size of what is reduced (ring all-reduce within a
trainer's nodes), time from per-device compute speed and the configured network.
The model is deliberately simple and stated in docs/engine.md:

- compute: a training token costs 6 * parameters FLOPs; node slots that share a
  device share its speed (``speed_tflops / nodes_per_device`` each);
- ring all-reduce of V bytes over M nodes: every node sends and receives
  2 (M - 1) / M * V bytes in 2 (M - 1) messages, so the trainer moves
  2 (M - 1) * V bytes and takes 2 (M - 1) * (latency + V / M / bandwidth);
- a round lasts as long as its slowest trainer (compute of its slowest node plus
  its communication): trainers run side by side on disjoint slots.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

FLOPS_PER_TOKEN_PER_PARAM = 6.0
SCALAR_BYTES = 8  # a statistic is reduced as float64
STATS_SCALARS = 6  # GroupStats fields reduced alongside the pooled gradient


def allreduce_bytes(payload_bytes: int, nodes: int) -> int:
    """Bytes moved by all nodes together in a ring all-reduce of ``payload_bytes``."""
    return 2 * (nodes - 1) * payload_bytes if nodes > 1 else 0


def allreduce_time_s(
    payload_bytes: int, nodes: int, bandwidth_bytes_s: float, latency_s: float
) -> float:
    if nodes <= 1:
        return 0.0
    steps = 2 * (nodes - 1)
    return steps * (latency_s + payload_bytes / nodes / bandwidth_bytes_s)


@dataclass
class Ledger:
    """Cumulative communications, bytes and simulated time of a run."""

    num_params: int
    pseudo_grad_bytes_per_elem: int
    bandwidth_bytes_s: float
    latency_s: float
    communications: int = 0
    bytes_total: int = 0
    sim_time_s: float = 0.0

    def compute_time_s(self, tokens: int, slot_tflops: float) -> float:
        return FLOPS_PER_TOKEN_PER_PARAM * self.num_params * tokens / (slot_tflops * 1e12)

    def trainer_round(self, nodes: int, with_stats: bool) -> tuple[int, float]:
        """Bytes and seconds of one trainer's synchronisation (pseudo-gradient + statistics)."""
        payload = self.num_params * self.pseudo_grad_bytes_per_elem
        moved = allreduce_bytes(payload, nodes)
        seconds = allreduce_time_s(payload, nodes, self.bandwidth_bytes_s, self.latency_s)
        if with_stats:
            # The pooled statistics gradient (float32) and a handful of scalars.
            stats_payload = self.num_params * 4 + STATS_SCALARS * SCALAR_BYTES
            moved += allreduce_bytes(stats_payload, nodes)
            seconds += allreduce_time_s(
                stats_payload, nodes, self.bandwidth_bytes_s, self.latency_s
            )
        return moved, seconds

    def merge(self, absorbed: int, with_momentum: bool) -> tuple[int, float]:
        """Bytes and seconds of sending ``absorbed`` trainers' state to the kept one."""
        payload = self.num_params * 4 * (2 if with_momentum else 1)
        moved = absorbed * payload
        seconds = absorbed * (self.latency_s + payload / self.bandwidth_bytes_s)
        return moved, seconds

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict) -> Ledger:
        return cls(**state)
