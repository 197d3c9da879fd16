"""The ``none`` batch test: the batch stays as configured.

``train.batch_test: none``: no statistics are gathered and the requested
global batch never changes (DiLoCo, LocalSGD, ddp and the no-adaptive
ablation).
"""

from __future__ import annotations

from adloco.algo.batch_test_base import BatchTest


class NoTest(BatchTest):
    """``none``: the batch stays as configured; no statistics are gathered."""

    name = "none"
    adaptive = False
