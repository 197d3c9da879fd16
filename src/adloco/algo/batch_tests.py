"""Adaptive batch tests: gradient statistics → next requested local batch.

Called by the engine once per round and trainer, after the statistics are reduced.
Both tests ask for a trainer's *global* batch B (samples per inner step over
all of the trainer's nodes) that keeps the gradient noise below a share of the
gradient:

- norm test (Byrd et al. 2012): B = tr Σ / (η² ‖ḡ‖²);
- augmented inner-product test (Bollapragada et al. 2017):
  B = max(σ_d² / (ϑ² ‖ḡ‖²), σ_⊥² / (ν² ‖ḡ‖²)).

B becomes the trainer's requested global batch: it never decreases and grows
by at most ``max_growth`` per round. The engine allocates node slots in
proportion to it and splits it over them (``adloco.algo.merge``). Unlike the authors'
code, ϑ is used for the inner-product part, both parts are batch sizes, and
σ_⊥² is a trace over all D coordinates (see ``docs/algorithms.md``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adloco.algo.estimators import VarianceEstimate

TESTS = ("none", "norm", "augmented_inner_product")

# Below this ‖ḡ‖² the ratio is dominated by rounding; the batch is left alone.
MIN_BATCH_GRAD_SQNORM = 1e-12


def augmented_parts(est: VarianceEstimate, *, vartheta: float, nu: float) -> tuple[float, float]:
    """(inner-product part σ_d² / (ϑ² ‖ḡ‖²), orthogonal part σ_⊥² / (ν² ‖ḡ‖²)), both batch sizes."""
    if est.ip_var is None or est.orth_var is None:
        raise ValueError("the augmented inner-product test needs a reference direction")
    g2 = est.batch_grad_sqnorm
    return est.ip_var / (vartheta**2 * g2), est.orth_var / (nu**2 * g2)


def requested_global_batch(
    test: str, est: VarianceEstimate, *, eta: float, vartheta: float, nu: float
) -> float | None:
    """The global batch B the test asks for (real number), or None when it cannot say."""
    if test not in TESTS:
        raise ValueError(f"unknown batch test {test!r}; expected one of {', '.join(TESTS)}")
    for name, value in (("eta", eta), ("vartheta", vartheta), ("nu", nu)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    if test == "none":
        return None
    g2 = est.batch_grad_sqnorm
    if not math.isfinite(g2) or g2 < MIN_BATCH_GRAD_SQNORM:
        return None
    if test == "norm":
        b = est.trace_cov / (eta**2 * g2)
    else:
        if est.ip_var is None or est.orth_var is None:
            return None
        b = max(augmented_parts(est, vartheta=vartheta, nu=nu))
    return b if math.isfinite(b) else None


def next_batch(
    test: str,
    est: VarianceEstimate | None,
    current_batch: int,
    *,
    eta: float,
    vartheta: float,
    nu: float,
    max_growth: float,
) -> tuple[int, float | None]:
    """(new requested global batch, the batch B the test asked for, or None).

    new = min(max(current, ceil(B)), floor(current · max_growth)). Unchanged
    when the test is ``none``, there is no estimate, ‖ḡ‖² < 1e-12, or the
    augmented test has no reference direction.
    """
    if current_batch < 1:
        raise ValueError(f"current_batch must be >= 1, got {current_batch}")
    if not max_growth >= 1:
        raise ValueError(f"max_growth must be >= 1, got {max_growth}")
    if test not in TESTS:
        raise ValueError(f"unknown batch test {test!r}; expected one of {', '.join(TESTS)}")
    if est is None:
        return current_batch, None
    b_global = requested_global_batch(test, est, eta=eta, vartheta=vartheta, nu=nu)
    if b_global is None:
        return current_batch, None
    wanted = max(current_batch, math.ceil(b_global))
    cap = max(current_batch, math.floor(current_batch * max_growth))
    return min(wanted, cap), b_global
