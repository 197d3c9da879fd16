"""The ``none`` batch test (adloco.algo.no_test): it reads nothing and never asks."""

from __future__ import annotations

from adloco.algo.batch_test_base import NoSettings
from adloco.algo.estimators import VarianceEstimate
from adloco.algo.no_test import NoTest


def test_reads_no_setting_and_never_asks_for_a_batch():
    test = NoTest()
    assert test.name == "none" and not test.adaptive and not test.needs_reference
    assert test.settings_from({"eta": 0.8, "vartheta": 0.1, "nu": 0.3}) == NoSettings()
    for trace_cov, ip_var in ((8.0, None), (1e6, 1.0)):
        est = VarianceEstimate(
            trace_cov=trace_cov,
            grad_sqnorm=0.25,
            batch_grad_sqnorm=0.5,
            ip_var=ip_var,
            orth_var=ip_var,
            groups=8,
            samples=64,
            dof=7,
        )
        assert test.requested_global_batch(est, NoSettings()) is None
