"""adloco.calibrate (the command): the file it writes, and the errors of its arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from calibrate_helpers import TEST_CONFIG, typed_device

from adloco.calibrate.bench import GIB
from adloco.config import load_config
from adloco.formats.calibration import load_max_batch, load_step_time_curve
from adloco.formats.clock import StepTimeCurve

pytestmark = pytest.mark.usefixtures("one_thread")


def _write_config(tmp_path: Path, seq_len: int, memory_gib: float) -> Path:
    raw = yaml.safe_load(TEST_CONFIG.read_text())
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
    # --threads sets torch's threads before the passes are timed (Snakemake
    # passes a training process's; the one_thread fixture restores them).
    assert main([*argv, "--device", "cpu-tiny", "--out", str(out), "--threads", "2"]) == 0
    record = json.loads(out.read_text())
    assert record["step_time_measured"]["torch_threads"] == 2
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
        "slot_sharing",
        "step_time",
        "step_time_measured",
        "step_time_curve",
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
    assert load_max_batch(out.parent, typed_device(name="cpu-tiny")) == 7
    # Timed up to 2 slots x 7 sequences; the clock's curve is the declared roofline.
    assert record["step_time_measured"]["batches"] == [1, 2, 4, 8, 14]
    config = load_config(config_path)
    curve = load_step_time_curve(out.parent, config.cluster.device("cpu-tiny"))
    assert curve == StepTimeCurve.from_dict(record["step_time_curve"])
    assert curve.batches == (1, 8, 16) and record["step_time"]["model"] == "roofline"
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
