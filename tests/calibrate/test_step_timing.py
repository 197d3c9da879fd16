"""adloco.calibrate.step_timing: timing with a fake clock, the sizes, a real CPU timing."""

from __future__ import annotations

import dataclasses

import pytest
from calibrate_helpers import tiny

from adloco.calibrate.device import calibrate_device
from adloco.calibrate.step_timing import measure_step_times, time_repeats, timing_batches
from adloco.formats.clock import StepTimeCurve

pytestmark = pytest.mark.usefixtures("one_thread")


def test_real_cpu_timing_of_the_tiny_model():
    """Positive times at 1, 2, ..., k x max_batch; the clock's curve is measured x scale."""
    config = tiny(cluster={"nodes_per_device": 3})
    preset = config.cluster.devices[0]
    step_time = dataclasses.replace(preset.step_time, model="measured", scale=2.5)
    device = dataclasses.replace(preset, max_batch=2, step_time=step_time)
    record = calibrate_device(config, device, vocab_size=64, seq_len_tokens=16)
    measured = record["step_time_measured"]
    repeats, warmup = config.calibration.timing_repeats, config.calibration.timing_warmup
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
    # The test preset clips to train.grad_clip_norm (the schema's 1.0) before AdamW.
    assert measured["update"] == "AdamW step (foreach) after clip_grad_norm_ to 1.0"
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
