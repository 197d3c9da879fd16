"""The augmented inner-product test (Bollapragada et al. 2017):
B = max(σ_d² / (ϑ² ‖ḡ‖²), σ_⊥² / (ν² ‖ḡ‖²)).

The batch keeps both the variance of the sample gradients' component along
the reference direction d (the previous round's gradient), σ_d² / B, below
ϑ² ‖ḡ‖², and that of the component orthogonal to it, σ_⊥² / B, below
ν² ‖ḡ‖². Unlike the authors' code, ϑ bounds the inner-product part, both
parts are batch sizes, and σ_⊥² is a trace over all D coordinates
(``docs/algorithms.md``). It needs the reference direction, so it cannot say
anything in a trainer's first round. ``train.batch_test:
augmented_inner_product``; it reads ``train.vartheta`` and ``train.nu``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from adloco.algo.batch_test_base import BatchTest, check_positive

if TYPE_CHECKING:
    from adloco.algo.estimators import VarianceEstimate


def augmented_parts(est: VarianceEstimate, *, vartheta: float, nu: float) -> tuple[float, float]:
    """(inner-product part σ_d² / (ϑ² ‖ḡ‖²), orthogonal part σ_⊥² / (ν² ‖ḡ‖²)), both batch sizes."""
    if est.ip_var is None or est.orth_var is None:
        raise ValueError("the augmented inner-product test needs a reference direction")
    g2 = est.batch_grad_sqnorm
    return est.ip_var / (vartheta**2 * g2), est.orth_var / (nu**2 * g2)


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
