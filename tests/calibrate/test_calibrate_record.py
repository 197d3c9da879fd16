"""adloco.calibrate.device: one device's record, measured in order."""

from __future__ import annotations

import dataclasses

import pytest
from calibrate_helpers import tiny

from adloco.calibrate.bench import GIB
from adloco.calibrate.device import calibrate_device

pytestmark = pytest.mark.usefixtures("one_thread")


def test_configured_max_batch_skips_the_search_not_the_timing(tiny_config):
    device = dataclasses.replace(tiny_config.cluster.devices[0], max_batch=12)
    record = calibrate_device(tiny_config, device, vocab_size=64, seq_len_tokens=16)
    assert record["method"] == "configured"
    assert record["max_batch"] == record["raw_max_batch"] == 12
    assert record["trials"] == [] and record["budget_bytes"] is None
    # 2 slots of 12: concurrent slots run up to 24 sequences in one pass.
    assert record["step_time_measured"]["batches"] == [1, 2, 4, 8, 16, 24]
    assert record["slot_sharing"] == "concurrent"


def test_the_record_says_what_was_calibrated(tiny_model):
    config = tiny(cluster={"slot_sharing": "time_slicing"}, calibration={"margin": 0.5})
    device = dataclasses.replace(config.cluster.devices[0], max_batch=1)
    record = calibrate_device(config, device, vocab_size=64, seq_len_tokens=16)
    parameters = sum(p.numel() for p in tiny_model.parameters())
    assert record["model_parameters"] == parameters
    assert record["param_bytes"] == 4 * parameters  # float32
    assert (record["device"], record["kind"]) == ("cpu-tiny", "cpu")
    # The test preset's 0.05 GiB, rounded down to bytes.
    assert record["memory_bytes"] == int(0.05 * GIB) == 53_687_091
    assert (record["nodes_per_device"], record["slot_sharing"]) == (2, "time_slicing")
    assert (record["margin"], record["dtype"]) == (0.5, "float32")
    assert (record["seq_len_tokens"], record["vocab_size"]) == (16, 64)
    assert "gpu_name" not in record
