"""The simulated clock against hand-computed times."""

from __future__ import annotations

import json

import pytest

from adloco.formats.clock import (
    Network,
    RunClock,
    SlotWork,
    StepTimeCurve,
    TrainerSync,
    allreduce_bytes,
    allreduce_time_s,
    at_equal_tokens,
    device_time_s,
    recompute_sim_time_s,
    round_time_s,
    run_length,
)

# A curve with a bend: 1 s at batch 1, 1 s at batch 4 (flat), 3 s at batch 8.
CURVE = StepTimeCurve((1, 4, 8), (1.0, 1.0, 3.0), update_s=0.25)
NET = Network(bandwidth_bytes_s=1000.0, latency_s=0.5)


def work(slot, device_index, steps, device="d"):
    return SlotWork(slot, device, device_index, tuple((c, tuple(m)) for c, m in steps))


@pytest.mark.parametrize(
    ("batch", "seconds"),
    [(1, 1.0), (2, 1.0), (4, 1.0), (6, 2.0), (8, 3.0), (10, 4.0), (16, 7.0)],
)
def test_curve_interpolates_and_extrapolates_along_the_last_segment(batch, seconds):
    assert CURVE.pass_s(batch) == pytest.approx(seconds)


def test_one_point_curve_is_proportional_and_flat_below():
    curve = StepTimeCurve((2,), (0.5,))
    assert curve.pass_s(1) == 0.5 and curve.pass_s(2) == 0.5 and curve.pass_s(6) == 1.5


def test_roofline_and_linear_in_tokens():
    roof = StepTimeCurve.roofline(0.1, 8, update_s=0.2)
    assert [roof.pass_s(b) for b in (1, 5, 8, 12)] == pytest.approx([0.8, 0.8, 0.8, 1.2])
    assert roof.update_s == 0.2
    # 6 × 1e6 parameters × 100 tokens = 6e8 FLOPs per sequence at 1e12 FLOP/s.
    lin = StepTimeCurve.linear_in_tokens(1_000_000, 100, 1.0)
    assert [lin.pass_s(b) for b in (1, 3)] == pytest.approx([6e-4, 18e-4])
    assert lin.update_s == 0


# An H100's passes of sequences of 512 tokens (docs/gpu-check, the device file's curve, rounded).
H100 = StepTimeCurve(
    (1, 2, 4, 8, 16, 32, 64, 80), (0.0485, 0.0478, 0.0484, 0.0491, 0.0600, 0.1125, 0.2125, 0.2640),
    update_s=0.0117,
)  # fmt: skip


def test_a_pass_costs_the_measured_pass_of_equal_tokens():
    mapped = at_equal_tokens(H100, 512, 128)
    # 16 sequences of 128 tokens are 4 of 512; 4 of 128 are 1 of 512; 320 of 128 are 80 of 512.
    assert mapped.pass_s(16) == pytest.approx(0.0484)
    assert mapped.pass_s(4) == pytest.approx(0.0485)
    assert mapped.pass_s(320) == pytest.approx(0.2640)
    # 40 of 128 are 10 of 512: a quarter of the way from 8 (0.0491 s) to 16 (0.0600 s).
    assert mapped.pass_s(40) == pytest.approx(0.0491 + (0.0600 - 0.0491) * 2 / 8)
    # 1 of 128 is a quarter of a measured sequence: below the first point, flat.
    assert mapped.pass_s(1) == pytest.approx(0.0485) and mapped.pass_s(3) == pytest.approx(0.0485)
    # 400 of 128 are 100 of 512: the last segment (64 -> 80) continued 20 sequences further.
    assert mapped.pass_s(400) == pytest.approx(0.2640 + (0.2640 - 0.2125) / 16 * 20)
    assert mapped.update_s == 0.0117
    # Whole multiples: each measured point is a point of the mapped curve.
    assert mapped.batches == (1, 4, 8, 16, 32, 64, 128, 256, 320)


@pytest.mark.parametrize(("measured_len", "length"), [(512, 384), (512, 128), (100, 300), (7, 3)])
def test_the_mapped_curve_is_exact_at_every_whole_batch(measured_len, length):
    # Brute force: the measured curve read at b · L / L_m sequences, for every pass size.
    mapped = at_equal_tokens(H100, measured_len, length)
    for b in range(1, 500):
        assert mapped.pass_s(b) == pytest.approx(H100.at(b * length / measured_len), rel=1e-12)
    one = StepTimeCurve((3,), (0.3,))  # flat to 3 sequences, then 0.1 s each
    mapped = at_equal_tokens(one, measured_len, length)
    for b in range(1, 200):
        assert mapped.pass_s(b) == pytest.approx(one.at(b * length / measured_len), rel=1e-12)


def test_a_fractional_pass_by_hand():
    # 384-token sequences against 512: 5 of them are 3.75 measured sequences, between 2 and 4.
    mapped = at_equal_tokens(H100, 512, 384)
    assert mapped.pass_s(5) == pytest.approx(0.0478 + (0.0484 - 0.0478) * 1.75 / 2)
    with pytest.raises(ValueError, match="sequence lengths"):
        at_equal_tokens(H100, 0, 128)
    with pytest.raises(ValueError, match="> 0"):
        H100.at(0.0)


def test_curve_rejects_bad_points():
    with pytest.raises(ValueError, match="increasing"):
        StepTimeCurve((2, 2), (1.0, 1.0))
    with pytest.raises(ValueError, match="finite"):
        StepTimeCurve((1,), (float("nan"),))
    assert StepTimeCurve.from_dict(json.loads(json.dumps(CURVE.as_dict()))) == CURVE
    assert CURVE.scaled(2.0).pass_s(8) == 6.0 and CURVE.scaled(2.0).update_s == 0.5


def test_time_slicing_runs_every_pass_of_every_slot():
    a = work(0, 0, [(2, [4])])  # 2 steps of one pass of 4
    b = work(1, 0, [(1, [8, 8])])  # 1 step of two passes of 8
    # a: 2 × (1 + 0.25); b: 1 × (3 + 3 + 0.25)
    assert device_time_s([a, b], CURVE, "time_slicing") == pytest.approx(2.5 + 6.25)


def test_concurrent_slots_share_passes():
    a = work(0, 0, [(2, [4])])
    b = work(1, 0, [(1, [4, 4])])
    # step 0: passes of 4+4 = 8 (3 s) then 4 (1 s), two updates;
    # step 1: a alone, 4 (1 s), one update.
    expected = (3.0 + 1.0 + 2 * 0.25) + (1.0 + 0.25)
    assert device_time_s([a, b], CURVE, "concurrent") == pytest.approx(expected)
    # On an unsaturated device two slots of 2 cost what one slot of 2 costs.
    one = device_time_s([work(0, 0, [(3, [2])])], CURVE, "concurrent")
    two = device_time_s([work(0, 0, [(3, [2])]), work(1, 0, [(3, [2])])], CURVE, "concurrent")
    assert two - one == pytest.approx(3 * 0.25)
    with pytest.raises(ValueError, match="slot sharing"):
        device_time_s([a], CURVE, "both")


def test_ring_allreduce_bytes_and_time():
    # 4 nodes, 1000 bytes: 2·3·1000 bytes moved; 6 messages of 250 bytes.
    assert allreduce_bytes(1000, 4) == 6000 and allreduce_bytes(1000, 1) == 0
    assert allreduce_time_s(1000, 4, NET) == pytest.approx(6 * (0.5 + 0.25))
    assert allreduce_time_s(1000, 1, NET) == 0.0
    sync = TrainerSync(2, (1000, 16), merge_payload_bytes=400, merge_messages=2)
    assert sync.bytes_moved() == 2 * 1000 + 2 * 16 + 800
    assert sync.sync_time_s(NET) == pytest.approx(2 * (0.5 + 0.5) + 2 * (0.5 + 0.008))
    assert sync.merge_time_s(NET) == pytest.approx(2 * (0.5 + 0.4))


def test_round_waits_for_the_slowest_trainer_and_adds_merges():
    # Trainer 0: slots 0, 1 on device 0 (shared with trainer 1's slot 2);
    # trainer 1 also on device 1.
    t0 = [work(0, 0, [(1, [4])]), work(1, 0, [(1, [4])])]
    t1 = [work(2, 0, [(1, [4])]), work(3, 1, [(2, [8])])]
    sync0 = TrainerSync(2, (1000,))
    sync1 = TrainerSync(2, (1000,), merge_payload_bytes=1000, merge_messages=1)
    curves = {"d": CURVE}
    # time slicing: device 0 = 3 × 1.25 = 3.75; device 1 = 2 × 3.25 = 6.5.
    # trainer 0: 3.75 + 2 × (0.5 + 0.5) = 5.75; trainer 1: 6.5 + 2 = 8.5; merge 0.5 + 1.
    got = round_time_s([(t0, sync0), (t1, sync1)], curves, NET, "time_slicing")
    assert got == pytest.approx(8.5 + 1.5)
    with pytest.raises(ValueError, match="no step-time curve"):
        round_time_s([(t0, sync0)], {}, NET, "concurrent")


def _two_round_rows() -> list[dict]:
    rows = []
    for r in (1, 2):
        for trainer, (works, sync) in enumerate(
            [([work(0, 0, [(1, [4])])], TrainerSync(1, (8,))), ([work(1, 1, [(r, [8])])], None)]
        ):
            rows.append(
                {
                    "round": r,
                    "trainer": trainer,
                    "slot_work": [w.as_dict() for w in works],
                    "sync": (sync or TrainerSync(1, (8,))).as_dict(),
                }
            )
    return [json.loads(json.dumps(row)) for row in rows]


def test_recompute_from_json_rows():
    got = recompute_sim_time_s(_two_round_rows(), {"d": CURVE}, NET, "concurrent")
    # round 1: max(1.25, 3.25); round 2: max(1.25, 6.5).
    assert got == pytest.approx({1: 3.25, 2: 3.25 + 6.5})


def test_a_run_clock_computes_each_round_once_per_curves_and_policy(monkeypatch):
    import adloco.formats.clock as clock

    calls = []
    real = clock.trainer_compute_s
    monkeypatch.setattr(clock, "trainer_compute_s", lambda *a: calls.append(a[2]) or real(*a))
    run = RunClock(_two_round_rows())
    slow = Network(bandwidth_bytes_s=1.0, latency_s=2.0)
    # Trainer 0 syncs 8 bytes over 1 node: no all-reduce, so the network never
    # matters here; round 1 = 3.25, round 2 = 6.5 under any of them.
    for network in (NET, slow, NET):
        assert run.cumulative_s({"d": CURVE}, network, "concurrent") == {1: 3.25, 2: 9.75}
    assert calls == ["concurrent", "concurrent"]  # two rounds, once each
    # Another policy computes again, and only the rounds asked for.
    assert run.cumulative_s({"d": CURVE}, NET, "time_slicing", last_round=1) == {1: 3.25}
    assert calls == ["concurrent", "concurrent", "time_slicing"]
    # The same numbers as a fresh recomputation, to the bit, for another curve.
    other = {"d": CURVE.scaled(1.7)}
    assert run.cumulative_s(other, slow, "time_slicing") == recompute_sim_time_s(
        _two_round_rows(), other, slow, "time_slicing"
    )


def test_run_length_round_trip():
    steps = [(2, 1, 1), (4,), (4,), (4,), (3,)]
    encoded = run_length(steps)
    assert encoded == (((1, (2, 1, 1)), (3, (4,)), (1, (3,))))
    assert work(0, 0, encoded).expanded() == steps
    assert work(0, 0, encoded).sequences == 4 + 12 + 3


def test_a_trainer_that_synchronises_every_step_waits_for_the_slowest_device_each_step():
    # Two devices, one slot each; step 1: device 0 runs a pass of 8 (3 s), device 1
    # of 1 (1 s); step 2 the other way round. Updates 0.25 s per slot and step.
    slots = [work(0, 0, [(1, [8]), (1, [1])]), work(1, 1, [(1, [1]), (1, [8])])]
    payload = 1000  # bytes; 2 nodes: 2 messages of 500 bytes, 0.5 s latency + 0.5 s each
    once = allreduce_time_s(payload, 2, NET)
    assert once == pytest.approx(2.0)
    per_step = TrainerSync(2, (payload,), allreduce_count=2, per_step=True)
    # Every step waits for the slower device: (3 + 0.25) + (3 + 0.25), then 2 all-reduces.
    assert round_time_s([(slots, per_step)], {"d": CURVE}, NET, "concurrent") == pytest.approx(
        6.5 + 2 * once
    )
    # Synchronised once, each device runs its two steps on its own: 3.25 + 1.25 = 4.5.
    at_end = TrainerSync(2, (payload,))
    assert round_time_s([(slots, at_end)], {"d": CURVE}, NET, "concurrent") == pytest.approx(
        4.5 + once
    )
    assert per_step.bytes_moved() == 2 * at_end.bytes_moved() == 2 * allreduce_bytes(payload, 2)
    assert TrainerSync.from_dict(json.loads(json.dumps(per_step.as_dict()))) == per_step
    # Rows written before the field existed read as one all-reduce at the end of the round.
    assert "allreduce_count" not in at_end.as_dict()
    assert TrainerSync.from_dict(at_end.as_dict()) == at_end
