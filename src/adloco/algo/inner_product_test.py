"""The inner-product test (Bollapragada et al. 2018): B = σ_d² / (ϑ² ‖ḡ‖²).

The augmented inner-product test (:mod:`adloco.algo.augmented_inner_product_test`) without its
orthogonality part: the batch keeps the variance of the sample gradients'
component along the reference direction d (the previous round's gradient),
σ_d² / B, below ϑ² ‖ḡ‖². It asks for at most the augmented test's batch, and
for less whenever the orthogonal part σ_⊥² / (ν² ‖ḡ‖²) is the larger one.
Like the augmented test it reads σ_d², so it needs the reference direction and
cannot say anything in a trainer's first round. ``train.batch_test:
inner_product``; it reads ``train.vartheta``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from adloco.algo.batch_test_base import BatchTest, check_positive

if TYPE_CHECKING:
    from adloco.algo.estimators import VarianceEstimate


@dataclasses.dataclass(frozen=True)
class InnerProductSettings:
    vartheta: float  # ϑ: the noise along d may be this share of ‖ḡ‖

    def __post_init__(self):
        check_positive(self)


class InnerProductTest(BatchTest):
    """``inner_product``: B = σ_d² / (ϑ² ‖ḡ‖²)."""

    name = "inner_product"
    settings_type = InnerProductSettings
    needs_reference = True

    def ratio(self, est: VarianceEstimate, settings: InnerProductSettings) -> float | None:
        if est.ip_var is None:
            return None
        return est.ip_var / (settings.vartheta**2 * est.batch_grad_sqnorm)
