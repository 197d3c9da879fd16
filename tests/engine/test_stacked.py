"""A stack of slots against the worker running the same slots one after another.

The worker's loop (``Worker.run_node``) is the brute force: every slot of a
stack must end with the parameters, optimizer state, loss, statistics and
non-finite verdict the worker gives it. Tolerances are float32 rounding (the
batched matrix products may add in another order); on this CPU build the
parameters come out bit-identical.
"""

from __future__ import annotations

import copy

import pytest
import torch

from adloco.algo.stats import RoundStats
from adloco.engine.collective import LocalCollective
from adloco.engine.inner import NodeState, NonFiniteLoss, Worker
from adloco.engine.stacked import SlotJob, Stack
from adloco.model.llama import build_model


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def make_worker(make_config, array_data, **run):
    cfg, settings = make_config({"grad_clip_norm": None, **run})
    model = build_model(cfg.model, array_data.vocab_size, array_data.seq_len_tokens, 0)
    return Worker(model, settings, torch.device("cpu")), settings


def slot_indices(k: int, sequences: int) -> list[torch.Tensor]:
    """Disjoint stretches of the train split, one per slot."""
    return [torch.arange(j * sequences, (j + 1) * sequences) for j in range(k)]


def run_sequential(worker, theta, nodes, indices, steps, lrs, fetch, round_stats=None, blocks=()):
    """(result or None, parameters, node) of every slot run by the worker."""
    out = []
    for node, idx in zip(nodes, indices, strict=True):
        try:
            result = worker.run_node(
                theta,
                node,
                idx,
                fetch,
                steps,
                lrs,
                None if round_stats is None else round_stats.for_steps(blocks),
            )
        except NonFiniteLoss:
            out.append((None, None, node))
            continue
        out.append((result, [p.detach().clone() for p in worker.params], node))
    return out


def run_stacked(
    worker, settings, theta, nodes, indices, steps, lrs, fetch, round_stats=None, blocks=()
):
    jobs = [
        SlotJob(
            node,
            idx,
            steps,
            None if round_stats is None else round_stats.for_steps(blocks),
            list(blocks),
        )
        for node, idx in zip(nodes, indices, strict=True)
    ]
    outcomes = Stack(worker, settings).run(theta, jobs, fetch, lrs)
    assert [o.job for o in outcomes] == jobs  # in job order
    return [(o.result, o.params, o.job.node) for o in outcomes]


def both_ways(worker, settings, k, steps, lrs, array_data):
    """k slots from the worker's θ on disjoint train data: (sequential, stacked) results."""
    theta = [p.detach().clone() for p in worker.params]
    indices = slot_indices(k, sum(sum(m) for m in steps))
    fetch = array_data.split("train").get
    sequential = run_sequential(
        worker, theta, [NodeState(j) for j in range(k)], indices, steps, lrs, fetch
    )
    stacked = run_stacked(
        worker, settings, theta, [NodeState(j) for j in range(k)], indices, steps, lrs, fetch
    )
    return sequential, stacked


def assert_same_slots(sequential, stacked):
    for (r, params, node), (r2, params2, node2) in zip(sequential, stacked, strict=True):
        assert (r is None) == (r2 is None)
        if r is None:
            continue
        assert (r.tokens, r.loss_tokens) == (r2.tokens, r2.loss_tokens)
        assert r2.loss_sum == pytest.approx(r.loss_sum, rel=1e-6)
        for p, q in zip(params, params2, strict=True):
            torch.testing.assert_close(q, p)
        for s, s2 in zip(node.inner_state, node2.inner_state, strict=True):
            assert s.keys() == s2.keys()
            for key in s:
                if key == "step":
                    assert torch.equal(s[key], s2[key])
                else:
                    torch.testing.assert_close(s2[key], s[key])


def test_a_stack_runs_every_slot_as_the_worker_does(array_data, make_config):
    worker, settings = make_worker(make_config, array_data, grad_clip_norm=1.0)
    sequential, stacked = both_ways(
        worker, settings, 3, [(2,), (2,), (2,)], [0.01, 0.02, 0.005], array_data
    )
    assert_same_slots(sequential, stacked)
    # The slots saw different data: their results differ from one another.
    assert not torch.equal(stacked[0][1][0], stacked[1][1][0])
    assert float(stacked[0][2].inner_state[0]["step"]) == 3


def test_each_slot_is_clipped_by_its_own_gradient_norm(array_data, make_config):
    worker, settings = make_worker(make_config, array_data)
    theta = [p.detach().clone() for p in worker.params]
    fetch = array_data.split("train").get
    indices = slot_indices(4, 1)
    # Each slot's gradient norm at θ, by hand; the clip sits between them.
    norms = []
    for idx in indices:
        worker.load(theta)
        worker._step_gradient(fetch(idx), (1,))
        norms.append(float(torch.nn.utils.get_total_norm([p.grad for p in worker.params])))
    clip = sorted(norms)[1] + 0.5 * (sorted(norms)[2] - sorted(norms)[1])
    assert sum(n > clip for n in norms) == 2  # two slots clipped, two not
    # SGD: the update is the clipped gradient itself, so a wrong norm shows.
    worker, settings = make_worker(
        make_config, array_data, grad_clip_norm=clip, inner_optimizer="sgd", weight_decay=0.0
    )
    lr = 1.0
    args = (theta, None, indices, [(1,)], [lr], fetch)
    sequential = run_sequential(worker, theta, [NodeState(j) for j in range(4)], *args[2:])
    stacked = run_stacked(worker, settings, theta, [NodeState(j) for j in range(4)], *args[2:])
    assert_same_slots(sequential, stacked)
    for norm, (_, params, _) in zip(norms, stacked, strict=True):
        moved = torch.nn.utils.get_total_norm([t - p for t, p in zip(theta, params, strict=True)])
        assert float(moved) == pytest.approx(min(norm, clip) * lr, rel=1e-4)


def test_slots_of_different_adamw_step_counts_keep_their_own(array_data, make_config):
    worker, settings = make_worker(make_config, array_data, grad_clip_norm=1.0)
    theta = [p.detach().clone() for p in worker.params]
    fetch = array_data.split("train").get
    steps, lrs = [(1,), (1,)], [0.01, 0.01]
    # Slot 0 fresh, slots 1 and 3 after one round, slot 2 after two: three runs of the stack.
    nodes = [NodeState(j) for j in range(4)]
    for node, rounds in zip(nodes, [0, 1, 2, 1], strict=True):
        for r in range(rounds):
            worker.run_node(theta, node, torch.arange(100 + 2 * r, 102 + 2 * r), fetch, steps, lrs)
    assert [0 if n.inner_state is None else float(n.inner_state[0]["step"]) for n in nodes] == [
        0,
        2,
        4,
        2,
    ]
    indices = slot_indices(4, 2)
    sequential = run_sequential(worker, theta, copy.deepcopy(nodes), indices, steps, lrs, fetch)
    stacked = run_stacked(worker, settings, theta, copy.deepcopy(nodes), indices, steps, lrs, fetch)
    assert_same_slots(sequential, stacked)
    assert [float(n.inner_state[0]["step"]) for _, _, n in stacked] == [2, 4, 6, 4]


def test_sgd_and_accumulated_steps_stack_too(array_data, make_config):
    worker, settings = make_worker(make_config, array_data, inner_optimizer="sgd", weight_decay=0.1)
    theta = [p.detach().clone() for p in worker.params]
    fetch = array_data.split("train").get
    steps, lrs = [(2, 1), (2, 1)], [0.3, 0.2]  # accumulation: two passes per step
    indices = slot_indices(3, 6)
    sequential = run_sequential(
        worker, theta, [NodeState(j) for j in range(3)], indices, steps, lrs, fetch
    )
    stacked = run_stacked(
        worker, settings, theta, [NodeState(j) for j in range(3)], indices, steps, lrs, fetch
    )
    assert_same_slots(sequential, stacked)
    assert stacked[0][2].inner_state == [{} for _ in worker.params]  # SGD keeps no state


@pytest.mark.parametrize("mode", ["scalars", "vector"])
@pytest.mark.parametrize("blocks", [[(0,)], [(0, 1)], [(0,), (1,)]])
def test_statistics_are_each_slots_own(array_data, make_config, mode, blocks):
    worker, settings = make_worker(make_config, array_data, grad_clip_norm=1.0)
    theta = [p.detach().clone() for p in worker.params]
    fetch = array_data.split("train").get
    fed = {h for b in blocks for h in b}
    # A step feeding the test runs one pass per group (switch.step_micro_batches).
    steps = [(1, 1, 1) if h in fed else (3,) for h in range(3)]
    lrs = [0.01] * 3
    indices = slot_indices(3, 9)
    estimates = []
    for runner in (run_sequential, run_stacked):
        round_stats = RoundStats(mode, theta)
        args = (theta, [NodeState(j) for j in range(3)], indices, steps, lrs, fetch)
        if runner is run_stacked:
            runner(worker, settings, *args, round_stats, blocks)
        else:
            runner(worker, *args, round_stats, blocks)
        estimates.append(round_stats.reduce(LocalCollective()))
    sequential, stacked = estimates
    assert stacked.groups == sequential.groups == 3 * 3 * len(fed)
    assert stacked.dof == sequential.dof
    for key in ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm"):
        assert getattr(stacked, key) == pytest.approx(getattr(sequential, key), rel=1e-6), key


def test_a_non_finite_slot_is_flagged_alone(array_data, make_config):
    worker, settings = make_worker(make_config, array_data, grad_clip_norm=1.0)
    theta = [p.detach().clone() for p in worker.params]
    fetch = array_data.split("train").get
    steps, lrs = [(1,), (1,)], [0.01, 0.01]
    nodes = [NodeState(j) for j in range(3)]
    for node in nodes:
        worker.run_node(theta, node, torch.arange(150, 152), fetch, steps, lrs)
    # A negative second moment: slot 1's first update is NaN, so is its next loss.
    nodes[1].inner_state[0]["exp_avg_sq"].fill_(-1.0)
    indices = slot_indices(3, 2)
    sequential = run_sequential(worker, theta, copy.deepcopy(nodes), indices, steps, lrs, fetch)
    stacked = run_stacked(worker, settings, theta, copy.deepcopy(nodes), indices, steps, lrs, fetch)
    assert [r is None for r, _, _ in sequential] == [False, True, False]
    assert [r is None for r, _, _ in stacked] == [False, True, False]
    assert_same_slots(sequential, stacked)  # the finite slots are unharmed


def test_a_stack_refuses_slots_of_different_passes(array_data, make_config):
    worker, settings = make_worker(make_config, array_data)
    theta = [p.detach().clone() for p in worker.params]
    jobs = [
        SlotJob(NodeState(0), torch.arange(2), [(2,)]),
        SlotJob(NodeState(1), torch.arange(2, 4), [(1, 1)]),
    ]
    with pytest.raises(ValueError, match="same passes"):
        Stack(worker, settings).run(theta, jobs, array_data.split("train").get, [0.01])


def test_a_stack_runs_under_bf16_autocast_as_the_worker_does(array_data, make_config):
    """Under autocast, attention inside vmap gets one dtype (CUDA's bf16 path, run on CPU autocast).

    vmap runs SDPA once per slot below autocast, which then left query and key
    in float32 and the value in bfloat16; the kernel refused them. Tolerances
    are bf16 rounding.
    """
    worker, settings = make_worker(make_config, array_data, grad_clip_norm=1.0)
    worker.autocast_dtype = torch.bfloat16  # what a CUDA worker with autocast_dtype bfloat16 has
    sequential, stacked = both_ways(worker, settings, 2, [(2,), (2,)], [0.01, 0.01], array_data)
    for (r, params, _), (r2, params2, _) in zip(sequential, stacked, strict=True):
        assert r2.loss_sum == pytest.approx(r.loss_sum, rel=2e-2)
        for p, q in zip(params, params2, strict=True):
            torch.testing.assert_close(q, p, rtol=2e-2, atol=2e-3)
    # The model's own attention is back to SDPA after the stack's passes.
    assert worker.model.config._attn_implementation == "sdpa"


def test_a_stacks_attention_never_runs_on_cudnn(array_data, make_config, monkeypatch):
    """cuDNN's attention gave non-finite losses under vmap on an H100 (docs/gpu-check.md)."""
    import adloco.engine.stacked as stacked

    seen = []
    inner = stacked.sdpa_attention_forward

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return inner(*args, **kwargs)

    monkeypatch.setattr(stacked, "sdpa_attention_forward", spy)
    worker, settings = make_worker(make_config, array_data)
    theta = [p.detach().clone() for p in worker.params]
    before = torch.backends.cuda.cudnn_sdp_enabled()
    run_stacked(
        worker,
        settings,
        theta,
        [NodeState(j) for j in range(2)],
        slot_indices(2, 2),
        [(1,), (1,)],
        [0.01, 0.01],
        array_data.split("train").get,
    )
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
