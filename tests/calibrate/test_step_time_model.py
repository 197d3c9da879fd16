"""adloco.calibrate.step_time_model: the curve the clock charges, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from calibrate_helpers import tiny, typed_device

from adloco.calibrate.device import calibrate_device
from adloco.calibrate.step_time_model import declared_step_time
from adloco.config import ConfigError, load_config
from adloco.formats.calibration import CalibrationError, CalibrationRecord, load_step_time_curve
from adloco.formats.clock import StepTimeCurve


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


# A measured record of another device: passes of sequences of 64 tokens.
OTHER = {
    "device": "gpu",
    "gpu_name": "Some GPU",
    "dtype": "bfloat16",
    "seq_len_tokens": 64,
    "step_time_curve": {"batches": [1, 4, 8], "fwd_bwd_s": [0.2, 0.2, 0.6], "update_s": 0.05},
}


def write_record(tmp_path: Path, fields: dict | str, name: str = "other.json") -> str:
    path = tmp_path / name
    path.write_text(fields if isinstance(fields, str) else json.dumps(fields))
    return str(path)


def test_measured_record_mapped_at_equal_tokens_by_hand(tmp_path):
    path = write_record(tmp_path, OTHER)
    device = typed_device(name="sim", step_time={"model": "measured_record", "record": path})
    measured = StepTimeCurve((1, 2), (0.01, 0.02), 0.001)  # this machine's: not used
    record, curve = declared_step_time(device, 920_192, 16, measured)
    # 16 tokens against 64: a pass of b sequences is b / 4 measured ones; the points 1, 4, 8
    # map to 4, 16, 32, and 1 (a quarter sequence) reads the flat start.
    assert curve.batches == (1, 4, 16, 32)
    assert curve.fwd_bwd_s == pytest.approx((0.2, 0.2, 0.2, 0.6))
    assert curve.update_s == 0.05
    # 24 sequences of 16 tokens are 6 of 64: halfway from 4 (0.2 s) to 8 (0.6 s).
    assert curve.pass_s(24) == pytest.approx(0.4)
    assert (record["model"], record["record"], record["record_seq_len_tokens"]) == (
        "measured_record",
        path,
        64,
    )
    assert record["record_curve"] == OTHER["step_time_curve"]
    assert record["source"] == {"gpu_name": "Some GPU", "dtype": "bfloat16"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"other\.json: no such file"),
        ("{not json", r"other\.json: not valid JSON"),
        ({"seq_len_tokens": 64}, r"other\.json: no step_time_curve"),
        ({**OTHER, "seq_len_tokens": None}, r"other\.json: field 'seq_len_tokens' must be"),
        ({k: v for k, v in OTHER.items() if k != "seq_len_tokens"}, r"other\.json: no seq_len"),
        ({**OTHER, "seq_len_tokens": 0}, r"other\.json: seq_len_tokens must be >= 1"),
        (
            {**OTHER, "step_time_curve": {"batches": [2, 1], "fwd_bwd_s": [0.1, 0.2]}},
            r"other\.json: step_time_curve is malformed",
        ),
    ],
)
def test_a_bad_record_is_refused_at_load_naming_the_key_and_the_file(tmp_path, content, message):
    path = str(tmp_path / "other.json") if content is None else write_record(tmp_path, content)
    device = {"name": "cpu-tiny", "memory_gib": 0.05,
              "step_time": {"model": "measured_record", "record": path}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"^cluster\.devices\.0\.step_time\.record: .*" + message):
        tiny(cluster={"devices": [device]})
    # One line each.
    try:
        tiny(cluster={"devices": [device]})
    except ConfigError as exc:
        assert "\n" not in str(exc)


def test_a_measured_record_device_needs_a_record_and_other_models_ignore_it(tmp_path):
    device = {"name": "cpu-tiny", "memory_gib": 0.05, "step_time": {"model": "measured_record"}}
    with pytest.raises(ConfigError, match=r"cluster\.devices\.0\.step_time\.record: required"):
        tiny(cluster={"devices": [device]})
    device["step_time"] = {"model": "roofline", "record": str(tmp_path / "absent.json")}
    assert tiny(cluster={"devices": [device]}).cluster.devices[0].step_time.model == "roofline"


def test_calibration_writes_the_mapped_curve_and_training_reads_it(tmp_path):
    path = write_record(tmp_path, OTHER)
    device = {"name": "cpu-tiny", "memory_gib": 0.05, "max_batch": 3,
              "step_time": {"model": "measured_record", "record": path}}  # fmt: skip
    config = tiny(cluster={"devices": [device]})  # sequences of 16 tokens, 2 slots
    (typed,) = config.cluster.devices
    fields = calibrate_device(config, typed, 64, 16)
    out = tmp_path / "calibration" / "cpu-tiny.json"
    CalibrationRecord.write(out, fields)
    # Timed here up to 2 slots x 3 sequences; the clock's curve is the record's, mapped.
    assert fields["step_time_measured"]["batches"] == [1, 2, 4, 6]
    assert fields["step_time_curve"] == {
        "batches": [1, 4, 16, 32], "fwd_bwd_s": [0.2, 0.2, 0.2, 0.6], "update_s": 0.05
    }  # fmt: skip
    curve = load_step_time_curve(out.parent, typed)
    assert curve.pass_s(24) == pytest.approx(0.4)
    # The record edited since: the file is stale, as after a changed setting.
    write_record(tmp_path, {**OTHER, "seq_len_tokens": 32})
    with pytest.raises(CalibrationError, match=r"record_seq_len_tokens.*re-run `adloco calibrate"):
        load_step_time_curve(out.parent, typed)


REPO = Path(__file__).resolve().parents[2]


def test_the_default_device_file_copies_the_h100_measurement(monkeypatch):
    monkeypatch.chdir(REPO)  # the config names the file relative to the working folder
    # config/devices/ holds the fields the clock needs of the GPU check's record, unchanged.
    device = json.loads((REPO / "config/devices/h100-microllama-bf16.json").read_text())
    source = json.loads((REPO / device["provenance"]["source"]).read_text())
    for key in ("step_time_curve", "seq_len_tokens", "gpu_name", "torch_version", "dtype",
                "model_parameters", "vocab_size"):  # fmt: skip
        assert device[key] == source[key], key
    assert source["step_time_curve"]["fwd_bwd_s"] == source["step_time_measured"]["fwd_bwd_s"]
    default = load_config(REPO / "config/config.yaml").cluster.devices[0]
    assert default.step_time.record == "config/devices/h100-microllama-bf16.json"
