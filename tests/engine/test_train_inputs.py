"""`adloco train` refuses, before any step, a calibration file measured on another model."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from array_data import TINY_MODEL

from adloco import cli
from adloco.config import config_from_dict
from adloco.data.reader import TokenData
from adloco.formats.calibration import CalibrationRecord, step_time_record
from adloco.formats.clock import StepTimeCurve
from adloco.formats.model_size import parameter_count

CONFIG = {
    "experiment": "train-inputs",
    "seed": 0,
    "data": {"dataset": "tiny", "source": "local", "seq_len_tokens": 16},
    "model": TINY_MODEL,
    "cluster": {
        "nodes_per_device": 2,
        "devices": [{"name": "sim", "count": 2, "memory_gib": 1.0, "max_batch": 3}],
    },
    "train": {"max_rounds": 1, "inner_steps": 2, "max_tokens": 10**6, "eval_sequences": 8},
    "runs": {"r": {"method": "diloco"}},
}


@pytest.fixture
def calibrated(tmp_path, tiny_tokenized):
    """A config, and its device's calibration file as `adloco calibrate` records the model."""
    config = config_from_dict(CONFIG)
    data = TokenData.open(tiny_tokenized)
    device = config.cluster.devices[0]
    fields = {
        "device": device.name,
        "max_batch": 3,
        "model_parameters": parameter_count(config.model, data.vocab_size),
        "seq_len_tokens": data.seq_len_tokens,
        "vocab_size": data.vocab_size,
        "step_time": step_time_record(device),
        "step_time_curve": StepTimeCurve.roofline(0.01, 4, update_s=0.001).as_dict(),
    }
    path = tmp_path / "calibration" / f"{device.name}.json"
    CalibrationRecord.write(path, fields)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))
    return config_path, path, fields


def train(tmp_path, tiny_tokenized, config_path) -> int:
    args = ["train", "--config", str(config_path), "--run", "r", "--seed", "0"]
    args += ["--data", str(tiny_tokenized), "--calibration", str(tmp_path / "calibration")]
    args += ["--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ckpt")]
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        return cli.main([*args, "--no-progress", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def test_a_calibration_of_the_runs_model_trains(calibrated, tmp_path, tiny_tokenized):
    config_path, _, _ = calibrated
    assert train(tmp_path, tiny_tokenized, config_path) == 0
    assert (tmp_path / "out" / "summary.json").is_file()


# (case, the file's fields changed, what the message says)
OTHER_MODELS = [
    ("more parameters", {"model_parameters": 1}, "model_parameters"),
    ("another sequence length", {"seq_len_tokens": 32}, "seq_len_tokens"),
]


@pytest.mark.reliability("inputs")
@pytest.mark.parametrize(("case", "change", "key"), OTHER_MODELS, ids=[c[0] for c in OTHER_MODELS])
def test_a_calibration_of_another_model_is_refused_before_any_step(
    calibrated, tmp_path, tiny_tokenized, capsys, case, change, key
):
    config_path, path, fields = calibrated
    if key == "model_parameters":
        change = {key: fields[key] + change[key]}  # one parameter more: any other model
    CalibrationRecord.write(path, {**fields, **change})
    assert train(tmp_path, tiny_tokenized, config_path) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"adloco train: error: {path}: "), err
    assert f"calibrated with {key} {change[key]}, the run's model has {fields[key]}" in err, err
    assert "re-run `adloco calibrate --device sim` for this config" in err, err
    # Nothing trained: no round checkpointed, no outputs.
    assert not list((tmp_path / "ckpt").glob("round-*")) and not (tmp_path / "out").exists()


@pytest.mark.reliability("inputs")
def test_a_calibration_without_the_models_size_is_refused(
    calibrated, tmp_path, tiny_tokenized, capsys
):
    config_path, path, fields = calibrated
    path.write_text(json.dumps({k: v for k, v in fields.items() if k != "model_parameters"}))
    assert train(tmp_path, tiny_tokenized, config_path) == 1
    err = capsys.readouterr().err
    assert f"{path}: no model_parameters; re-run `adloco calibrate --device sim`" in err, err
