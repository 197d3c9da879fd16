"""Tests of adloco.calibrate.memory: live and peak tensor bytes against hand counts."""

from __future__ import annotations

import pytest
import torch

from adloco.calibrate.memory import SimulatedOutOfMemoryError, StorageTracker, storage_bytes


def test_known_allocations_are_counted_exactly():
    with StorageTracker() as tracker:
        a = torch.empty(1000)  # 4000 bytes
        b = torch.empty(250, dtype=torch.float64)  # 2000 bytes
        assert tracker.live_bytes == 6000
        del a
        assert tracker.live_bytes == 2000
        c = torch.zeros(10, 10, dtype=torch.int16)  # 200 bytes
        assert tracker.live_bytes == 2200
        del b, c
    assert tracker.live_bytes == 0
    assert tracker.peak_bytes == 6000


def test_views_and_inplace_ops_allocate_nothing():
    with StorageTracker() as tracker:
        x = torch.zeros(100)  # 400 bytes
        v = x.view(10, 10).t()
        x.add_(1.0)
        v.mul_(2.0)
        x[3:7] = 5.0
        assert tracker.live_bytes == 400
        y = v.contiguous()  # a real copy: 400 more
        assert tracker.live_bytes == 800
        del x
        # v still holds the storage x had.
        assert tracker.live_bytes == 800
        del v, y
    assert tracker.live_bytes == 0


def test_baseline_is_added_and_preexisting_views_are_free():
    w = torch.randn(64, 32)
    with StorageTracker(baseline_bytes=storage_bytes([w])) as tracker:
        _ = w.t()
        assert tracker.live_bytes == 64 * 32 * 4
    assert tracker.peak_bytes == 64 * 32 * 4


def test_storage_bytes_counts_shared_storage_once():
    base = torch.empty(50)
    assert storage_bytes([base, base.view(5, 10), base[:3], torch.empty(2)]) == 50 * 4 + 2 * 4


def test_linear_forward_backward_against_hand_count():
    b, d_in, d_out = 16, 64, 32
    layer = torch.nn.Linear(d_in, d_out, bias=False)
    w_bytes = d_in * d_out * 4
    x_bytes, y_bytes = b * d_in * 4, b * d_out * 4
    with StorageTracker(baseline_bytes=storage_bytes(layer.parameters())) as tracker:
        x = torch.randn(b, d_in)
        y = layer(x)
        loss = y.sum()
        assert tracker.live_bytes == w_bytes + x_bytes + y_bytes + 4
        loss.backward()
        # Graph freed; weights, x, y, the loss scalar and the weight gradient remain.
        assert tracker.live_bytes == w_bytes + x_bytes + y_bytes + 4 + w_bytes
    peak_by_hand = w_bytes + x_bytes + y_bytes + 4 + w_bytes
    assert tracker.peak_bytes >= peak_by_hand
    # Backward seeds the graph with a one-element gradient and expands it
    # (a view) to y's shape; beyond that, at most a few scalars.
    assert tracker.peak_bytes <= peak_by_hand + 4 * 4


def test_limit_raises_at_the_operator_that_crosses_it():
    tracker = StorageTracker(baseline_bytes=1000, limit_bytes=5000)
    with pytest.raises(SimulatedOutOfMemoryError) as info:
        with tracker:
            a = torch.empty(500)  # 2000 bytes: 3000 live
            b = torch.empty(500)  # 5000 live: still fits
            assert tracker.live_bytes == 5000
            torch.empty(1)  # 5004 > 5000
    assert info.value.live_bytes == 5004
    assert info.value.limit_bytes == 5000
    del a, b
