"""Token-based inner learning-rate schedule (adloco.algo.schedule)."""

from __future__ import annotations

import math

import pytest

from adloco.algo.schedule import inner_lr

PEAK, MAX_TOKENS = 4e-4, 1_000_000


def lr(tokens: float, warmup: float = 0.1, floor: float = 0.1) -> float:
    return inner_lr(tokens, MAX_TOKENS, PEAK, warmup, floor)


def test_warmup_endpoints_and_midpoint():
    assert lr(0) == 0.0
    assert lr(50_000) == pytest.approx(PEAK / 2)
    assert lr(100_000) == pytest.approx(PEAK)
    assert inner_lr(0, MAX_TOKENS, PEAK, 0.0, 0.1) == pytest.approx(PEAK)


def test_cosine_midpoint_quarter_and_floor():
    # Half-way through the decay the cosine is at the mean of peak and floor.
    assert lr(550_000) == pytest.approx((PEAK + 0.1 * PEAK) / 2)
    # A quarter of the way: floor + (peak - floor) * (1 + cos(pi/4)) / 2.
    expected = 0.1 * PEAK + 0.9 * PEAK * (1 + math.cos(math.pi / 4)) / 2
    assert lr(100_000 + 225_000) == pytest.approx(expected)
    assert lr(MAX_TOKENS) == pytest.approx(0.1 * PEAK)
    assert lr(5 * MAX_TOKENS) == pytest.approx(0.1 * PEAK)
    assert inner_lr(MAX_TOKENS, MAX_TOKENS, PEAK, 0.0, 0.0) == 0.0


def test_monotone_after_warmup():
    values = [lr(t) for t in range(100_000, 1_200_000, 10_000)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))
    assert min(values) == pytest.approx(0.1 * PEAK)


def test_bad_arguments():
    with pytest.raises(ValueError, match="warmup_fraction"):
        inner_lr(0, MAX_TOKENS, PEAK, 1.5, 0.1)
    with pytest.raises(ValueError, match="max_tokens"):
        inner_lr(0, 0, PEAK, 0.1, 0.1)
    with pytest.raises(ValueError, match="tokens_seen"):
        inner_lr(-1, MAX_TOKENS, PEAK, 0.1, 0.1)


def test_lr_scale_rules():
    from adloco.algo.schedule import lr_scale

    assert lr_scale(16, 4, "none") == 1.0
    assert lr_scale(16, 4, "sqrt") == pytest.approx(2.0)
    assert lr_scale(16, 4, "linear") == pytest.approx(4.0)
    assert lr_scale(2, 8, "sqrt") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="lr_scaling"):
        lr_scale(2, 2, "cubic")
