"""What every batch test shares (adloco.algo.batch_test_base): settings, guards."""

from __future__ import annotations

import dataclasses
import math

import pytest

from adloco.algo.batch_test_base import (
    MIN_BATCH_GRAD_SQNORM,
    BatchTest,
    NoSettings,
    check_positive,
)
from adloco.algo.estimators import VarianceEstimate


@dataclasses.dataclass(frozen=True)
class HalfSettings:
    scale: float

    def __post_init__(self):
        check_positive(self)


class RatioTest(BatchTest):
    """A test that asks for scale · tr Σ / ‖ḡ‖², or nothing when tr Σ is negative."""

    name = "ratio"
    settings_type = HalfSettings

    def ratio(self, est, settings):
        return None if est.trace_cov < 0 else settings.scale * est.trace_cov / est.batch_grad_sqnorm


def est_of(trace_cov=6.0, bgs=2.0) -> VarianceEstimate:
    return VarianceEstimate(trace_cov, bgs, bgs, None, None, 8, 64, 7)


def test_guards_shared_by_every_test():
    test, s = RatioTest(), HalfSettings(0.5)
    assert test.requested_global_batch(est_of(), s) == pytest.approx(1.5)  # 0.5 · 6 / 2
    assert test.requested_global_batch(est_of(trace_cov=-1.0), s) is None
    assert test.requested_global_batch(est_of(bgs=MIN_BATCH_GRAD_SQNORM / 2), s) is None
    assert test.requested_global_batch(est_of(bgs=MIN_BATCH_GRAD_SQNORM), s) == pytest.approx(
        3.0 / MIN_BATCH_GRAD_SQNORM
    )
    assert test.requested_global_batch(est_of(bgs=math.nan), s) is None
    assert test.requested_global_batch(est_of(trace_cov=math.inf), s) is None
    with pytest.raises(TypeError, match="the ratio test reads HalfSettings"):
        test.requested_global_batch(est_of(), NoSettings())


def test_settings_from_a_mapping_or_an_object_read_only_the_tests_fields():
    @dataclasses.dataclass
    class Run:
        scale: float
        other: str

    assert RatioTest().settings_from({"scale": 2.0, "other": "x"}) == HalfSettings(2.0)
    assert RatioTest().settings_from(Run(3.0, "x")) == HalfSettings(3.0)
    with pytest.raises(KeyError):
        RatioTest().settings_from({"other": "x"})
    with pytest.raises(ValueError, match="scale must be > 0, got -1"):
        RatioTest().settings_from({"scale": -1.0})
    with pytest.raises(ValueError, match="scale must be > 0, got nan"):
        HalfSettings(math.nan)


def test_a_test_that_is_not_adaptive_never_asks():
    class Off(BatchTest):
        name = "off"
        adaptive = False

    assert Off().settings_from({"scale": 1.0}) == NoSettings()
    assert Off().requested_global_batch(est_of(), NoSettings()) is None
