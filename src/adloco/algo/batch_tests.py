"""Adaptive batch tests: gradient statistics → next requested global batch.

Called by the engine once per round and trainer, after the statistics are reduced.
Every test asks for a trainer's *global* batch B (samples per inner step over
all of the trainer's nodes) that keeps the gradient noise below a share of the
gradient:

- ``none`` (:mod:`adloco.algo.no_test`): the batch stays as configured;
- norm test (Byrd et al. 2012, :mod:`adloco.algo.norm_test`): B = tr Σ / (η² ‖ḡ‖²);
- augmented inner-product test (Bollapragada et al. 2017,
  :mod:`adloco.algo.augmented_inner_product_test`):
  B = max(σ_d² / (ϑ² ‖ḡ‖²), σ_⊥² / (ν² ‖ḡ‖²));
- inner-product test (:mod:`adloco.algo.inner_product_test`): B = σ_d² / (ϑ² ‖ḡ‖²).

B becomes the trainer's requested global batch: it never decreases and grows
by at most ``max_growth`` per round. The engine allocates node slots in
proportion to it and splits it over them (``adloco.algo.merge``). Unlike the authors'
code, ϑ is used for the inner-product part, both parts are batch sizes, and
σ_⊥² is a trace over all D coordinates (see ``docs/algorithms.md``).

Each test is a :class:`adloco.algo.batch_test_base.BatchTest` in a module of its
own, ``algo/<name>_test.py``; ``REGISTRY`` holds them, and ``TESTS`` (their
names, ``none`` first) equals :data:`adloco.config.runs.BATCH_TESTS`, what
``train.batch_test`` may be.
Adding a test: its module, one entry here and its name there.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from adloco.algo.augmented_inner_product_test import AugmentedTest
from adloco.algo.batch_test_base import MIN_BATCH_GRAD_SQNORM, BatchTest
from adloco.algo.inner_product_test import InnerProductTest
from adloco.algo.no_test import NoTest
from adloco.algo.norm_test import NormTest

if TYPE_CHECKING:
    from adloco.algo.estimators import VarianceEstimate

__all__ = ["MIN_BATCH_GRAD_SQNORM", "REGISTRY", "TESTS", "get", "next_batch"]


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
