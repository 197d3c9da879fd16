"""adloco.calibrate.step_time_model: the curve the clock charges, by hand."""

from __future__ import annotations

import pytest
from calibrate_helpers import typed_device

from adloco.calibrate.step_time_model import declared_step_time
from adloco.clock import StepTimeCurve


def test_roofline_from_speed_tflops_by_hand():
    device = {
        "name": "sim",
        "speed_tflops": 0.05,
        "step_time": {"model": "roofline", "saturation_batch": 8, "update_s": 0.25},
    }
    measured = StepTimeCurve((1, 2), (0.01, 0.02), 0.001)
    record, curve = declared_step_time(typed_device(**device), 920_192, 128, measured)
    # 6 x 920,192 parameters x 128 tokens = 706,707,456 FLOPs per sequence, at 5e10 FLOP/s.
    per_sequence = 706_707_456 / 5e10
    assert record["flops_per_sequence"] == 706_707_456
    assert record["seconds_per_sequence"] == pytest.approx(per_sequence, rel=1e-12)
    assert per_sequence == pytest.approx(0.01413414912, rel=1e-12)
    assert curve.batches == (1, 8, 16)
    assert curve.fwd_bwd_s == pytest.approx((8 * per_sequence, 8 * per_sequence, 16 * per_sequence))
    assert curve.update_s == 0.25
    assert curve.pass_s(3) == curve.pass_s(8) and curve.pass_s(12) == pytest.approx(
        12 * per_sequence
    )
    # Schema defaults fill a device without a step_time block: roofline at 8.
    record, _ = declared_step_time(
        typed_device(name="sim", speed_tflops=0.05), 920_192, 128, measured
    )
    assert (record["model"], record["saturation_batch"], record["update_s"]) == ("roofline", 8, 0.0)
    # measured: this machine's curve times scale.
    scaled = typed_device(name="sim", step_time={"model": "measured", "scale": 3.0})
    record, curve = declared_step_time(scaled, 920_192, 128, measured)
    assert record["model"] == "measured" and "seconds_per_sequence" not in record
    assert curve == StepTimeCurve((1, 2), (0.03, 0.06), 0.003)
