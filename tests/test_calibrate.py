"""Tests of adloco.calibrate: the search, the budget, CPU trials and load_max_batch."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from adloco.calibrate import (
    GIB,
    TrialResult,
    apply_margin,
    calibrate_device,
    load_max_batch,
    measure_cpu_peak_bytes,
    search_max_batch,
    slot_budget_bytes,
    train_steps,
)
from adloco.config import load_config

REPO = Path(__file__).resolve().parents[1]


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
    assert slot_budget_bytes(1000, 4, param_bytes=50) == 250
    # Sequential: three other slots each hold parameters and two AdamW moments.
    assert slot_budget_bytes(1000, 4, param_bytes=50, sharing="sequential") == 1000 - 3 * 3 * 50
    assert slot_budget_bytes(1000, 1, param_bytes=50, sharing="sequential") == 1000
    with pytest.raises(ValueError, match="no memory left"):
        slot_budget_bytes(1000, 4, param_bytes=200, sharing="sequential")
    with pytest.raises(ValueError, match="sharing"):
        slot_budget_bytes(1000, 4, param_bytes=50, sharing="bogus")


@pytest.fixture(scope="module")
def tiny_config() -> dict:
    config = load_config(REPO / "config" / "test.yaml")
    config["calibration"]["steps_per_trial"] = 2
    config["data"]["seq_len_tokens"] = 16
    return config


@pytest.fixture(scope="module")
def tiny_model(tiny_config):
    from adloco.model import build_model

    return build_model(tiny_config["model"], 64, tiny_config["data"]["seq_len_tokens"], seed=0)


def _peak(model, batch: int, seq_len: int, steps: int = 2) -> int:
    import torch

    def run_batch(b: int) -> None:
        train_steps(model, torch.optim.AdamW, b, seq_len, 64, steps)

    return measure_cpu_peak_bytes(run_batch, model, batch)


def test_cpu_peak_counts_static_state_and_grows_with_batch(tiny_model, tiny_config):
    seq_len = tiny_config["data"]["seq_len_tokens"]
    param_bytes = sum(p.numel() * 4 for p in tiny_model.parameters())
    peaks = [_peak(tiny_model, b, seq_len) for b in (1, 2, 4, 8, 16)]
    # Parameters, gradients and AdamW's two moments are all live at the step.
    assert peaks[0] >= 4 * param_bytes
    assert all(a < b for a, b in zip(peaks, peaks[1:], strict=False))
    # Activations are linear in the batch: the increments double with it.
    increments = [b - a for a, b in zip(peaks[2:], peaks[3:], strict=False)]
    assert increments[1] == pytest.approx(2 * increments[0], rel=0.05)
    # Deterministic: the same trial twice gives the same peak.
    assert _peak(tiny_model, 4, seq_len) == peaks[2]


def test_cpu_calibration_is_exact_against_brute_force(tiny_config, tiny_model):
    config = copy.deepcopy(tiny_config)
    seq_len = config["data"]["seq_len_tokens"]
    k = config["cluster"]["nodes_per_device"]
    steps = config["calibration"]["steps_per_trial"]
    # A budget halfway between the measured peaks of batches 5 and 6.
    budget = (_peak(tiny_model, 5, seq_len, steps) + _peak(tiny_model, 6, seq_len, steps)) // 2
    device = dict(config["cluster"]["devices"][0], memory_gib=budget * k / GIB)
    config["calibration"]["max_batch_limit"] = 32
    record = calibrate_device(config, device, vocab_size=64, seq_len_tokens=seq_len)
    assert record["method"] == "cpu-simulated-dispatch-tracker"
    assert abs(record["budget_bytes"] - budget) <= 1
    raw = record["raw_max_batch"]
    brute = [_peak(tiny_model, b, seq_len, steps) for b in range(1, raw + 2)]
    assert all(p <= record["budget_bytes"] for p in brute[:raw])
    assert brute[raw] > record["budget_bytes"]
    assert raw == 5
    assert record["max_batch"] == apply_margin(5, config["calibration"]["margin"])
    # Trials that fitted recorded the full peak, the same as the brute force.
    for t in record["trials"]:
        if t["fits"]:
            assert t["peak_bytes"] == brute[t["batch"] - 1]
        else:
            assert t["peak_bytes"] > record["budget_bytes"]
    assert [t["batch"] for t in record["trials"]] == [1, 2, 4, 8, 6, 5]
    assert record["model_parameters"] == sum(p.numel() for p in tiny_model.parameters())


def test_configured_max_batch_skips_the_search(tiny_config):
    device = dict(tiny_config["cluster"]["devices"][0], max_batch=12)
    record = calibrate_device(tiny_config, device, vocab_size=64, seq_len_tokens=16)
    assert record["method"] == "configured"
    assert record["max_batch"] == record["raw_max_batch"] == 12
    assert record["trials"] == []


def test_load_max_batch(tmp_path):
    device = {"name": "gpu-a", "max_batch": None}
    with pytest.raises(FileNotFoundError, match="gpu-a.json"):
        load_max_batch(tmp_path, device)
    (tmp_path / "gpu-a.json").write_text(json.dumps({"device": "gpu-a", "max_batch": 23}))
    assert load_max_batch(tmp_path, device) == 23
    assert load_max_batch(tmp_path, {"name": "gpu-a", "max_batch": 7}) == 7
    (tmp_path / "gpu-b.json").write_text(json.dumps({"device": "gpu-a", "max_batch": 23}))
    with pytest.raises(ValueError, match="gpu-b.json"):
        load_max_batch(tmp_path, {"name": "gpu-b"})
    (tmp_path / "gpu-c.json").write_text(json.dumps({"device": "gpu-c"}))
    with pytest.raises(ValueError, match="max_batch"):
        load_max_batch(tmp_path, {"name": "gpu-c"})


def _write_config(tmp_path: Path, seq_len: int, memory_gib: float) -> Path:
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    raw["data"]["seq_len_tokens"] = seq_len
    raw["cluster"]["devices"][0]["memory_gib"] = memory_gib
    raw["calibration"]["max_batch_limit"] = 8
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    return config_path


def test_cli_writes_the_calibration(tmp_path, tiny_tokenized):
    from adloco.cli import main

    manifest = json.loads((tiny_tokenized / "manifest.json").read_text())
    config_path = _write_config(tmp_path, manifest["seq_len_tokens"], memory_gib=0.05)
    out = tmp_path / "results" / "cpu-tiny.json"
    argv = ["calibrate", "--config", str(config_path), "--data", str(tiny_tokenized)]
    assert main([*argv, "--device", "cpu-tiny", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    for key in (
        "device",
        "kind",
        "memory_bytes",
        "budget_bytes",
        "raw_max_batch",
        "max_batch",
        "margin",
        "seq_len_tokens",
        "dtype",
        "torch_version",
        "method",
        "trials",
        "model_parameters",
    ):
        assert key in record, key
    assert record["device"] == "cpu-tiny"
    assert record["memory_bytes"] == int(0.05 * GIB)
    assert record["budget_bytes"] == int(0.05 * GIB) // 2
    assert record["seq_len_tokens"] == manifest["seq_len_tokens"]
    assert record["vocab_size"] == manifest["vocab_size"]
    # 25 MiB per slot is far above what batch 8 of this model needs.
    assert record["raw_max_batch"] == 8
    assert record["max_batch"] == 7
    assert load_max_batch(out.parent, {"name": "cpu-tiny"}) == 7
    # An unknown device and a data folder without a manifest are clear errors.
    assert main([*argv, "--device", "nope", "--out", str(out)]) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = ["calibrate", "--config", str(config_path), "--data", str(empty)]
    assert main([*bad, "--device", "cpu-tiny", "--out", str(out)]) == 1


def test_cli_rejects_data_of_another_sequence_length(tmp_path, tiny_tokenized, capsys):
    from adloco.cli import main

    manifest = json.loads((tiny_tokenized / "manifest.json").read_text())
    config_path = _write_config(tmp_path, 2 * manifest["seq_len_tokens"], memory_gib=0.05)
    out = tmp_path / "cal.json"
    argv = ["calibrate", "--config", str(config_path), "--data", str(tiny_tokenized)]
    assert main([*argv, "--device", "cpu-tiny", "--out", str(out)]) == 1
    assert "seq_len_tokens" in capsys.readouterr().err
    assert not out.exists()
