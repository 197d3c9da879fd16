"""The round (``RoundLoop.run_round``: allocate, plan, train, test, merge, record) against
hand computations on a tiny model."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from array_data import make_engine, tiny_curves

from adloco.algo import switch
from adloco.engine import inner as inner_mod
from adloco.engine.batch_step import decision as _decision
from adloco.engine.loop import RoundLoop
from adloco.engine.trainers import MergeTransfer, TrainingDiverged
from adloco.model.llama import batch_loss


def test_one_node_h1_sgd_equals_plain_sgd(array_data, make_config, tmp_path):
    # LocalSGD with one node, H = 1, outer lr 1 and no momentum is plain SGD.
    cfg, run = make_config(
        {
            "method": "localsgd",
            "inner_lr": 0.05,
            "grad_clip_norm": None,
            "weight_decay": 0.0,
            "inner_steps": 1,
            "max_rounds": 3,
        },
        cluster={
            "nodes_per_device": 1,
            "devices": [{"name": "sim", "count": 1, "memory_gib": 1.0, "max_batch": 4}],
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    seen: list[torch.Tensor] = []
    original = engine.loop.train_split.get
    engine.loop.train_split.get = lambda idx: seen.append(original(idx)) or seen[-1]
    engine.run()

    from adloco.model.llama import build_model

    reference = build_model(cfg.model, array_data.vocab_size, array_data.seq_len_tokens, 0)
    opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    for batch in seen:
        opt.zero_grad()
        loss_sum, n = batch_loss(reference, batch)
        (loss_sum / n).backward()
        opt.step()
    for p, q in zip(engine.trainers[0].params, reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert len(seen) == 3


def test_outer_average_is_token_weighted(array_data, make_config, tmp_path, monkeypatch):
    # Two slots with different max_batch process different token counts; with outer
    # lr 1 and no momentum the new θ is exactly their token-weighted mean.
    cfg, run = make_config(
        {
            "method": "diloco",
            "outer_lr": 1.0,
            "outer_momentum": 0.0,
            "nesterov": False,
            "initial_batch": 4,
            "switch": "never_accumulate",
            "max_rounds": 1,
        },
        cluster={
            "nodes_per_device": 1,
            "devices": [
                {"name": "big", "count": 1, "memory_gib": 1.0, "max_batch": 4},
                {"name": "small", "count": 1, "memory_gib": 1.0, "max_batch": 1},
            ],
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    finals, tokens = [], []
    original = inner_mod.Worker.run_node

    def spy(self, *args, **kwargs):
        res = original(self, *args, **kwargs)
        finals.append([p.detach().clone() for p in self.params])
        tokens.append(res.tokens)
        return res

    monkeypatch.setattr(inner_mod.Worker, "run_node", spy)
    engine.run()
    seq = array_data.seq_len_tokens
    assert tokens == [2 * 4 * seq, 2 * 1 * seq]
    total = sum(tokens)
    for i, p in enumerate(engine.trainers[0].params):
        expected = sum(t / total * f[i] for t, f in zip(tokens, finals, strict=True))
        torch.testing.assert_close(p, expected, rtol=1e-5, atol=1e-6)
    row = json.loads(engine.metrics_path.read_text().splitlines()[0])
    assert row["tokens"] == total and row["switch_mode"] == "capped"


def test_micro_batch_never_exceeds_max_batch(array_data, make_config, tmp_path, monkeypatch):
    cfg, run = make_config(
        {
            "method": "diloco",
            "initial_batch": 11,
            "switch": "switch",
            "switch_lambda": 2.0,
            "max_rounds": 1,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    sizes = []
    original = inner_mod.batch_loss
    monkeypatch.setattr(
        inner_mod, "batch_loss", lambda m, x: sizes.append(x.size(0)) or original(m, x)
    )
    rows = engine.run()
    assert max(sizes) <= 4
    # 11 > 2 * 4: accumulation over ceil(11 / 4) = 3 micro-batches, local batch 11 on each
    # of 4 slots: the global batch is 44 and so is the effective batch.
    assert rows[0]["accum_steps"] == 3 and rows[0]["local_batch"] == 11
    assert rows[0]["requested_batch"] == 44 and rows[0]["effective_batch"] == 44
    assert rows[0]["micro_batch"] == 4 and rows[0]["switch_mode"] == "accumulate"
    assert sum(sizes) == 4 * 2 * 11  # 4 slots x H=2 steps x 11 sequences


def test_inner_adamw_state_persists_across_rounds(array_data, make_config, tmp_path):
    cfg, run = make_config({"method": "diloco", "max_rounds": 3, "inner_steps": 2})
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.run()
    for node in engine.loop.nodes.values():
        assert float(node.inner_state[0]["step"]) == 3 * 2


# The kept trainer 2 ran on 1 slot at batch 2; trainer 1 on 1 slot at batch 1 (trainer 0,
# batch 3, had the other 2 slots). per_node keeps 2 a slot over both slots: 4 (and then
# gets 2 of the 4 slots, 2 a slot); max keeps 2; sum gives 3.
@pytest.mark.parametrize(("rule", "merged", "next_local"), [
    ("per_node", 4, [2, 2]), ("max", 2, [1, 1]), ("sum", 3, [2, 1]),
])  # fmt: skip
def test_merge_averages_by_batch_and_frees_slots(
    array_data, make_config, tmp_path, monkeypatch, rule, merged, next_local
):
    cfg, run = make_config(
        {
            "method": "adloco",
            "initial_trainers": 3,
            "batch_test": "none",
            "merge": "smallest_batch",
            "merge_frequency": 1,
            "merge_count": 2,
            "merge_batch": rule,
            "max_rounds": 1,
            "outer_momentum": 0.9,
            "nesterov": True,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.start()
    engine.trainers[0].global_batch = 3
    engine.trainers[1].global_batch = 1
    engine.trainers[2].global_batch = 2
    captured = {}
    original = RoundLoop.merge

    def spy(self, r, evaluate_now=False):
        captured["params"] = {t.id: [p.clone() for p in t.params] for t in self.state.trainers}
        captured["mom"] = {
            t.id: [t.outer_opt.state[p]["momentum_buffer"].clone() for p in t.params]
            for t in self.state.trainers
        }
        return original(self, r, evaluate_now)

    monkeypatch.setattr(RoundLoop, "merge", spy)
    rows = engine.loop.run_round()
    # Trainers 1 (batch 1) and 2 (batch 2) merge, 2 is kept with weights 1/3, 2/3.
    assert sorted(t.id for t in engine.trainers) == [0, 2]
    kept = engine.state.trainer_by_id(2)
    for i, p in enumerate(kept.params):
        expected = captured["params"][1][i] / 3 + captured["params"][2][i] * 2 / 3
        torch.testing.assert_close(p, expected)
        m = kept.outer_opt.state[p]["momentum_buffer"]
        torch.testing.assert_close(m, captured["mom"][1][i] / 3 + captured["mom"][2][i] * 2 / 3)
    merge_event = [e for r in rows for e in r["events"] if e["type"] == "merge"][0]
    assert merge_event["merged"] == [1, 2] and merge_event["kept"] == 2
    assert kept.global_batch == merged
    assert merge_event["slots"] == [1, 1] and merge_event["rule"] == rule
    # The merge's transfer: one trainer's parameters and momentum, on the kept trainer's row.
    kept_row = next(r for r in rows if r["trainer"] == 2)
    assert kept_row["sync"]["merge_messages"] == 1
    assert kept_row["sync"]["merge_payload_bytes"] == engine.loop.num_params * 4 * 2
    # Next round the 4 slots go to the 2 trainers in proportion to their batches (D'Hondt:
    # 2 and 2), and each trainer's global batch is split over its slots.
    engine.loop.allocate()
    counts = [sum(1 for t in engine.state.slot_owner.values() if t == k) for k in (0, 2)]
    assert counts == [2, 2]
    plans, _ = engine.loop.plan()
    assert [sum(p.plan.effective for p in plans[k]) for k in (0, 2)] == [3, merged]
    assert sorted((p.plan.requested for p in plans[2]), reverse=True) == next_local


def test_nan_loss_rolls_back_and_retries(array_data, make_config, tmp_path, monkeypatch):
    cfg, run = make_config({"method": "diloco", "max_rounds": 2})
    engine = make_engine(cfg, run, array_data, tmp_path)
    calls = {"n": 0}
    original = inner_mod.batch_loss

    def poisoned(model, x):
        calls["n"] += 1
        loss, n = original(model, x)
        # The 10th forward pass (round 2, after 4 slots x 2 steps of round 1) returns NaN.
        return (loss * float("nan"), n) if calls["n"] == 10 else (loss, n)

    monkeypatch.setattr(inner_mod, "batch_loss", poisoned)
    rows = engine.run()
    events = [e for r in rows for e in r["events"] if e["type"] == "nan_rollback"]
    assert len(events) == 1 and rows[-1]["round"] == 2
    assert all(torch.isfinite(p).all() for p in engine.trainers[0].params)
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in rows)


def test_persistent_nan_fails_clearly(array_data, make_config, tmp_path, monkeypatch):
    cfg, run = make_config({"method": "diloco", "max_rounds": 1})
    engine = make_engine(cfg, run, array_data, tmp_path)
    original = inner_mod.batch_loss
    monkeypatch.setattr(inner_mod, "batch_loss", lambda m, x: (original(m, x)[0] * float("nan"), 1))
    with pytest.raises(TrainingDiverged, match="non-finite inner loss"):
        engine.run()


def test_norm_test_grows_batch_and_logs_statistics(array_data, make_config, tmp_path):
    cfg, run = make_config(
        {
            "method": "adloco",
            "initial_trainers": 2,
            "batch_test": "norm",
            "eta": 0.1,
            "merge": "none",
            "max_rounds": 3,
            "initial_batch": 2,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    rows = engine.run()
    by_trainer = [
        sorted((r for r in rows if r["trainer"] == t), key=lambda r: r["round"]) for t in (0, 1)
    ]
    checked = 0
    for trainer_rows in by_trainer:
        for row, after in zip(trainer_rows, trainer_rows[1:], strict=False):
            stats, batch = row["stats"], row["requested_batch"]
            assert stats["groups"] == 2 * 2  # 2 slots x 2 sequences, one group each
            assert stats["dof"] == 2 and stats["smoothed"]["weight"] == 2
            # stats_decay 0: the running estimate is this round's.
            assert stats["smoothed"]["trace_cov"] == stats["trace_cov"]
            if stats["grad_sqnorm"] <= 0:
                # A non-positive gradient-norm estimate never raises the batch.
                assert stats["requested_global"] is None
                assert stats["decision"] == "kept: gradient norm estimate <= 0"
                assert after["requested_batch"] == batch
                continue
            # The norm test reads the batch gradient's expected norm at the current batch.
            g2 = stats["grad_sqnorm"] + stats["trace_cov"] / batch
            assert stats["requested_global"] == pytest.approx(stats["trace_cov"] / (0.01 * g2))
            want = max(batch, min(math.ceil(stats["requested_global"]), int(batch * 4.0)))
            assert after["requested_batch"] == want
            checked += 1
    assert checked >= 1


def test_slots_of_a_trainer_get_disjoint_data_and_small_subsets_wrap(
    array_data, make_config, tmp_path, monkeypatch
):
    seen = []
    original = inner_mod.Worker.run_node

    def spy(self, theta, node, step_indices, *args, **kwargs):
        seen.append(step_indices.clone())
        return original(self, theta, node, step_indices, *args, **kwargs)

    monkeypatch.setattr(inner_mod.Worker, "run_node", spy)
    cfg, run = make_config({"method": "diloco", "max_rounds": 1, "initial_batch": 3})
    make_engine(cfg, run, array_data, tmp_path / "a").run()
    drawn = torch.cat([s.reshape(-1) for s in seen])
    assert drawn.numel() == 4 * 2 * 3 and drawn.unique().numel() == drawn.numel()

    # A subset of 10 sequences and a round that needs 24: the sampler wraps into
    # new epochs instead of stalling, and the metrics count them.
    cfg, run = make_config(
        {"method": "diloco", "max_rounds": 2, "initial_batch": 3, "subset_fraction": 0.05}
    )
    rows = make_engine(cfg, run, array_data, tmp_path / "b").run()
    assert [r["epochs"] for r in rows] == [2, 4]


@pytest.mark.parametrize(
    "run",
    [
        {"method": "diloco", "initial_batch": 3},
        {"method": "localsgd", "initial_batch": 2, "inner_lr": 0.05},
        {
            "method": "adloco",
            "initial_trainers": 2,
            "batch_test": "norm",
            "eta": 0.3,
            "merge": "smallest_batch",
            "merge_frequency": 2,
        },
    ],
)
def test_every_run_ends_at_the_token_budget(array_data, make_config, tmp_path, run):
    # 1000 tokens = 83.3 sequences of 12: every method ends at 84 sequences, the last
    # round cut to what is left.
    cfg, run_cfg = make_config({**run, "max_rounds": 100, "max_tokens": 1000})
    rows = make_engine(cfg, run_cfg, array_data, tmp_path).run()
    assert rows[-1]["tokens_total"] == 84 * 12
    last = [r for r in rows if r["round"] == rows[-1]["round"]]
    assert all(r["val_perplexity"] is not None for r in last)
    spent = sum(
        count * sum(micro) for r in rows for w in r["slot_work"] for count, micro in w["steps"]
    )
    assert spent * 12 == rows[-1]["tokens_total"]


def test_logged_time_is_recomputed_exactly_from_the_rows(array_data, make_config, tmp_path):
    from adloco.formats.clock import Network, recompute_sim_time_s

    cfg, run = make_config(
        {
            "method": "adloco",
            "initial_trainers": 2,
            "batch_test": "norm",
            "eta": 0.2,
            "merge": "smallest_batch",
            "merge_frequency": 2,
            "max_rounds": 4,
        },
    )
    rows = make_engine(cfg, run, array_data, tmp_path).run()
    rows = [json.loads(json.dumps(r)) for r in rows]  # as read back from metrics.jsonl
    got = recompute_sim_time_s(
        rows,
        tiny_curves(cfg),
        Network.from_config(cfg.cluster.network),
        "concurrent",
    )
    assert {r["round"]: r["sim_time_s"] for r in rows} == got  # exact, not approximate
    # The rows alone answer other clocks: time slicing never beats concurrent streams here.
    sliced = recompute_sim_time_s(
        rows,
        tiny_curves(cfg),
        Network.from_config(cfg.cluster.network),
        "time_slicing",
    )
    assert all(sliced[r] >= got[r] for r in got) and sliced[4] > got[4]


@pytest.mark.heavy
def test_global_batch_changes_only_by_test_or_merge(array_data, make_config, tmp_path):
    cfg, run = make_config(
        {
            "method": "adloco",
            "initial_trainers": 3,
            "batch_test": "norm",
            "eta": 0.2,
            "merge": "smallest_batch",
            "merge_frequency": 2,
            "max_rounds": 6,
        },
    )
    rows = make_engine(cfg, run, array_data, tmp_path).run()
    by_trainer: dict[int, list[dict]] = {}
    for r in rows:
        by_trainer.setdefault(r["trainer"], []).append(r)
    changes = 0
    for seq in by_trainer.values():
        for before, after in zip(seq, seq[1:], strict=False):
            said = [e for e in before["events"] if e["type"] in ("batch_change", "merge")]
            if after["requested_batch"] != before["requested_batch"]:
                changes += 1
                assert said, (before, after)
                assert after["requested_batch"] == said[-1].get("to", said[-1].get("batch"))
            # The slots' local batches always add up to the trainer's global batch.
            assert after["effective_batch"] <= after["requested_batch"]
    assert changes > 0
    # Every slot has work in every round (3 trainers, 4 slots, batches >= slots).
    for rnd in {r["round"] for r in rows}:
        assert sum(r["nodes"] for r in rows if r["round"] == rnd) == 4


def test_lr_scaling_follows_the_local_batch(array_data, make_config, tmp_path):
    cfg, run = make_config(
        {
            "method": "diloco",
            "initial_batch": 2,
            "max_rounds": 1,
            "lr_scaling": "sqrt",
            "switch": "always_accumulate",
        }
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.start()
    engine.trainers[0].global_batch = 4 * 8  # local batch 8 on each of 4 slots
    row = engine.loop.run_round()[0]
    assert row["lr_scale"] == pytest.approx(2.0)  # sqrt(8 / 2), 8 accumulated over 2 passes
    # Capped by switch mode, the local batch that counts is the one that runs: max_batch 4.
    run_capped = dataclasses.replace(run, switch="never_accumulate")
    engine = make_engine(cfg, run_capped, array_data, tmp_path / "capped")
    engine.start()
    engine.trainers[0].global_batch = 4 * 8
    assert engine.loop.run_round()[0]["lr_scale"] == pytest.approx(2**0.5)
    # No warmup: the first step runs at the scaled peak, and the row sums the steps' lrs.
    assert row["inner_lr_sum"] > row["inner_lr"] > 0
    assert row["inner_lr_sum"] <= 2 * 0.01 * row["inner_steps"] + 1e-12


def test_non_finite_evaluation_rolls_back_then_fails_clearly(
    array_data, make_config, tmp_path, monkeypatch
):
    from adloco.engine import loop as loop_mod

    cfg, run = make_config({"method": "diloco", "max_rounds": 2})
    calls = {"n": 0}
    original = loop_mod.evaluate

    def flaky(model, seqs, batch):
        calls["n"] += 1
        out = original(model, seqs, batch)
        return {**out, "loss": float("nan")} if calls["n"] == 2 else out

    monkeypatch.setattr(loop_mod, "evaluate", flaky)
    rows = make_engine(cfg, run, array_data, tmp_path / "a").run()
    rollbacks = [e for r in rows for e in r["events"] if e["type"] == "nan_rollback"]
    assert [e["what"] for e in rollbacks] == ["validation loss"]
    assert all(r["val_loss"] == r["val_loss"] for r in rows)  # no NaN written

    monkeypatch.setattr(loop_mod, "evaluate", lambda m, s, b: {"loss": math.inf, "perplexity": 1})
    with pytest.raises(TrainingDiverged, match="non-finite validation loss in 4 attempts"):
        make_engine(cfg, run, array_data, tmp_path / "b").run()
    # Nothing of the diverged round was written.
    assert (tmp_path / "b" / "ckpt" / "metrics.jsonl").read_text() == ""


def test_non_finite_outer_step_rolls_back(array_data, make_config, tmp_path, monkeypatch):
    from adloco.engine import loop as loop_mod

    cfg, run = make_config({"method": "diloco", "max_rounds": 1})
    original = loop_mod.outer.apply_pseudo_gradient
    calls = {"n": 0}

    def overflow(opt, params, delta):
        calls["n"] += 1
        original(opt, params, delta)
        if calls["n"] == 1:
            with torch.no_grad():
                params[0].fill_(math.inf)

    monkeypatch.setattr(loop_mod.outer, "apply_pseudo_gradient", overflow)
    engine = make_engine(cfg, run, array_data, tmp_path)
    rows = engine.run()
    assert [e["what"] for e in rows[0]["events"] if e["type"] == "nan_rollback"] == [
        "parameters after the outer step"
    ]
    assert all(torch.isfinite(p).all() for p in engine.trainers[0].params)


def test_scalars_direction_is_the_pseudo_gradient_under_foreach_nesterov(
    array_data, make_config, tmp_path, monkeypatch
):
    # torch's foreach SGD with Nesterov (the CUDA default) overwrites the gradient it is
    # given; the augmented test's direction must still be the pseudo-gradient itself.
    from adloco.engine import loop as loop_mod

    monkeypatch.setattr(
        loop_mod.outer,
        "make_outer_optimizer",
        lambda params, lr, momentum, nesterov: torch.optim.SGD(
            list(params), lr=lr, momentum=momentum, nesterov=nesterov, foreach=True
        ),
    )
    seen = []
    original = loop_mod.outer.apply_pseudo_gradient

    def spy(opt, params, delta):
        seen.append([d.clone() for d in delta])
        return original(opt, params, delta)

    monkeypatch.setattr(loop_mod.outer, "apply_pseudo_gradient", spy)
    cfg, run = make_config(
        {
            "method": "diloco",
            "max_rounds": 2,
            "outer_momentum": 0.9,
            "nesterov": True,
            "outer_lr": 0.7,
        },
    )
    run = dataclasses.replace(run, batch_test="augmented_inner_product", stats_reduce="scalars")
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.start()
    engine.loop.run_round()
    engine.loop.run_round()  # the second outer step has momentum: foreach would have overwritten Δ
    for d, s in zip(engine.trainers[0].direction, seen[-1], strict=True):
        assert torch.equal(d, s)


def test_the_merged_model_is_evaluated_right_after_the_merge(array_data, make_config, tmp_path):
    from adloco.model.llama import evaluate

    cfg, run = make_config(
        {
            "method": "adloco",
            "initial_trainers": 2,
            "batch_test": "none",
            "merge": "smallest_batch",
            "merge_frequency": 1,
            "max_rounds": 1,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    rows = engine.run()
    event = next(e for r in rows for e in r["events"] if e["type"] == "merge")
    engine.loop.worker.load(engine.trainers[0].params)
    want = evaluate(engine.loop.worker.model, engine.loop.eval_seqs, run.eval_batch)
    assert event["val_perplexity_merged"] == want["perplexity"]
    assert event["val_loss_merged"] == want["loss"]


def test_plan_splits_batches_into_micro_batches_and_cuts_the_last_round(
    array_data, make_config, tmp_path
):
    # 4 slots of max batch 4. Trainer 0 asks 12, trainer 1 asks 9: D'Hondt gives 2 slots
    # each (12 : 9, then 6 : 9), slots 0-1 to trainer 0 and 2-3 to trainer 1; local batches
    # 6, 6 and 5, 4. Switch mode λ = 1.2 (threshold 4.8): 6 -> 3 + 3, 5 -> 3 + 2, 4 plain.
    cfg, run = make_config(
        {
            "initial_trainers": 2,
            "batch_test": "none",
            "merge": "none",
            "switch": "switch",
            "switch_lambda": 1.2,
            "max_tokens": 360,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.start()
    engine.trainers[0].global_batch = 12
    engine.trainers[1].global_batch = 9
    engine.loop.allocate()
    assert engine.state.slot_owner == {0: 0, 1: 0, 2: 1, 3: 1}
    plans, base_lrs = engine.loop.plan()
    assert [p.slot.index for p in plans[0]] == [0, 1]
    assert [p.slot.index for p in plans[1]] == [2, 3]
    by_slot = {p.slot.index: p for ps in plans.values() for p in ps}
    assert by_slot[0].plan == switch.StepPlan(6, (3, 3), 6, 2, "accumulate")
    assert by_slot[1].plan == switch.StepPlan(6, (3, 3), 6, 2, "accumulate")
    assert by_slot[2].plan == switch.StepPlan(5, (3, 2), 5, 2, "accumulate")
    assert by_slot[3].plan == switch.StepPlan(4, (4,), 4, 1, "plain")
    # 360 tokens = 30 sequences left; a step of the cluster is 21, so H = 2 steps would be
    # 42: the round has 2 steps, the second of 30 - 21 = 9 sequences split 6 : 6 : 5 : 4 by
    # largest remainder (quotas 2.57, 2.57, 2.14, 1.71 -> 2, 2, 2, 1, then slots 3 and 0).
    assert by_slot[0].steps == [(3, 3), (3,)]
    assert by_slot[1].steps == [(3, 3), (2,)]
    assert by_slot[2].steps == [(3, 2), (2,)]
    assert by_slot[3].steps == [(4,), (2,)]
    assert all(p.stats_blocks == [] for p in by_slot.values())
    # The schedule's lr before each step: after 0 and after 21 sequences of 12 tokens.
    peak, floor = 0.01, 0.01 * run.min_lr_ratio
    cosine = floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * 252 / 360))
    assert base_lrs == [pytest.approx(peak), pytest.approx(cosine)]


def test_plan_marks_the_batch_test_steps(array_data, make_config, tmp_path):
    # With a batch test the first step of each slot runs as stats_microbatches = 2 groups
    # (2 + 1 of its 3 sequences), the later steps as switch mode says (3 fits max batch 4).
    cfg, run = make_config(
        {
            "initial_trainers": 1,
            "batch_test": "norm",
            "merge": "none",
            "initial_batch": 3,
            "stats_microbatches": 2,
        }
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.start()
    engine.loop.allocate()
    plans, _ = engine.loop.plan()
    assert len(plans[0]) == 4
    for p in plans[0]:
        assert p.stats_blocks == [(0,)]
        assert p.steps == [(2, 1), (3,)]


def test_allocate_moves_the_fewest_slots_and_resets_their_moments(
    array_data, make_config, tmp_path
):
    cfg, run = make_config({"initial_trainers": 2, "batch_test": "none", "merge": "none"})
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.start()
    assert [t.global_batch for t in engine.trainers] == [4, 4]
    engine.loop.allocate()
    assert engine.state.slot_owner == {0: 0, 1: 0, 2: 1, 3: 1}
    assert engine.trainers[0].events == []  # a first allocation moves nothing
    for node in engine.loop.nodes.values():
        node.inner_state = [{"step": torch.tensor(float(node.slot))}]
    # Batches 12 and 2: 3 slots to 1. Slots 0, 1 stay with trainer 0 and slot 2 with
    # trainer 1; slot 3 moves to trainer 0 and its AdamW moments start afresh.
    engine.trainers[0].global_batch = 12
    engine.trainers[1].global_batch = 2
    engine.loop.allocate()
    assert engine.state.slot_owner == {0: 0, 1: 0, 2: 1, 3: 0}
    assert engine.loop.nodes[3].inner_state is None
    assert [float(engine.loop.nodes[s].inner_state[0]["step"]) for s in (0, 1, 2)] == [
        0.0,
        1.0,
        2.0,
    ]
    assert engine.trainers[0].events == [{"type": "realloc", "slots_moved": 1}]
    engine.loop.allocate()  # nothing changed: no event
    assert engine.trainers[0].events == [{"type": "realloc", "slots_moved": 1}]


@pytest.mark.parametrize(("momentum", "payload_copies"), [(0.0, 1), (0.9, 2)])
def test_merge_of_three_under_the_sum_rule(
    array_data, make_config, tmp_path, momentum, payload_copies
):
    # Batches 2, 6, 4, all merged: trainer 1 (the largest batch) is kept with the weights
    # 2/12, 6/12, 4/12, and the sum rule gives it batch 12. Two trainers send it their state.
    cfg, run = make_config(
        {
            "initial_trainers": 3,
            "batch_test": "none",
            "merge": "smallest_batch",
            "merge_count": 3,
            "merge_frequency": 2,
            "merge_batch": "sum",
            "outer_momentum": momentum,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    engine.start()
    for t, (batch, value) in zip(engine.trainers, [(2, 1.0), (6, 2.0), (4, 4.0)], strict=True):
        t.global_batch = batch
        for p in t.params:
            p.fill_(value)
    assert engine.loop.merge(1) is None  # not a merge round
    transfer = engine.loop.merge(2)
    assert transfer == MergeTransfer(1, engine.loop.num_params * 4 * payload_copies, 2)
    assert [t.id for t in engine.trainers] == [1]
    kept = engine.trainers[0]
    assert kept.global_batch == 12
    want = 2 / 12 * 1.0 + 6 / 12 * 2.0 + 4 / 12 * 4.0
    for p in kept.params:
        torch.testing.assert_close(p, torch.full_like(p, want))
    event = kept.events[-1]
    assert event["merged"] == [0, 2, 1] and event["kept"] == 1
    assert event["batches"] == [2, 6, 4] and event["batch"] == 12 and event["rule"] == "sum"
    assert event["weights"] == [2 / 12, 6 / 12, 4 / 12]
    assert "val_loss_merged" not in event  # not an evaluation round
    assert engine.loop.merge(4) is None  # one trainer left


def test_the_batch_decision_in_words():
    assert _decision("too few degrees of freedom", 4, 4, None) == (
        "kept: too few degrees of freedom"
    )
    assert _decision("", 4, 4, None) == "kept: the test could not say"
    assert _decision("", 4, 9, 8.2) == "raised"
    assert _decision("", 4, 6, 8.2) == "raised to the growth cap"
    assert _decision("", 4, 4, 3.0) == "kept: the test asks for no more"


def test_the_inner_product_test_in_the_engine(array_data, make_config, tmp_path):
    # The test is picked from the registry: settings built directly with batch_test
    # inner_product. It needs the reference direction, so round 1 cannot say; from
    # round 2 it asks for σ_d² / (ϑ² ‖ḡ‖²) of the running estimate at the current
    # batch, while the augmented test, its orthogonal part large (ν = 0.05), grows.
    cfg, run = make_config({"method": "adloco", "max_rounds": 3, "vartheta": 0.5, "nu": 0.05})
    rows = {}
    for test in ("inner_product", "augmented_inner_product"):
        settings = dataclasses.replace(run, batch_test=test, max_batch_growth=4.0)
        engine = make_engine(cfg, settings, array_data, tmp_path / test)
        rows[test] = engine.run()
        assert engine.trainers[0].direction is not None
    inner, augmented = rows["inner_product"], rows["augmented_inner_product"]
    assert inner[0] | {"wall_time_s": 0} == augmented[0] | {"wall_time_s": 0}
    assert inner[0]["stats"]["decision"] == "kept: the test could not say"
    s, batch = inner[1]["stats"]["smoothed"], inner[1]["requested_batch"]
    want = s["ip_var"] / (0.5**2 * (s["grad_sqnorm"] + s["trace_cov"] / batch))
    assert inner[1]["stats"]["requested_global"] == pytest.approx(want, rel=1e-12)
    assert want < batch  # so the batch stays at 8
    assert [r["requested_batch"] for r in inner] == [8, 8, 8]
    assert [r["requested_batch"] for r in augmented] == [8, 8, 32]
