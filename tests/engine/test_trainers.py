"""Node slots, trainers, a trainer's round and its row, merging a group, sync payloads."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from array_data import make_engine

from adloco.algo import merge, outer, switch, trust
from adloco.config import section
from adloco.engine.sampler import SubsetSampler
from adloco.engine.trainers import (
    Slot,
    SlotPlan,
    Trainer,
    TrainerRound,
    absorb,
    build_slots,
    copy_inner_state,
    copy_outer_state,
    initial_local_batch,
    sync_payload_bytes,
)
from adloco.formats import clock


@pytest.mark.parametrize("mode", ["scalars", "vector"])
def test_statistics_bytes_per_communication(array_data, make_config, tmp_path, mode):
    # A trainer of M slots: each all-reduce moves 2 (M - 1) payloads.
    cfg, run = make_config(
        {
            "method": "adloco",
            "initial_trainers": 2,
            "batch_test": "augmented_inner_product",
            "stats_reduce": mode,
            "max_rounds": 3,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    rows = engine.run()
    d = engine.loop.num_params
    stats_payload = 7 * 8 if mode == "scalars" else d * 4 + 8 * 8
    for row in rows:
        assert row["sync"]["allreduce_payload_bytes"] == [d * 4, stats_payload]
        assert row["bytes"] == 2 * (row["nodes"] - 1) * (d * 4 + stats_payload)
    # The augmented test has its direction from the second round on, in both modes.
    assert rows[0]["stats"]["ip_var"] is None
    assert all(r["stats"]["ip_var"] is not None for r in rows if r["round"] > 1)
    # DiLoCo moves the pseudo-gradient alone.
    cfg, run = make_config({"method": "diloco", "max_rounds": 1})
    row = make_engine(cfg, run, array_data, tmp_path / "diloco").run()[0]
    assert row["sync"]["allreduce_payload_bytes"] == [d * 4] and row["bytes"] == 6 * d * 4


def test_build_slots_are_nodes_per_device_in_device_order():
    # Entry "a" of 2 devices and entry "b" of 1, 2 nodes each: slots 0-3 on devices 0
    # and 1 (a), 4-5 on device 2 (b); each slot's max batch is its device's calibrated one.
    cluster = section(
        "cluster",
        {
            "nodes_per_device": 2,
            "devices": [
                {"name": "a", "count": 2, "memory_gib": 1.0, "max_batch": 4},
                {"name": "b", "count": 1, "memory_gib": 1.0, "max_batch": 1},
            ],
        },
    )
    slots = build_slots(cluster, {"a": 5, "b": 3})
    assert slots == [
        Slot(0, "a", 0, 5),
        Slot(1, "a", 0, 5),
        Slot(2, "a", 1, 5),
        Slot(3, "a", 1, 5),
        Slot(4, "b", 2, 3),
        Slot(5, "b", 2, 3),
    ]
    one_node = dataclasses.replace(cluster, nodes_per_device=1)
    assert [
        (s.index, s.device, s.device_index) for s in build_slots(one_node, {"a": 5, "b": 3})
    ] == [
        (0, "a", 0),
        (1, "a", 1),
        (2, "b", 2),
    ]


def test_initial_local_batch_is_the_setting_or_the_smallest_max_batch(make_config):
    _, run = make_config({"initial_batch": 3})
    assert initial_local_batch(run, [5, 2, 7]) == 3
    _, run = make_config({"initial_batch": "max_batch"})
    assert initial_local_batch(run, [5, 2, 7]) == 2
    assert initial_local_batch(run, {"a": 6, "b": 9}.values()) == 6


def test_sync_payload_bytes_by_hand(make_config):
    # 100 parameters: the pseudo-gradient at 4 (float32) or 2 (bfloat16) bytes each; the
    # statistics as 7 float64 scalars, or a float32 100-vector and 8 float64 scalars.
    _, run = make_config({"method": "diloco"})
    assert sync_payload_bytes(run, 100) == (400,)
    _, run = make_config({"batch_test": "norm", "stats_reduce": "scalars"})
    assert sync_payload_bytes(run, 100) == (400, 56)
    _, run = make_config(
        {"batch_test": "norm", "stats_reduce": "vector", "pseudo_grad_dtype": "bfloat16"}
    )
    assert sync_payload_bytes(run, 100) == (200, 400 + 64)


def trainer(tid, values, batch, subset, smoothed=None, momentum=None, tokens=0):
    params = [torch.tensor(v, dtype=torch.float32) for v in values]
    opt = outer.make_outer_optimizer(params, 0.7, 0.9, True)
    if momentum is not None:
        outer.set_momentum_buffers(opt, params, [torch.tensor(m) for m in momentum])
    sampler = SubsetSampler(torch.tensor(subset), seed=tid)
    return Trainer(tid, params, opt, batch, sampler, tokens, [torch.ones(2)], smoothed)


def test_absorb_averages_a_group_of_two_by_batch():
    # Batches 1 and 3: weights 1/4 and 3/4. Trainer 1 has no momentum yet (zeros).
    a = trainer(
        0,
        [[1.0, 2.0], [[4.0]]],
        1,
        [0, 5, 9],
        trust.Smoothed(2.0, 1.0, None, None, 4.0, 2),
        momentum=[[8.0, -4.0], [[16.0]]],
        tokens=120,
    )
    b = trainer(1, [[5.0, 6.0], [[0.0]]], 3, [5, 7], trust.Smoothed(6.0, 3.0, 1.0, 1.0, 2.0, 1))
    b.tokens = 360
    epoch = b.sampler.epoch
    weights = merge.merge_weights([a.global_batch, b.global_batch])
    assert weights == [0.25, 0.75]
    absorb(b, [a, b], weights, momentum=True)
    # θ: 1/4 (1, 2) + 3/4 (5, 6) = (4, 5); 1/4 * 4 + 3/4 * 0 = 1.
    assert torch.equal(b.params[0], torch.tensor([4.0, 5.0]))
    assert torch.equal(b.params[1], torch.tensor([[1.0]]))
    # Momentum: 1/4 (8, -4) + 3/4 * 0 = (2, -1); 1/4 * 16 = 4.
    got = outer.momentum_buffers(b.outer_opt, b.params)
    assert torch.equal(got[0], torch.tensor([2.0, -1.0]))
    assert torch.equal(got[1], torch.tensor([[4.0]]))
    # Data: the union of the subsets, from the start of a new epoch; tokens add up.
    assert b.sampler.subset.tolist() == [0, 5, 7, 9]
    assert (b.sampler.epoch, b.sampler.position) == (epoch + 1, 0)
    assert b.tokens == 480
    assert b.direction is None
    # Statistics pooled by merge weight times dof: 1/4 * 4 = 1 against 3/4 * 2 = 1.5.
    s = b.smoothed
    assert s.trace_cov == pytest.approx((1 * 2.0 + 1.5 * 6.0) / 2.5)
    assert s.grad_sqnorm == pytest.approx((1 * 1.0 + 1.5 * 3.0) / 2.5)
    assert s.ip_var is None and s.orth_var is None
    assert (s.weight, s.rounds) == (6.0, 2)
    # The absorbed trainer is untouched.
    assert torch.equal(a.params[0], torch.tensor([1.0, 2.0]))


def test_absorb_without_momentum_leaves_the_kept_optimizer_alone():
    a = trainer(0, [[2.0]], 2, [1], momentum=[[6.0]])
    b = trainer(1, [[4.0]], 2, [2])
    absorb(a, [a, b], [0.5, 0.5], momentum=False)
    assert torch.equal(a.params[0], torch.tensor([3.0]))
    assert torch.equal(outer.momentum_buffers(a.outer_opt, a.params)[0], torch.tensor([6.0]))
    assert a.smoothed is None  # no parent had an estimate


def test_row_fields_of_a_trainer_round_by_hand():
    # Two slots: a local batch of 6 accumulated as 3 + 3 and one of 4 run plain; the round
    # cut to the budget so its second step is shorter; lrs of three scheduled steps.
    slots = [Slot(0, "a", 0, 4), Slot(1, "b", 1, 4)]
    plans = [
        SlotPlan(slots[0], switch.plan_step(6, 4, "switch", 1.2), [(3, 3), (3,)]),
        SlotPlan(slots[1], switch.plan_step(4, 4, "switch", 1.2), [(4,), (2,)]),
    ]
    assert [p.sequences for p in plans] == [9, 6]
    t = trainer(7, [[0.0]], 10, [0, 1, 2])
    t.sampler.take(5)  # wraps once: epoch 1
    t.events.append({"type": "batch_change", "from": 8, "to": 10})
    res = TrainerRound(t, plans, 1.5, [0.3, 0.2, 0.1], tokens=15 * 12, train_loss=2.5)
    res.val = {"loss": 1.25, "perplexity": 3.5, "loss_stderr": 0.01}
    res.sync = clock.TrainerSync(2, (400,))
    row = res.row_fields()
    assert row == {
        "trainer": 7,
        "nodes": 2,
        "requested_batch": 10,
        "local_batch": 6,
        "effective_batch": 10,
        "micro_batch": 4,
        "accum_steps": 2,
        "switch_mode": "accumulate",
        "inner_steps": 2,
        "tokens": 180,
        "train_loss": 2.5,
        "val_loss": 1.25,
        "val_perplexity": 3.5,
        "val_loss_stderr": 0.01,
        "lr_scale": 1.5,
        "inner_lr": 0.2,
        "inner_lr_sum": 0.3 + 0.2,
        "stats": None,
        "epochs": 1,
        "events": [{"type": "batch_change", "from": 8, "to": 10}],
        "slot_work": [
            {"slot": 0, "device": "a", "device_index": 0, "steps": [[1, [3, 3]], [1, [3]]]},
            {"slot": 1, "device": "b", "device_index": 1, "steps": [[1, [4]], [1, [2]]]},
        ],
        "sync": res.sync.as_dict(),
    }
    # Capped outranks plain; no validation this round gives nulls.
    res.slots = [SlotPlan(slots[0], switch.plan_step(5, 4, "switch", 2.0), [(4,), (4,)])]
    res.val = None
    row = res.row_fields()
    assert (row["switch_mode"], row["requested_batch"], row["effective_batch"]) == ("capped", 5, 4)
    assert row["val_loss"] is None and row["val_perplexity"] is None


def test_copies_of_optimizer_state_share_no_storage():
    p = torch.zeros(3)
    inner = [{"step": torch.tensor(4.0), "exp_avg": torch.ones(3)}]
    copied = copy_inner_state(inner, "cpu")
    inner[0]["step"] += 1
    inner[0]["exp_avg"].add_(1)
    assert float(copied[0]["step"]) == 4.0 and torch.equal(copied[0]["exp_avg"], torch.ones(3))
    assert copy_inner_state(None, "cpu") is None
    opt = outer.make_outer_optimizer([p], 0.7, 0.9, True)
    outer.set_momentum_buffers(opt, [p], [torch.full((3,), 2.0)])
    state = opt.state_dict()
    copied = copy_outer_state(state, "cpu")
    state["state"][0]["momentum_buffer"].add_(1)
    assert torch.equal(copied["state"][0]["momentum_buffer"], torch.full((3,), 2.0))
    assert copied["param_groups"] == state["param_groups"]
