"""Adaptive batch tests: gradient statistics → next requested global batch.

Called by the engine once per round and trainer, after the statistics are reduced.
Every test asks for a trainer's *global* batch B (samples per inner step over
all of the trainer's nodes) that keeps the gradient noise below a share of the
gradient:

- norm test (Byrd et al. 2012): B = tr Σ / (η² ‖ḡ‖²);
- augmented inner-product test (Bollapragada et al. 2017):
  B = max(σ_d² / (ϑ² ‖ḡ‖²), σ_⊥² / (ν² ‖ḡ‖²));
- inner-product test (:mod:`adloco.algo.inner_product_test`): B = σ_d² / (ϑ² ‖ḡ‖²).

B becomes the trainer's requested global batch: it never decreases and grows
by at most ``max_growth`` per round. The engine allocates node slots in
proportion to it and splits it over them (``adloco.algo.merge``). Unlike the authors'
code, ϑ is used for the inner-product part, both parts are batch sizes, and
σ_⊥² is a trace over all D coordinates (see ``docs/algorithms.md``).

Each test is a :class:`adloco.algo.batch_test_base.BatchTest`; ``REGISTRY``
holds them, and ``TESTS`` (their names, ``none`` first) equals
:data:`adloco.config.runs.BATCH_TESTS`, what ``train.batch_test`` may be.
Adding a test: its module, one entry here and its name there.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from adloco.algo.batch_test_base import MIN_BATCH_GRAD_SQNORM, BatchTest, check_positive
from adloco.algo.inner_product_test import InnerProductTest

if TYPE_CHECKING:
    from adloco.algo.estimators import VarianceEstimate

__all__ = ["MIN_BATCH_GRAD_SQNORM", "REGISTRY", "TESTS", "get", "next_batch"]


def augmented_parts(est: VarianceEstimate, *, vartheta: float, nu: float) -> tuple[float, float]:
    """(inner-product part σ_d² / (ϑ² ‖ḡ‖²), orthogonal part σ_⊥² / (ν² ‖ḡ‖²)), both batch sizes."""
    if est.ip_var is None or est.orth_var is None:
        raise ValueError("the augmented inner-product test needs a reference direction")
    g2 = est.batch_grad_sqnorm
    return est.ip_var / (vartheta**2 * g2), est.orth_var / (nu**2 * g2)


class NoTest(BatchTest):
    """``none``: the batch stays as configured; no statistics are gathered."""

    name = "none"
    adaptive = False


@dataclasses.dataclass(frozen=True)
class NormSettings:
    eta: float  # η: the noise may be this share of ‖ḡ‖, in (0, 1)

    def __post_init__(self):
        check_positive(self)


class NormTest(BatchTest):
    """``norm``: B = tr Σ / (η² ‖ḡ‖²)."""

    name = "norm"
    settings_type = NormSettings

    def ratio(self, est: VarianceEstimate, settings: NormSettings) -> float:
        return est.trace_cov / (settings.eta**2 * est.batch_grad_sqnorm)


@dataclasses.dataclass(frozen=True)
class AugmentedSettings:
    vartheta: float  # ϑ: bound of the inner-product part
    nu: float  # ν: bound of the orthogonal part

    def __post_init__(self):
        check_positive(self)


class AugmentedTest(BatchTest):
    """``augmented_inner_product``: the larger of the inner-product and orthogonal parts."""

    name = "augmented_inner_product"
    settings_type = AugmentedSettings
    needs_reference = True

    def ratio(self, est: VarianceEstimate, settings: AugmentedSettings) -> float | None:
        if est.ip_var is None or est.orth_var is None:
            return None
        return max(augmented_parts(est, vartheta=settings.vartheta, nu=settings.nu))


REGISTRY: dict[str, BatchTest] = {
    t.name: t for t in (NoTest(), NormTest(), AugmentedTest(), InnerProductTest())
}
TESTS = tuple(REGISTRY)


def get(name: str) -> BatchTest:
    """The registered test ``name`` (ValueError naming the choices otherwise)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown batch test {name!r}; expected one of {', '.join(TESTS)}")
    return REGISTRY[name]


def requested_global_batch(name: str, est: VarianceEstimate, **values: Any) -> float | None:
    """The global batch B test ``name`` asks for, its settings read from ``values``
    (settings it does not read are ignored), or None when it cannot say."""
    test = get(name)
    return test.requested_global_batch(est, test.settings_from(values))


def next_batch(
    name: str,
    est: VarianceEstimate | None,
    current_batch: int,
    settings: Any,
    *,
    max_growth: float,
) -> tuple[int, float | None]:
    """(new requested global batch, the batch B the test asked for, or None).

    ``settings``: the test's settings (``get(name).settings_from(run_settings)``).
    new = min(max(current, ceil(B)), floor(current · max_growth)). Unchanged
    when the test is ``none``, there is no estimate, ‖ḡ‖² < 1e-12, or a test
    that needs a reference direction has none yet.
    """
    if current_batch < 1:
        raise ValueError(f"current_batch must be >= 1, got {current_batch}")
    if not max_growth >= 1:
        raise ValueError(f"max_growth must be >= 1, got {max_growth}")
    test = get(name)
    if est is None:
        return current_batch, None
    b_global = test.requested_global_batch(est, settings)
    if b_global is None:
        return current_batch, None
    wanted = max(current_batch, math.ceil(b_global))
    cap = max(current_batch, math.floor(current_batch * max_growth))
    return min(wanted, cap), b_global
