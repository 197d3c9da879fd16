"""The norm test (adloco.algo.norm_test) against hand values: B = tr Σ / (η² ‖ḡ‖²)."""

from __future__ import annotations

import math

import pytest
from batch_cases import est_of

from adloco.algo.norm_test import NormSettings, NormTest

TEST = NormTest()


def test_hand_values():
    # B = 8 / (0.8² · 0.5) = 25; η halved asks for four times as much, tr Σ doubled twice.
    assert TEST.requested_global_batch(est_of(), NormSettings(0.8)) == pytest.approx(25.0)
    assert TEST.requested_global_batch(est_of(), NormSettings(0.4)) == pytest.approx(100.0)
    assert TEST.requested_global_batch(est_of(trace_cov=16.0), NormSettings(0.8)) == (
        pytest.approx(50.0)
    )


def test_reads_eta_alone_and_needs_no_reference_direction():
    assert TEST.name == "norm" and TEST.adaptive and not TEST.needs_reference
    assert TEST.settings_from({"eta": 0.5, "vartheta": 0.1, "nu": 0.3}) == NormSettings(0.5)
    # Without the inner-product statistics (a trainer's first round) it still asks.
    assert est_of().ip_var is None
    assert TEST.requested_global_batch(est_of(), NormSettings(0.8)) is not None
    with pytest.raises(ValueError, match="eta must be > 0"):
        NormSettings(0.0)
    # A NaN trace: no answer rather than a NaN batch.
    assert TEST.requested_global_batch(est_of(trace_cov=math.nan), NormSettings(0.8)) is None
