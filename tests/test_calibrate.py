"""Tests of adloco.calibrate: the search, the budget, CPU trials, step timing and the loaders."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from adloco.calibrate.memory_search import (
    TrialResult,
    apply_margin,
    measure_cpu_peak_bytes,
    search_max_batch,
    slot_budget_bytes,
    train_steps,
)
from adloco.calibrate.record import GIB, calibrate_device
from adloco.calibrate.step_time_model import declared_step_time
from adloco.calibrate.step_timing import measure_step_times, time_repeats, timing_batches
from adloco.calibration_record import load_max_batch, load_step_time_curve
from adloco.clock import StepTimeCurve
from adloco.config import ConfigError, device_config, load_config_dict, model_config, validate

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
    # Time slicing: three other slots each hold parameters and two AdamW moments.
    assert slot_budget_bytes(1000, 4, param_bytes=50, sharing="time_slicing") == 1000 - 3 * 3 * 50
    assert slot_budget_bytes(1000, 1, param_bytes=50, sharing="time_slicing") == 1000
    with pytest.raises(ValueError, match="no memory left"):
        slot_budget_bytes(1000, 4, param_bytes=200, sharing="time_slicing")
    # One set of names for the memory budget and the clock: the old name is gone.
    for bad in ("sequential", "bogus"):
        with pytest.raises(ValueError, match="sharing"):
            slot_budget_bytes(1000, 4, param_bytes=50, sharing=bad)


@pytest.fixture(scope="module")
def tiny_config() -> dict:
    config = load_config_dict(REPO / "config" / "test.yaml")
    config["calibration"]["steps_per_trial"] = 2
    config["data"]["seq_len_tokens"] = 16
    return config


@pytest.fixture(scope="module")
def tiny_model(tiny_config):
    from adloco.model import build_model

    return build_model(
        model_config(tiny_config["model"]), 64, tiny_config["data"]["seq_len_tokens"], seed=0
    )


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


def test_configured_max_batch_skips_the_search_not_the_timing(tiny_config):
    device = dict(tiny_config["cluster"]["devices"][0], max_batch=12)
    record = calibrate_device(tiny_config, device, vocab_size=64, seq_len_tokens=16)
    assert record["method"] == "configured"
    assert record["max_batch"] == record["raw_max_batch"] == 12
    assert record["trials"] == []
    # 2 slots of 12: concurrent slots run up to 24 sequences in one pass.
    assert record["step_time_measured"]["batches"] == [1, 2, 4, 8, 16, 24]
    assert record["slot_sharing"] == "concurrent"


def test_real_cpu_timing_of_the_tiny_model(tiny_config):
    """Positive times at 1, 2, ..., k x max_batch; the clock's curve is measured x scale."""
    config = copy.deepcopy(tiny_config)
    config["cluster"]["nodes_per_device"] = 3
    device = dict(
        config["cluster"]["devices"][0],
        max_batch=2,
        step_time={"model": "measured", "scale": 2.5},
    )
    record = calibrate_device(config, device, vocab_size=64, seq_len_tokens=16)
    measured = record["step_time_measured"]
    repeats, warmup = (config["calibration"][k] for k in ("timing_repeats", "timing_warmup"))
    assert measured["batches"] == [1, 2, 4, 6]
    assert measured["largest_batch"] == 6
    assert (measured["timing_repeats"], measured["timing_warmup"]) == (repeats, warmup)
    assert measured["method"] == "cpu-perf-counter" and measured["stopped_by_oom"] is None
    assert len(measured["fwd_bwd_repeats_s"]) == 4
    for times, median in zip(measured["fwd_bwd_repeats_s"], measured["fwd_bwd_s"], strict=True):
        assert len(times) == repeats and all(t > 0 for t in times)
        assert median == sorted(times)[repeats // 2]
    assert len(measured["update_repeats_s"]) == repeats
    assert measured["update_s"] == sorted(measured["update_repeats_s"])[repeats // 2] > 0
    assert record["step_time"]["model"] == "measured"
    curve = StepTimeCurve.from_dict(record["step_time_curve"])
    assert curve == StepTimeCurve.from_dict(measured).scaled(2.5)
    assert record["model_parameters"] > 0


class FakeClock:
    """A clock that moves only when a fake step says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_time_repeats_drops_the_warmup_and_syncs_around_the_clock():
    clock = FakeClock()
    durations = iter([100.0, 100.0, 3.0, 1.0, 2.0, 5.0, 4.0])
    events = []

    def run():
        events.append("run")
        clock.now += next(durations)

    def setup():
        events.append("setup")
        clock.now += 50.0  # outside the timed interval

    def sync():
        events.append("sync")

    times = time_repeats(run, 5, 2, clock=clock, sync=sync, setup=setup)
    assert times == [3.0, 1.0, 2.0, 5.0, 4.0]
    assert events[:4] == ["setup", "run", "setup", "run"]
    assert events[4:] == ["setup", "sync", "run", "sync"] * 5


def test_measure_step_times_takes_the_median_of_the_timed_repeats():
    clock = FakeClock()
    jitter = [3.0, -1.0, 0.0, 2.0, -2.0]
    calls: list = []

    def run_pass(batch):
        done = sum(1 for c in calls if c == ("pass", batch))
        calls.append(("pass", batch))
        # Two warm-up passes of 1000 s, then 10 s per sequence with jitter.
        clock.now += 1000.0 if done < 2 else 10.0 * batch + jitter[done - 2]

    def run_update():
        done = calls.count("update")
        calls.append("update")
        clock.now += [500.0, 500.0, 7.0, 5.0, 6.0, 9.0, 8.0][done]

    def before_pass():
        calls.append("clear")

    timed = measure_step_times(
        run_pass, run_update, [1, 2, 4, 8, 10], 5, 2, clock=clock, before_pass=before_pass
    )
    assert timed["batches"] == [1, 2, 4, 8, 10]
    assert timed["fwd_bwd_s"] == [10.0, 20.0, 40.0, 80.0, 100.0]
    assert timed["fwd_bwd_repeats_s"][0] == [13.0, 9.0, 10.0, 12.0, 8.0]
    assert timed["update_s"] == 7.0
    assert timed["update_repeats_s"] == [7.0, 5.0, 6.0, 9.0, 8.0]
    assert timed["stopped_by_oom"] is None
    for b in (1, 2, 4, 8, 10):
        assert calls.count(("pass", b)) == 7  # 2 warm-up + 5 timed
    assert calls.count("update") == 7
    assert calls.count("clear") == 5 * 7 + 1  # before every pass, and before the updates
    # The curve the clock reads.
    curve = StepTimeCurve.from_dict(timed)
    assert curve.pass_s(6) == 60.0 and curve.update_s == 7.0


def test_measure_step_times_stops_at_the_first_pass_out_of_memory():
    class FakeOOM(RuntimeError):
        pass

    clock = FakeClock()

    def run_pass(batch):
        if batch >= 8:
            raise FakeOOM
        clock.now += batch

    def run_update():
        clock.now += 0.5

    timed = measure_step_times(
        run_pass, run_update, [1, 2, 4, 8, 16], 5, 1, clock=clock, oom_errors=(FakeOOM,)
    )
    assert timed["batches"] == [1, 2, 4] and timed["fwd_bwd_s"] == [1.0, 2.0, 4.0]
    assert timed["stopped_by_oom"] == 8 and timed["update_s"] == 0.5

    def never_fits(batch):
        raise FakeOOM

    with pytest.raises(ValueError, match="1 sequences runs out of memory"):
        measure_step_times(never_fits, run_update, [1, 2], 5, 1, clock=clock, oom_errors=(FakeOOM,))
    with pytest.raises(ValueError, match="timing_repeats"):
        measure_step_times(run_pass, run_update, [1], 4, 1, clock=clock)


def test_timing_batches_are_powers_of_two_then_the_largest():
    assert timing_batches(1) == [1]
    assert timing_batches(8) == [1, 2, 4, 8]
    assert timing_batches(10) == [1, 2, 4, 8, 10]
    assert timing_batches(2 * 57) == [1, 2, 4, 8, 16, 32, 64, 114]
    with pytest.raises(ValueError):
        timing_batches(0)


def test_roofline_from_speed_tflops_by_hand():
    device = {
        "name": "sim",
        "speed_tflops": 0.05,
        "step_time": {"model": "roofline", "saturation_batch": 8, "update_s": 0.25},
    }
    measured = StepTimeCurve((1, 2), (0.01, 0.02), 0.001)
    record, curve = declared_step_time(
        device_config({"memory_gib": 1, **device}), 920_192, 128, measured
    )
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
        device_config({"name": "sim", "speed_tflops": 0.05, "memory_gib": 1}),
        920_192,
        128,
        measured,
    )
    assert (record["model"], record["saturation_batch"], record["update_s"]) == ("roofline", 8, 0.0)
    # measured: this machine's curve times scale.
    scaled = {"name": "sim", "step_time": {"model": "measured", "scale": 3.0}}
    record, curve = declared_step_time(
        device_config({"memory_gib": 1, **scaled}), 920_192, 128, measured
    )
    assert record["model"] == "measured" and "seconds_per_sequence" not in record
    assert curve == StepTimeCurve((1, 2), (0.03, 0.06), 0.003)


BAD_STEP_TIME = [
    ("step_time", {"model": "linear"}, "cluster.devices.0.step_time.model"),
    ("step_time", {"saturation_batch": 0}, "cluster.devices.0.step_time.saturation_batch"),
    ("step_time", {"saturation_batch": 2.5}, "cluster.devices.0.step_time.saturation_batch"),
    ("step_time", {"update_s": -1.0}, "cluster.devices.0.step_time.update_s"),
    ("step_time", {"scale": 0}, "cluster.devices.0.step_time.scale"),
    ("step_time", {"speed": 1.0}, "cluster.devices.0.step_time.speed"),
    ("step_time", "roofline", "cluster.devices.0.step_time"),
]


@pytest.mark.parametrize(("key", "value", "named"), BAD_STEP_TIME)
def test_schema_rejects_bad_step_time_naming_the_key(key, value, named):
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    raw["cluster"]["devices"][0][key] = value
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        validate(raw)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("cluster", "slot_sharing", "sequential"),
        ("calibration", "timing_repeats", 4),
        ("calibration", "timing_warmup", 0),
    ],
)
def test_schema_rejects_bad_sharing_and_timing_settings(section, key, value):
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    raw[section][key] = value
    with pytest.raises(ConfigError, match=f"{section}\\.{key}"):
        validate(raw)


def test_schema_defaults_of_step_time_and_sharing():
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    del raw["cluster"]["slot_sharing"], raw["cluster"]["devices"][0]["step_time"]
    del raw["calibration"]["timing_repeats"], raw["calibration"]["timing_warmup"]
    cfg = validate(raw)
    assert cfg["cluster"]["slot_sharing"] == "concurrent"
    assert cfg["cluster"]["devices"][0]["step_time"] == {
        "model": "roofline",
        "saturation_batch": 8,
        "update_s": 0.0,
        "scale": 1.0,
    }
    assert (cfg["calibration"]["timing_repeats"], cfg["calibration"]["timing_warmup"]) == (5, 2)
    shipped = {
        n: load_config_dict(REPO / "config" / f"{n}.yaml") for n in ("config", "test", "paper")
    }
    models = {n: c["cluster"]["devices"][0]["step_time"]["model"] for n, c in shipped.items()}
    assert models == {"config": "roofline", "test": "roofline", "paper": "measured"}


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
    assert load_max_batch(out.parent, device_config({"name": "cpu-tiny", "memory_gib": 1})) == 7
    # Timed up to 2 slots x 7 sequences; the clock's curve is the declared roofline.
    assert record["step_time_measured"]["batches"] == [1, 2, 4, 8, 14]
    config = load_config_dict(config_path)
    curve = load_step_time_curve(out.parent, device_config(config["cluster"]["devices"][0]))
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
