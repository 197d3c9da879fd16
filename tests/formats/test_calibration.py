"""The calibration record (adloco.formats.calibration): fixture files, the loaders training uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adloco.config import DeviceConfig, section
from adloco.formats import calibration as calibration_record
from adloco.formats.calibration import CalibrationError, CalibrationRecord
from adloco.formats.clock import StepTimeCurve


def typed(device: dict) -> DeviceConfig:
    """The typed entry of ``cluster.devices`` of ``device`` (1 GiB unless it says)."""
    return section("cluster", {"devices": [{"memory_gib": 1, **device}]}).devices[0]


def load_max_batch(folder: Path, device: dict) -> int:
    return calibration_record.load_max_batch(folder, typed(device))


def load_step_time_curve(folder: Path, device: dict) -> StepTimeCurve:
    return calibration_record.load_step_time_curve(folder, typed(device))


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "calibration"
TINY = {
    "name": "cpu-tiny",
    "max_batch": None,
    "speed_tflops": 0.01,
    "step_time": {"model": "roofline", "saturation_batch": 8, "update_s": 0.0, "scale": 1.0},
}


def test_good_file_reads_as_training_and_the_report_read_it():
    record = CalibrationRecord.read(FIXTURES / "good" / "cpu-tiny.json", "cpu-tiny")
    assert record.max_batch == 57
    assert record.get("model_parameters") == record.require("model_parameters") > 0
    assert load_max_batch(FIXTURES / "good", TINY) == 57
    curve = load_step_time_curve(FIXTURES / "good", TINY)
    assert curve == record.curve() == StepTimeCurve.from_dict(record.fields["step_time_curve"])
    assert record.curve("step_time_measured").batches == (1, 2, 4, 8, 16, 32, 64, 114)


def test_a_missing_field_is_named_with_the_file_when_asked_for():
    folder = FIXTURES / "missing_field"
    record = CalibrationRecord.read(folder / "cpu-tiny.json", "cpu-tiny")
    assert load_max_batch(folder, TINY) == 57  # the max batch is there
    with pytest.raises(CalibrationError, match=r"missing_field/cpu-tiny.json: no step_time_curve"):
        load_step_time_curve(folder, TINY)
    with pytest.raises(CalibrationError, match=r"cpu-tiny.json: no step_time_curve"):
        record.curve()
    with pytest.raises(CalibrationError, match=r"cpu-tiny.json: no gpu_name"):
        record.require("gpu_name")


def test_a_field_of_the_wrong_type_is_refused_on_reading():
    path = FIXTURES / "wrong_type" / "cpu-tiny.json"
    named = r"wrong_type/cpu-tiny.json: field 'max_batch' must be an integer, got '3'"
    with pytest.raises(CalibrationError, match=named):
        CalibrationRecord.read(path)
    with pytest.raises(CalibrationError, match=named):
        load_max_batch(path.parent, TINY)


def test_write_checks_types_and_reads_back(tmp_path):
    fields = json.loads((FIXTURES / "good" / "cpu-tiny.json").read_text())
    written = CalibrationRecord.write(tmp_path / "cpu-tiny.json", fields)
    assert CalibrationRecord.read(written.path, "cpu-tiny").fields == fields
    assert (tmp_path / "cpu-tiny.json").read_text() == (
        FIXTURES / "good" / "cpu-tiny.json"
    ).read_text()
    with pytest.raises(CalibrationError, match="field 'margin' must be an integer or a number"):
        CalibrationRecord.write(tmp_path / "bad.json", {**fields, "margin": True})
    assert not (tmp_path / "bad.json").exists()
    assert CalibrationRecord.read_if_present(tmp_path / "absent.json") is None
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CalibrationError, match="broken.json: not valid JSON"):
        CalibrationRecord.read_if_present(tmp_path / "broken.json")


def _calibration(device: str, curve: StepTimeCurve, **step_time) -> dict:
    settings = {
        "model": "roofline",
        "saturation_batch": 8,
        "update_s": 0.0,
        "scale": 1.0,
        "speed_tflops": 1.0,
    }
    return {
        "device": device,
        "max_batch": 5,
        "step_time": {**settings, **step_time},
        "step_time_curve": curve.as_dict(),
    }


def test_load_step_time_curve_round_trip_and_errors(tmp_path):
    curve = StepTimeCurve.roofline(0.01, 8, update_s=0.002)
    device = {"name": "gpu-a", "max_batch": 7, "speed_tflops": 1.0}
    # Even a device with a fixed max_batch needs its file for the curve.
    with pytest.raises(FileNotFoundError, match="gpu-a.json"):
        load_step_time_curve(tmp_path, device)
    (tmp_path / "gpu-a.json").write_text(json.dumps(_calibration("gpu-a", curve)))
    assert load_step_time_curve(tmp_path, device) == curve

    def write(name: str, record: dict) -> dict:
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
        return {**device, "name": name}

    other = write("gpu-b", _calibration("gpu-a", curve))
    with pytest.raises(ValueError, match="gpu-b.json.*calibrates device 'gpu-a'"):
        load_step_time_curve(tmp_path, other)
    old = {k: v for k, v in _calibration("gpu-c", curve).items() if k != "step_time_curve"}
    with pytest.raises(ValueError, match="gpu-c.json: no step_time_curve"):
        load_step_time_curve(tmp_path, write("gpu-c", old))
    bad = _calibration("gpu-d", curve)
    bad["step_time_curve"]["batches"] = [4, 2, 8]
    with pytest.raises(ValueError, match="gpu-d.json: step_time_curve is malformed"):
        load_step_time_curve(tmp_path, write("gpu-d", bad))
    # A file written under other step_time settings is stale.
    stale = write("gpu-e", _calibration("gpu-e", curve, saturation_batch=4))
    with pytest.raises(ValueError, match="gpu-e.json: written for step_time.*saturation_batch"):
        load_step_time_curve(tmp_path, stale)
    slower = {**device, "name": "gpu-a", "speed_tflops": 2.0}
    with pytest.raises(ValueError, match="gpu-a.json.*speed_tflops"):
        load_step_time_curve(tmp_path, slower)
    measured = {**device, "name": "gpu-f", "step_time": {"model": "measured", "scale": 2.0}}
    write("gpu-f", _calibration("gpu-f", curve, model="measured", scale=1.0))
    with pytest.raises(ValueError, match="gpu-f.json.*scale"):
        load_step_time_curve(tmp_path, measured)
    # speed_tflops does not matter to a measured curve.
    write("gpu-g", _calibration("gpu-g", curve, model="measured", scale=2.0, speed_tflops=9.0))
    assert load_step_time_curve(tmp_path, {**measured, "name": "gpu-g"}) == curve


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
