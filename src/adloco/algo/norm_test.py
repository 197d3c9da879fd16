"""The norm test (Byrd et al. 2012): B = tr Σ / (η² ‖ḡ‖²).

The batch keeps the sample gradients' total variance, tr Σ / B, below
η² ‖ḡ‖²: the noise may be a share η of the gradient's norm. It reads only
tr Σ, so it can say something in a trainer's first round. ``train.batch_test:
norm``; it reads ``train.eta``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from adloco.algo.batch_test_base import BatchTest, check_positive

if TYPE_CHECKING:
    from adloco.algo.estimators import VarianceEstimate


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
