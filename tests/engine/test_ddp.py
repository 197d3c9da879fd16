"""Synchronous data parallel against a plain PyTorch data-parallel loop."""

from __future__ import annotations

import json

import torch
from array_data import new_engine

from adloco.algo import schedule
from adloco.engine import ddp
from adloco.formats.clock import TrainerSync, allreduce_bytes
from adloco.model.llama import batch_loss, build_model

CLUSTER = {
    # Two devices of two slots: every step is four slots' passes on two devices.
    "nodes_per_device": 2,
    "devices": [{"name": "sim", "count": 2, "memory_gib": 1.0, "max_batch": 4}],
}


def _engine(cfg, run, data, tmp_path):
    return new_engine(cfg, run, data, tmp_path / "ckpt")


def _ddp(make_config, **overrides):
    return make_config(
        {
            "method": "ddp",
            "initial_batch": 3,
            "inner_steps": 4,
            "max_rounds": 3,
            "max_tokens": 10_000_000,
            "lr_scaling": "none",
            **overrides,
        },
        cluster=CLUSTER,
    )


def test_ddp_equals_a_plain_data_parallel_loop_on_the_same_batches(
    array_data, make_config, tmp_path
):
    cfg, run = _ddp(make_config)
    engine = _engine(cfg, run, array_data, tmp_path)
    drawn: list[torch.Tensor] = []
    original = engine.loop.train_split.get
    engine.loop.train_split.get = lambda idx: drawn.append(original(idx)) or drawn[-1]
    engine.run()

    # The plain loop: each step the global batch is every slot's 3 sequences of that
    # step; the mean gradient over its tokens, clipped, one AdamW step.
    seq = array_data.seq_len_tokens
    slots = len(drawn) // run.max_rounds  # one fetch per slot and round
    per_round = [drawn[r * slots : (r + 1) * slots] for r in range(run.max_rounds)]
    model = build_model(cfg.model, array_data.vocab_size, seq, 0)
    opt = torch.optim.AdamW(
        model.parameters(), lr=run.inner_lr, betas=run.betas, weight_decay=run.weight_decay
    )
    seen = 0
    for fetched in per_round:
        for h in range(run.inner_steps):
            batch = torch.cat([f[3 * h : 3 * h + 3] for f in fetched])
            lr = schedule.inner_lr(
                seen, run.max_tokens, run.inner_lr, run.warmup_fraction, run.min_lr_ratio
            )
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            loss_sum, n = batch_loss(model, batch)
            (loss_sum / n).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), run.grad_clip_norm)
            opt.step()
            seen += batch.numel()
    assert slots == 4 and seen == engine.state.tokens_total
    for p, q in zip(engine.trainers[0].params, model.parameters(), strict=True):
        # Only the order of floating-point sums differs (passes per device, then slots).
        torch.testing.assert_close(p, q.detach(), rtol=2e-5, atol=2e-6)


def test_every_step_is_one_communication_of_the_gradient(array_data, make_config, tmp_path):
    cfg, run = _ddp(make_config)
    engine = _engine(cfg, run, array_data, tmp_path)
    engine.run()
    rows = [json.loads(line) for line in engine.metrics_path.read_text().splitlines()]
    assert [r["communications"] for r in rows] == [4, 8, 12]
    sync = TrainerSync.from_dict(rows[0]["sync"])
    assert (sync.nodes, sync.allreduce_count, sync.per_step) == (4, 4, True)
    gradient_bytes = 4 * engine.loop.num_params
    assert sync.allreduce_payload_bytes == (gradient_bytes,)
    assert rows[0]["bytes"] == 4 * allreduce_bytes(gradient_bytes, 4)
    assert all(r["inner_steps"] == 4 and r["requested_batch"] == 12 for r in rows)


def test_step_passes_join_the_slots_of_a_device():
    seqs = {s: torch.full((4, 2), s) for s in range(3)}
    slots = [
        ddp.SlotSteps(0, 0, [(2,), (1, 1)], seqs[0]),
        ddp.SlotSteps(1, 0, [(2,), (2,)], seqs[1]),
        ddp.SlotSteps(2, 1, [(1,), (3,)], seqs[2]),
        ddp.SlotSteps(3, 1, [(1,), (1,)], None),  # another process's slot
    ]
    first = ddp.step_passes(slots, 0)
    assert [p[:, 0].tolist() for p in first] == [[0, 0, 1, 1], [2]]
    second = ddp.step_passes(slots, 1)
    # Device 0: slot 0's first micro-batch with slot 1's only one, then slot 0's second.
    assert [p[:, 0].tolist() for p in second] == [[0, 1, 1], [0], [2, 2, 2]]


def test_a_non_finite_step_is_found_before_theta_moves(array_data, make_config, tmp_path):
    cfg, run = _ddp(make_config, max_rounds=1)
    engine = _engine(cfg, run, array_data, tmp_path)
    engine.start()
    trainer = engine.trainers[0]
    before = [p.clone() for p in trainer.params]

    def poisoned(seqs, scale_tokens):
        return torch.tensor(float("nan"))

    engine.loop.worker._backward = poisoned
    engine.loop.allocate()
    plans, lrs = engine.loop.plan()
    out = ddp.train_round(
        engine.loop.worker,
        engine.comm,
        trainer.params,
        trainer.outer_opt,
        ddp.slot_steps(
            plans[trainer.id],
            {p.slot.index: trainer.sampler.take(p.sequences) for p in plans[trainer.id]},
            engine.loop.train_split.get,
            engine.comm.owns,
        ),
        lrs,
        run.grad_clip_norm,
        torch.float32,
        array_data.seq_len_tokens,
    )
    assert out.failure == "inner loss or gradient norm"
    for p, q in zip(trainer.params, before, strict=True):
        assert torch.equal(p, q)
