"""adloco.calibrate.memory_search: the search, the margin, the slot budget and CPU trials."""

from __future__ import annotations

import dataclasses
import math

import pytest
from calibrate_helpers import cpu_bench, tiny

from adloco.calibrate.bench import GIB
from adloco.calibrate.device import calibrate_device
from adloco.calibrate.memory_search import (
    TrialResult,
    apply_margin,
    measure_cpu_peak_bytes,
    search_max_batch,
    slot_budget_bytes,
    train_steps,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def threshold_trial(threshold: int):
    def trial(batch: int) -> TrialResult:
        return TrialResult(batch, batch * 100, batch <= threshold)

    return trial


def test_search_finds_37_with_doubling_then_bisection():
    raw, trials = search_max_batch(threshold_trial(37), max_batch_limit=256)
    assert raw == 37
    batches = [t.batch for t in trials]
    # Doubling: 1, 2, ..., 32 fit and 64 fails (floor(log2 37) + 2 trials);
    # bisection of (32, 64): ceil(log2(64 - 32)) trials.
    doubling = math.floor(math.log2(37)) + 2
    bisection = math.ceil(math.log2(64 - 32))
    assert batches[:doubling] == [1, 2, 4, 8, 16, 32, 64]
    assert batches[doubling:] == [48, 40, 36, 38, 37]
    assert len(trials) == doubling + bisection


@pytest.mark.parametrize("limit", [1, 7, 64, 100])
def test_search_matches_brute_force_for_every_threshold(limit):
    for threshold in range(1, 130):
        raw, trials = search_max_batch(threshold_trial(threshold), max_batch_limit=limit)
        assert raw == min(threshold, limit)
        batches = [t.batch for t in trials]
        assert len(set(batches)) == len(batches), "a batch was tried twice"
        assert max(batches) <= limit
        assert len(trials) <= 2 * math.ceil(math.log2(limit)) + 1


def test_search_stops_at_the_limit_when_everything_fits():
    raw, trials = search_max_batch(threshold_trial(10**6), max_batch_limit=100)
    assert raw == 100
    assert [t.batch for t in trials] == [1, 2, 4, 8, 16, 32, 64, 100]


def test_search_raises_when_nothing_fits():
    with pytest.raises(ValueError, match="batch of 1"):
        search_max_batch(threshold_trial(0), max_batch_limit=16)


def test_apply_margin():
    assert apply_margin(57, 0.9) == 51
    assert apply_margin(10, 0.9) == 9
    assert apply_margin(37, 1.0) == 37
    assert apply_margin(1, 0.5) == 1
    with pytest.raises(ValueError, match="margin"):
        apply_margin(10, 0.0)


def test_slot_budget():
    assert slot_budget_bytes(1000, 4, param_bytes=50, sharing="concurrent") == 250
    # Time slicing: three other slots each hold parameters and two AdamW moments.
    assert slot_budget_bytes(1000, 4, param_bytes=50, sharing="time_slicing") == 1000 - 3 * 3 * 50
    assert slot_budget_bytes(1000, 1, param_bytes=50, sharing="time_slicing") == 1000
    with pytest.raises(ValueError, match="no memory left"):
        slot_budget_bytes(1000, 4, param_bytes=200, sharing="time_slicing")
    # One set of names for the memory budget and the clock: the old name is gone.
    for bad in ("sequential", "bogus"):
        with pytest.raises(ValueError, match="sharing"):
            slot_budget_bytes(1000, 4, param_bytes=50, sharing=bad)


def _peak(config, model, batch: int, steps: int = 2) -> int:
    bench = cpu_bench(config, model)
    return measure_cpu_peak_bytes(lambda b: train_steps(bench, b, steps), model, batch)


def test_cpu_peak_counts_static_state_and_grows_with_batch(tiny_model, tiny_config):
    param_bytes = sum(p.numel() * 4 for p in tiny_model.parameters())
    peaks = [_peak(tiny_config, tiny_model, b) for b in (1, 2, 4, 8, 16)]
    # Parameters, gradients and AdamW's two moments are all live at the step.
    assert peaks[0] >= 4 * param_bytes
    assert all(a < b for a, b in zip(peaks, peaks[1:], strict=False))
    # Activations are linear in the batch: the increments double with it.
    increments = [b - a for a, b in zip(peaks[2:], peaks[3:], strict=False)]
    assert increments[1] == pytest.approx(2 * increments[0], rel=0.05)
    # Deterministic: the same trial twice gives the same peak.
    assert _peak(tiny_config, tiny_model, 4) == peaks[2]


def test_cpu_calibration_is_exact_against_brute_force(tiny_config, tiny_model):
    config = tiny(calibration={"max_batch_limit": 32})
    seq_len = config.data.seq_len_tokens
    k = config.cluster.nodes_per_device
    steps = config.calibration.steps_per_trial
    # A budget halfway between the measured peaks of batches 5 and 6.
    budget = (_peak(config, tiny_model, 5, steps) + _peak(config, tiny_model, 6, steps)) // 2
    device = dataclasses.replace(config.cluster.devices[0], memory_gib=budget * k / GIB)
    record = calibrate_device(config, device, vocab_size=64, seq_len_tokens=seq_len)
    assert record["method"] == "cpu-simulated-dispatch-tracker"
    assert abs(record["budget_bytes"] - budget) <= 1
    raw = record["raw_max_batch"]
    brute = [_peak(config, tiny_model, b, steps) for b in range(1, raw + 2)]
    assert all(p <= record["budget_bytes"] for p in brute[:raw])
    assert brute[raw] > record["budget_bytes"]
    assert raw == 5
    assert record["max_batch"] == apply_margin(5, config.calibration.margin)
    # Trials that fitted recorded the full peak, the same as the brute force.
    for t in record["trials"]:
        if t["fits"]:
            assert t["peak_bytes"] == brute[t["batch"] - 1]
        else:
            assert t["peak_bytes"] > record["budget_bytes"]
    assert [t["batch"] for t in record["trials"]] == [1, 2, 4, 8, 6, 5]
    assert record["model_parameters"] == sum(p.numel() for p in tiny_model.parameters())
    assert (record["max_batch_limit"], record["steps_per_trial"]) == (32, 2)
