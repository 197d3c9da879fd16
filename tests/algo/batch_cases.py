"""Helpers of the batch-test tests in tests/algo (not a test file): the paper's settings,
the next batch as batch_tests.next_batch gives it, and a hand-made variance estimate."""

from __future__ import annotations

from adloco.algo import batch_tests
from adloco.algo.estimators import VarianceEstimate

KW = {"eta": 0.8, "vartheta": 0.01, "nu": 0.3, "max_growth": 4.0}


def next_batch(name, est, current_batch, *, max_growth, **values):
    """batch_tests.next_batch with the test's settings read from ``values``."""
    settings = batch_tests.get(name).settings_from(values)
    return batch_tests.next_batch(name, est, current_batch, settings, max_growth=max_growth)


def est_of(trace_cov=8.0, bgs=0.5, ip_var=None, orth_var=None) -> VarianceEstimate:
    return VarianceEstimate(
        trace_cov=trace_cov,
        grad_sqnorm=bgs - trace_cov / 64,
        batch_grad_sqnorm=bgs,
        ip_var=ip_var,
        orth_var=orth_var,
        groups=8,
        samples=64,
        dof=7,
    )
