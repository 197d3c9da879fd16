"""The driver (``Driver``: start or resume, checkpoints, the run's end, export) on a tiny
model."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from array_data import FULL_STATE_RUN, TINY_CLUSTER, make_engine, new_engine, new_spec

from adloco.engine.collective import LocalCollective
from adloco.engine.driver import Driver, DriverSettings
from adloco.engine.sampler import draw_subset
from adloco.engine.state import RunState, WallClock, replica_digest
from adloco.formats.clock import StepTimeCurve
from adloco.model.llama import DTYPES, build_model


def test_checkpoint_of_another_configuration_is_set_aside(array_data, make_config, tmp_path):
    cfg_a, run_a = make_config({"method": "diloco", "max_rounds": 2})
    make_engine(cfg_a, run_a, array_data, tmp_path).run()
    cfg_b, run_b = make_config({"method": "diloco", "max_rounds": 2, "inner_lr": 0.02})
    rows_b = make_engine(cfg_b, run_b, array_data, tmp_path).run()
    # The stale checkpoint moved beside the folder; run B started from round 1.
    assert (tmp_path / "ckpt.stale" / "checkpoint.json").exists()
    assert [r["round"] for r in rows_b] == [1, 2]
    fresh = make_engine(cfg_b, run_b, array_data, tmp_path / "fresh").run()
    strip = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows_b]
    assert strip == [{k: v for k, v in r.items() if k != "wall_time_s"} for r in fresh]


@pytest.mark.heavy
def test_every_run_of_the_default_config_ends_at_the_same_budget(array_data, tmp_path):
    # The default's runs, as configured, on the tiny model and data with a small budget.
    from pathlib import Path

    from array_data import TINY_MODEL

    from adloco.config import config_from_dict, read_yaml

    raw = read_yaml(Path(__file__).parents[2] / "config" / "config.yaml")
    raw["model"].update(TINY_MODEL)
    raw["data"]["seq_len_tokens"] = array_data.seq_len_tokens
    raw["train"].update(max_tokens=1000, inner_steps=3, eval_sequences=8, eval_batch=8)
    cfg = config_from_dict(raw)
    budget_sequences = -(-1000 // array_data.seq_len_tokens)
    for name in cfg.runs:
        run = cfg.run(name)
        batches = {d.name: 5 for d in cfg.cluster.devices}
        rows = new_engine(cfg, run, array_data, tmp_path / name, batches=batches).run()
        assert rows[-1]["tokens_total"] == budget_sequences * array_data.seq_len_tokens, name
        assert rows[-1]["round"] < run.max_rounds, name  # ended by the budget


def test_start_creates_the_trainers_of_round_0(array_data, make_config, tmp_path):
    # 3 trainers on 4 slots: D'Hondt on equal batches gives 2, 1, 1 slots (ties to the lower
    # id), so global batches 2 x 2, 2 x 1, 2 x 1. Seed 2: each trainer's subset and sampler
    # are seeded 2 * 7919 + t and 2 * 104729 + t.
    cfg, run = make_config({"initial_trainers": 3, "initial_batch": 2, "subset_fraction": 0.3})
    engine = make_engine(cfg, run, array_data, tmp_path, seed=2)
    engine.start()
    assert [t.id for t in engine.trainers] == [0, 1, 2]
    assert [t.global_batch for t in engine.trainers] == [4, 2, 2]
    for t in engine.trainers:
        assert torch.equal(t.sampler.subset, draw_subset(200, 0.3, 2 * 7919 + t.id))
        assert t.sampler.subset.numel() == 60
        assert (t.sampler.seed, t.sampler.epoch, t.sampler.position) == (2 * 104_729 + t.id, 0, 0)
        assert t.tokens == 0 and t.direction is None and t.smoothed is None
        for p, q in zip(t.params, engine.loop.worker.params, strict=True):
            assert torch.equal(p, q) and p is not q
    counters = (
        engine.round,
        engine.state.tokens_total,
        engine.state.communications,
        engine.state.bytes_total,
    )
    assert counters == (0, 0, 0, 0)
    assert engine.metrics_path.read_text() == ""
    # Independent initial weights: trainer t > 0 starts from the model of seed 1000 s + t.
    cfg, run = make_config({"initial_trainers": 2, "init": "independent"})
    engine = make_engine(cfg, run, array_data, tmp_path / "independent", seed=2)
    engine.start()
    own = build_model(cfg.model, array_data.vocab_size, array_data.seq_len_tokens, 2001)
    for p, q in zip(engine.trainers[1].params, own.parameters(), strict=True):
        assert torch.equal(p, q)
    for p, q in zip(engine.trainers[0].params, engine.loop.worker.params, strict=True):
        assert torch.equal(p, q)


def equal(a, b) -> bool:
    """Equal nested state: tensors by torch.equal, everything else by ==."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return (
            isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(equal(x, y) for x, y in zip(a, b, strict=True))
        )
    return a == b


def test_state_dict_round_trip_restores_every_counter_and_trainer(
    array_data, make_config, tmp_path
):
    # Four rounds of the run that puts every piece of state in play (a merge at round 3).
    cfg, run = make_config(FULL_STATE_RUN, cluster=TINY_CLUSTER, train={"max_rounds": 4})
    engine = make_engine(cfg, run, array_data, tmp_path / "a")
    engine.run()
    state, local = engine.state_dict(), engine.loop.local_state_dict()
    assert len(engine.trainers) == 2 and engine.round == 4
    assert any(t.direction is not None for t in engine.trainers)
    assert all(t.smoothed is not None for t in engine.trainers)
    assert all(n.inner_state is not None for n in engine.loop.nodes.values())

    fresh = make_engine(cfg, run, array_data, tmp_path / "b")
    fresh.load_state_dict(
        state, {"nodes": {n["slot"]: n["inner_state"] for n in local["nodes"]}, "rng": None}
    )
    for name in ("round", "tokens_total", "communications", "bytes_total", "sim_time_s"):
        assert getattr(fresh.state, name) == getattr(engine.state, name), name
    assert fresh.wall_clock.offset_s == state["wall_time_s"]
    assert fresh.state.slot_owner == engine.state.slot_owner
    assert fresh.history == engine.history
    assert [t.id for t in fresh.trainers] == [t.id for t in engine.trainers]
    for t, u in zip(engine.trainers, fresh.trainers, strict=True):
        assert (u.global_batch, u.tokens, u.events) == (t.global_batch, t.tokens, t.events)
        assert all(torch.equal(p, q) for p, q in zip(t.params, u.params, strict=True))
        assert equal(t.outer_opt.state_dict(), u.outer_opt.state_dict())
        # The outer optimizer holds the restored θ itself, not a copy.
        assert all(u.outer_opt.state[p] for p in u.params)
        assert equal(t.sampler.state_dict(), u.sampler.state_dict())
        assert equal(t.direction, u.direction)
        assert t.smoothed == u.smoothed
    for slot, node in engine.loop.nodes.items():
        assert equal(node.inner_state, fresh.loop.nodes[slot].inner_state)
        assert node.inner_state is not fresh.loop.nodes[slot].inner_state
    # Saved again, the restored state is the state it was restored from.
    fresh.wall_clock.t0 = engine.wall_clock.t0
    again = fresh.state_dict()
    assert equal({**again, "wall_time_s": 0}, {**state, "wall_time_s": 0})


def test_best_trainer_and_the_exported_model(array_data, make_config, tmp_path):
    cfg, run = make_config(
        {"initial_trainers": 2, "batch_test": "none", "merge": "none", "max_rounds": 2}
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    rows = engine.run()
    last = {r["trainer"]: r["val_perplexity"] for r in rows if r["round"] == 2}
    assert len(last) == 2 and last[0] != last[1]
    best_id = min(last, key=last.get)
    best = engine.best_trainer()
    assert best.id == best_id
    model = engine.export_model(best)
    got = list(model.parameters())
    assert len(got) == len(best.params)
    for p, q in zip(got, best.params, strict=True):
        assert p.dtype == DTYPES[cfg.model.dtype] and torch.equal(p, q)
    # A trainer merged away no longer counts; without perplexities, the first trainer.
    other = engine.state.trainer_by_id(1 - best_id)
    engine.state.trainers = [other]
    assert engine.best_trainer() is other
    engine.state.trainers = [best, other]
    engine.history = [{**r, "val_perplexity": None} for r in engine.history]
    assert engine.best_trainer() is best


def test_the_run_ends_at_max_rounds_or_the_token_budget(array_data, make_config, tmp_path):
    cfg, run = make_config({"method": "diloco", "max_rounds": 5}, train={"max_tokens": 1000})
    engine = make_engine(cfg, run, array_data, tmp_path)
    assert not engine.loop.finished(4)
    assert engine.loop.finished(5) and engine.loop.finished(6)
    assert not engine.loop.finished(1, pending_tokens=999)
    assert engine.loop.finished(1, pending_tokens=1000)
    engine.state.tokens_total = 400
    assert not engine.loop.finished(1, pending_tokens=599)
    assert engine.loop.finished(1, pending_tokens=600)


def test_the_fingerprint_names_what_the_trajectory_depends_on(array_data, make_config, tmp_path):
    cfg, run = make_config({"method": "diloco"})
    spec = new_spec(cfg, run, array_data, tmp_path / "ckpt", batches={"sim": 4})

    def fp(**changes):
        return dataclasses.replace(spec, **changes).fingerprint()

    reference = fp()
    assert fp() == reference
    # How many processes run the slots does not change the trajectory, nor where
    # the run keeps its checkpoints and curves, what it shows or whose processes run it.
    same = [
        fp(cluster=dataclasses.replace(cfg.cluster, processes_per_machine=2)),
        fp(checkpoint_dir=tmp_path / "elsewhere", live_dir=tmp_path / "live"),
        fp(progress=True, resume_finished=True, experiment="other", lr_keys=("a", "b")),
        fp(collective=LocalCollective()),
    ]
    assert set(same) == {reference}
    changed = [
        fp(settings=dataclasses.replace(run, inner_lr=0.02)),
        fp(seed=1),
        fp(base_sha256={"model.safetensors": "0" * 64}),
        fp(cluster=dataclasses.replace(cfg.cluster, nodes_per_device=1)),
        fp(max_batches={"sim": 3}),
        fp(curves={"sim": StepTimeCurve.roofline(0.02, 4, update_s=0.001)}),
    ]
    assert len({reference, *changed}) == 1 + len(changed)


class MirrorCollective(LocalCollective):
    """Two ranks where the other one holds this rank's state, its digest off by ``skew``."""

    world_size = 2

    def __init__(self, skew: float = 0.0):
        self.skew = skew
        self.calls = 0

    def all_reduce_sum_(self, tensors):
        self.calls += 1
        for t in tensors:
            t.mul_(2)
        if self.calls % 2 == 1:  # the state, not the verdict
            tensors[0][-1] += self.skew


def test_replicas_agree_only_on_the_same_state(array_data, make_config, tmp_path):
    cfg, run = make_config({"method": "diloco"})
    engine = make_engine(cfg, run, array_data, tmp_path, collective=MirrorCollective())
    engine.start()  # agrees at the start
    assert engine.comm.calls == 2
    digest = replica_digest(engine.state)
    assert 0 <= digest < 2**31 - 1
    # One flipped bit of θ, another global batch or sampler position: another digest.
    p = engine.trainers[0].params[0]
    p.view(torch.int32).view(-1)[0] ^= 1
    assert replica_digest(engine.state) != digest
    p.view(torch.int32).view(-1)[0] ^= 1
    assert replica_digest(engine.state) == digest
    engine.trainers[0].global_batch += 1
    assert replica_digest(engine.state) != digest
    engine.trainers[0].global_batch -= 1
    engine.trainers[0].sampler.take(1)
    assert replica_digest(engine.state) != digest
    engine.comm.skew = 1.0
    with pytest.raises(RuntimeError, match="the 2 processes disagree on the round"):
        engine.loop.agree("now")


class CountingRounds:
    """A round loop of no trainers: each round adds 10 tokens; the run ends after round 3."""

    def __init__(self):
        self.state = RunState()
        self.calls: list[str] = []
        self.remembered: list[dict] = []

    def init_trainers(self) -> None:
        self.calls.append("init")

    def run_round(self) -> list[dict]:
        self.state.round += 1
        self.state.tokens_total += 10
        self.calls.append(f"round {self.state.round}")
        row = {
            "round": self.state.round,
            "trainer": 0,
            "requested_batch": 2,
            "val_perplexity": None,
            "val_loss": None,
            "train_loss": 1.5,
            "tokens_total": self.state.tokens_total,
            "sim_time_s": 0.0,
            "wall_time_s": 0.0,
        }
        return [row]

    def finished(self) -> bool:
        return self.state.round >= 3

    def local_state_dict(self) -> dict:
        return {"nodes": [], "rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict, local: dict) -> None:
        self.calls.append(f"load {state['round']}")
        self.state.round, self.state.tokens_total = state["round"], state["tokens_total"]

    def remember(self, rows: list[dict]) -> None:
        self.remembered = rows

    def agree(self, when: str) -> None:
        self.calls.append(f"agree {when}")


def test_the_driver_runs_any_round_loop_through_its_interface(tmp_path):
    settings = DriverSettings(tmp_path / "ckpt", "print", 2, "r seed 0", 30, progress=False)
    loop = CountingRounds()
    rows = Driver(loop, LocalCollective(), settings, WallClock()).run()
    assert [r["round"] for r in rows] == [1, 2, 3]
    # A checkpoint every 2 rounds and at the end, each with the agreement as its barrier.
    assert loop.calls == [
        "init",
        "agree at the start",
        "round 1",
        "round 2",
        "agree when saving round 2",
        "round 3",
        "agree when saving round 3",
    ]
    assert [
        json.loads(x)["round"]
        for x in settings.checkpoint_dir.joinpath("metrics.jsonl").read_text().splitlines()
    ] == [1, 2, 3]
    # A second job resumes after round 3: nothing trained, the rows handed back to the loop.
    again = CountingRounds()
    resumed = Driver(again, LocalCollective(), settings, WallClock()).run()
    assert again.calls == ["load 3", "agree at the start"]
    assert resumed == rows and again.remembered == rows and again.state.tokens_total == 30
