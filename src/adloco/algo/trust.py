"""What the batch test may act on: statistics blocks, a smoothed estimate, and when to abstain.

Between :mod:`adloco.algo.stats` (one round's estimate, :mod:`adloco.algo.estimators`) and
:mod:`adloco.algo.batch_tests` (the next batch). The rule, stated here and
in ``docs/algorithms.md``, has three parts, each set in ``train``:

1. **Blocks** (``stats_steps``, ``stats_blocks``). A block is ``stats_steps``
   consecutive inner steps of one node slot; their micro-batches are the
   block's groups, taken to share one point. With ``stats_steps: 1`` a block
   is one step, whose groups do share its point (the round's first step: the
   trainer's θ); a longer block lets a slot that runs one sequence per step
   contribute a variance at all, at the price of a bias: the points of its
   steps differ by ``stats_steps − 1`` inner steps, which adds the change of
   the gradient over them to tr Σ̂. ``stats_blocks: first`` uses the round's
   first block, ``all`` every complete block, so a round's estimate rests on
   (groups − blocks) degrees of freedom instead of a handful.
2. **Smoothing** (``stats_decay``). A trainer keeps a running estimate: each
   round's tr Σ̂, ‖∇F‖²̂ (and the augmented test's parts) are averaged with
   the previous rounds', weighted by their degrees of freedom, older rounds
   decayed by ``stats_decay`` per round (0: this round alone). One noisy
   round then moves the estimate by its share of the degrees of freedom.
3. **Abstention**. The test acts only when the smoothed estimate rests on at
   least ``stats_min_dof`` degrees of freedom and its ‖∇F‖²̂ is positive: a
   negative or zero estimate says the noise swamps the gradient at this
   sample size, not that the batch should grow, so the batch is kept. The
   norm test then reads the batch gradient's squared norm at the trainer's
   current global batch B, ‖∇F‖²̂ + tr Σ̂ / B (its expectation), so the
   batch it asks for, tr Σ̂ / (η² ‖g_B‖²), is at most B / η² per round.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from adloco.algo.estimators import VarianceEstimate

STATS_BLOCKS = ("first", "all")


def stats_blocks(steps: int, steps_per_block: int, which: str) -> list[tuple[int, ...]]:
    """The step indices of each statistics block of a slot's round of ``steps`` steps.

    Complete blocks only: a round cut short keeps the blocks that fit.
    """
    if steps_per_block < 1:
        raise ValueError(f"stats_steps must be >= 1, got {steps_per_block}")
    if which not in STATS_BLOCKS:
        raise ValueError(f"stats_blocks must be one of {STATS_BLOCKS}, got {which!r}")
    count = steps // steps_per_block
    if which == "first":
        count = min(count, 1)
    return [tuple(range(b * steps_per_block, (b + 1) * steps_per_block)) for b in range(count)]


@dataclass(frozen=True)
class Smoothed:
    """A trainer's running estimate: dof-weighted means of the rounds' estimates.

    ``weight`` is the decayed sum of the rounds' degrees of freedom, the
    weight of this estimate against the next round's.
    """

    trace_cov: float
    grad_sqnorm: float
    ip_var: float | None
    orth_var: float | None
    weight: float
    rounds: int

    @property
    def noise_scale(self) -> float | None:
        """B_simple = tr Σ / ‖∇F‖², or None when ‖∇F‖²̂ ≤ 0."""
        return noise_scale(self.trace_cov, self.grad_sqnorm)

    def as_dict(self) -> dict:
        return {**asdict(self), "noise_scale": self.noise_scale}

    @classmethod
    def from_dict(cls, d: dict | None) -> Smoothed | None:
        if d is None:
            return None
        return cls(
            float(d["trace_cov"]),
            float(d["grad_sqnorm"]),
            None if d["ip_var"] is None else float(d["ip_var"]),
            None if d["orth_var"] is None else float(d["orth_var"]),
            float(d["weight"]),
            int(d["rounds"]),
        )


def noise_scale(trace_cov: float, grad_sqnorm: float) -> float | None:
    """B_simple = tr Σ / ‖∇F‖², None when the gradient's estimate is not positive."""
    return trace_cov / grad_sqnorm if grad_sqnorm > 0 else None


def _mix(a: float | None, wa: float, b: float | None, wb: float) -> float | None:
    if a is None or b is None:
        return None
    return (wa * a + wb * b) / (wa + wb)


def smooth(
    previous: Smoothed | None, est: VarianceEstimate | None, decay: float
) -> Smoothed | None:
    """The running estimate after a round with estimate ``est`` (None: no estimate this round).

    A round without an estimate decays the old weight and changes nothing
    else. ``decay`` 0 keeps this round's estimate alone.
    """
    if not 0 <= decay < 1:
        raise ValueError(f"stats_decay must be in [0, 1), got {decay}")
    if est is None or est.dof < 1:
        if previous is None or decay == 0:
            return None
        return replace(previous, weight=previous.weight * decay)
    if previous is None or decay == 0:
        return Smoothed(est.trace_cov, est.grad_sqnorm, est.ip_var, est.orth_var, float(est.dof), 1)
    old = previous.weight * decay
    new = float(est.dof)
    return Smoothed(
        _mix(previous.trace_cov, old, est.trace_cov, new),
        _mix(previous.grad_sqnorm, old, est.grad_sqnorm, new),
        _mix(previous.ip_var, old, est.ip_var, new),
        _mix(previous.orth_var, old, est.orth_var, new),
        old + new,
        previous.rounds + 1,
    )


def pool(estimates: list[Smoothed | None], weights: list[float]) -> Smoothed | None:
    """A merged trainer's running estimate: its parents', weighted by their merge weights
    and their own degrees of freedom (None when no parent had one)."""
    known = [(s, w * s.weight) for s, w in zip(estimates, weights, strict=True) if s is not None]
    if not known:
        return None
    total = sum(w for _, w in known)

    def mean(field: str) -> float | None:
        values = [getattr(s, field) for s, _ in known]
        if any(v is None for v in values):
            return None
        return sum(v * w for v, (_, w) in zip(values, known, strict=True)) / total

    return Smoothed(
        mean("trace_cov"),
        mean("grad_sqnorm"),
        mean("ip_var"),
        mean("orth_var"),
        sum(s.weight for s, _ in known),
        max(s.rounds for s, _ in known),
    )


def usable(
    smoothed: Smoothed | None, min_dof: float, current_batch: int
) -> tuple[VarianceEstimate | None, str]:
    """The estimate the batch test may read at global batch ``current_batch``, or why none.

    The reason is "" when the estimate is usable. Its ``batch_grad_sqnorm`` is
    ‖∇F‖²̂ + tr Σ̂ / B, the expected squared norm of a batch gradient of B.
    """
    if smoothed is None:
        return None, "no estimate"
    if smoothed.weight < min_dof:
        return None, f"{smoothed.weight:.3g} degrees of freedom < stats_min_dof {min_dof:g}"
    if not smoothed.grad_sqnorm > 0:
        return None, "gradient norm estimate <= 0"
    est = VarianceEstimate(
        trace_cov=smoothed.trace_cov,
        grad_sqnorm=smoothed.grad_sqnorm,
        batch_grad_sqnorm=smoothed.grad_sqnorm + smoothed.trace_cov / current_batch,
        ip_var=smoothed.ip_var,
        orth_var=smoothed.orth_var,
        groups=0,
        samples=current_batch,
        dof=int(smoothed.weight),
    )
    return est, ""
