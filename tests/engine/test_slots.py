"""How the engine runs a trainer's slots: which slots stack, and the two modes end to end.

Tolerance of a vectorized run against a sequential one (``REL_TOL``,
``ABS_TOL``, those of the distributed backend): the stack runs the worker's
own model and torch's own foreach kernels, so every elementwise operation is
the sequential loop's; what may differ is the order of float additions inside
batched reductions — the summed loss of a pass under ``vmap`` (float32), the
batched matrix products on another BLAS or a GPU, and the statistics of a
trainer's slots summed in another order (float64). Measured on the test
preset here: parameters, validation losses and the clock bit-identical, train
losses within 7e-8 and statistics within 1e-13, relative.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from array_data import assert_close, new_engine

from adloco.config import config_from_dict, read_yaml
from adloco.engine import stacked
from adloco.engine.driver import Driver
from adloco.engine.inner import NodeState, Worker
from adloco.engine.slots import SlotRunner, stacks
from adloco.engine.stacked import SlotJob

REPO = Path(__file__).parents[2]
REL_TOL = 1e-5
ABS_TOL = 1e-7
CLOCK_FIELDS = ("slot_work", "sync", "sim_time_s", "round_time_s")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def job(steps, blocks=()) -> SlotJob:
    return SlotJob(NodeState(0), torch.arange(sum(map(sum, steps))), steps, None, list(blocks))


def test_slots_stack_only_with_the_same_passes():
    jobs = [
        job([(2,), (2,)]),  # 0
        job([(3,), (3,)]),  # 1: another local batch
        job([(2,), (2,)]),  # 2: stacks with 0
        job([(1, 1), (2,)]),  # 3: same sequences, other passes (accumulation)
        job([(2,), (2,)], [(0,)]),  # 4: same passes, other statistics blocks
        job([(2,), (2,)]),  # 5
        job([(2,)]),  # 6: a round cut to the budget
        job([(3,), (3,)]),  # 7: stacks with 1
    ]
    assert stacks(jobs) == [[0, 2, 5], [1, 7], [3], [4], [6]]


def test_the_runner_yields_in_slot_order_and_runs_loners_on_the_worker(
    array_data, make_config, monkeypatch
):
    from adloco.model.llama import build_model

    cfg, settings = make_config()
    model = build_model(cfg.model, array_data.vocab_size, array_data.seq_len_tokens, 0)
    worker = Worker(model, settings, torch.device("cpu"))
    theta = [p.detach().clone() for p in worker.params]
    passes = [[(2,)], [(1,)], [(2,)], [(1, 1)]]  # slots 0 and 2 stack; 1 and 3 run alone
    start = [0, 2, 3, 5]
    jobs = [
        SlotJob(NodeState(j), torch.arange(start[j], start[j] + sum(map(sum, p))), p)
        for j, p in enumerate(passes)
    ]
    calls = []
    original_run, original_node = stacked.Stack.run, Worker.run_node
    monkeypatch.setattr(
        stacked.Stack,
        "run",
        lambda self, t, js, *a: calls.append(len(js)) or original_run(self, t, js, *a),
    )
    monkeypatch.setattr(
        Worker, "run_node", lambda self, *a: calls.append(1) or original_node(self, *a)
    )
    runner = SlotRunner("vectorized", worker, settings)
    fetch = array_data.split("train").get
    taken = []
    for out in runner.run(theta, jobs, fetch, [0.01]):
        taken.append((out.job.node.slot, [p.clone() for p in out.params]))
    assert [slot for slot, _ in taken] == [0, 1, 2, 3]
    assert calls == [2, 1, 1]  # the stack of 0 and 2 first, then slots 1 and 3 alone
    sequential = SlotRunner("sequential", worker, settings)
    jobs_again = [SlotJob(NodeState(j.node.slot), j.indices, j.steps) for j in jobs]
    for (slot, params), out in zip(
        taken, sequential.run(theta, jobs_again, fetch, [0.01]), strict=True
    ):
        assert out.job.node.slot == slot
        for p, q in zip(params, out.params, strict=True):
            torch.testing.assert_close(p, q)
    with pytest.raises(ValueError, match="slot_execution"):
        SlotRunner("parallel", worker, settings)


def rows_without_wall_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]


def preset_engine(name: str, mode: str, data, folder: Path) -> Driver:
    """A run of config/test.yaml on the tiny data, slots capped at 2 sequences a pass."""
    raw = read_yaml(REPO / "config" / "test.yaml")
    raw["train"]["slot_execution"] = mode
    cfg = config_from_dict(raw)
    return new_engine(
        cfg, cfg.run(name), data, folder, batches={d.name: 2 for d in cfg.cluster.devices}
    )


@pytest.mark.parametrize("name", ["diloco", "adloco"])
def test_vectorized_runs_the_test_preset_as_sequential_does(
    tiny_tokenized, tmp_path, monkeypatch, name
):
    from adloco.data.reader import TokenData

    data = TokenData.open(tiny_tokenized)
    ran = {"stacked": [], "alone": 0}
    original_run, original_node = stacked.Stack.run, Worker.run_node

    def stack_run(self, theta, jobs, *args):
        ran["stacked"].append(len(jobs))
        return original_run(self, theta, jobs, *args)

    def run_node(self, *args):
        ran["alone"] += 1
        return original_node(self, *args)

    runs = {}
    for mode in ("sequential", "vectorized"):
        if mode == "vectorized":
            monkeypatch.setattr(stacked.Stack, "run", stack_run)
            monkeypatch.setattr(Worker, "run_node", run_node)
        engine = preset_engine(name, mode, data, tmp_path / mode)
        runs[mode] = (rows_without_wall_time(engine.run()), engine)
    (seq_rows, seq), (vec_rows, vec) = runs["sequential"], runs["vectorized"]
    assert len(seq_rows) == len(vec_rows)
    for a, b in zip(seq_rows, vec_rows, strict=True):
        for field in CLOCK_FIELDS:
            assert a[field] == b[field], field  # the clock charges the plan, not the execution
    assert_close(seq_rows, vec_rows, REL_TOL, ABS_TOL, name)
    if name == "diloco":
        assert ran == {"stacked": [4, 4, 4], "alone": 0}  # one stack of the 4 slots a round
    else:
        # Two trainers of 2 slots, merged after round 2; the merged trainer keeps its
        # batch per slot (train.merge_batch per_node) over all 4 slots, so in round 3
        # the 4 slots run equal local batches: one stack of 4 (two of its slots were
        # reallocated, with a fresh AdamW state).
        events = {e["type"] for r in seq_rows for e in r["events"]}
        assert {"merge", "batch_change", "realloc"} <= events
        assert ran == {"stacked": [2, 2, 2, 2, 4], "alone": 0}
    for t, u in zip(seq.trainers, vec.trainers, strict=True):
        for p, q in zip(t.params, u.params, strict=True):
            torch.testing.assert_close(q, p, rtol=REL_TOL, atol=ABS_TOL)


def test_a_checkpoint_does_not_resume_under_the_other_mode(array_data, make_config, tmp_path):
    # The trajectories agree only up to float rounding: a run resumed under the
    # other mode would be neither run, so the mode is part of the fingerprint.
    prints = set()
    for mode in ("sequential", "vectorized"):
        cfg, settings = make_config({"slot_execution": mode})
        engine = new_engine(cfg, settings, array_data, tmp_path, batches={"sim": 4})
        prints.add(engine.fingerprint)
    assert len(prints) == 2
