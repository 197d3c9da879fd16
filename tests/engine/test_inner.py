"""adloco.engine.inner: a Worker's node slot against a plain PyTorch loop on a tiny model.

The reference loop is written out here with torch alone: AdamW with the run's
learning rates, betas and weight decay, the same passes per step (each pass's
summed loss over the step's predicted tokens, backward, accumulated), the
same gradient clipping. The worker must give the same bits.
"""

from __future__ import annotations

import copy

import pytest
import torch

from adloco.algo.accumulate import GradientStatsAccumulator
from adloco.engine.inner import NodeState, NonFiniteLoss, Worker, make_optimizer, step_gradient
from adloco.model.llama import batch_loss, build_model

VOCAB, SEQ_LEN = 64, 8
STEPS = [(2,), (1, 2), (3,)]  # the second step accumulates two passes
LRS = [3e-3, 2e-3, 1e-3]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.fixture
def settings(make_config):
    # A small clipping norm, so that clipping engages at every step.
    _, run = make_config(train={"grad_clip_norm": 0.05, "weight_decay": 0.1})
    assert run.inner_optimizer == "adamw" and run.grad_clip_norm == 0.05
    return run


@pytest.fixture
def model(tiny_model_cfg):
    return build_model(tiny_model_cfg, VOCAB, SEQ_LEN, 0)


def _sequences(count: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (count, SEQ_LEN), generator=gen)


def _reference_loop(model, settings, data, steps, lrs, optimizer=None):
    """Plain torch: AdamW steps over ``data`` in order; the optimizer and the summed loss."""
    params = list(model.parameters())
    if optimizer is None:
        optimizer = torch.optim.AdamW(
            params,
            lr=settings.inner_lr,
            betas=settings.betas,
            weight_decay=settings.weight_decay,
            foreach=True,
        )
    loss_total, start = 0.0, 0
    for micro_batches, lr in zip(steps, lrs, strict=True):
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        step_tokens = sum(micro_batches) * (SEQ_LEN - 1)
        for size in micro_batches:
            loss_sum, _ = batch_loss(model, data[start : start + size])
            (loss_sum / step_tokens).backward()
            loss_total += float(loss_sum.detach().double())
            start += size
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip_norm, foreach=True)
        optimizer.step()
    return optimizer, loss_total


def test_run_node_equals_a_plain_adamw_loop(model, settings):
    reference = copy.deepcopy(model)
    worker = Worker(model, settings, torch.device("cpu"))
    theta = [p.detach().clone() for p in worker.params]
    count = sum(map(sum, STEPS))
    data = _sequences(count)
    node = NodeState(slot=3)

    result = worker.run_node(theta, node, torch.arange(count), lambda i: data[i], STEPS, LRS)

    optimizer, loss_total = _reference_loop(reference, settings, data, STEPS, LRS)
    for got, want in zip(worker.params, reference.parameters(), strict=True):
        assert torch.equal(got, want)
    assert result.tokens == count * SEQ_LEN
    assert result.loss_tokens == count * (SEQ_LEN - 1)
    assert result.loss_sum == pytest.approx(loss_total, rel=1e-12)
    # The slot keeps its AdamW state (3 steps), the worker's optimizer holds none.
    assert [int(s["step"]) for s in node.inner_state] == [3] * len(worker.params)
    for s, p in zip(node.inner_state, reference.parameters(), strict=True):
        assert torch.equal(s["exp_avg"], optimizer.state[p]["exp_avg"])
        assert torch.equal(s["exp_avg_sq"], optimizer.state[p]["exp_avg_sq"])
    assert len(worker.optimizer.state) == 0


def test_the_slot_state_carries_over_rounds(model, settings):
    """Two rounds of one slot from where it stopped: one reference loop of both rounds."""
    reference = copy.deepcopy(model)
    worker = Worker(model, settings, torch.device("cpu"))
    count = sum(map(sum, STEPS))
    data = _sequences(2 * count, seed=1)
    node = NodeState(slot=0)
    for r in range(2):
        theta = [p.detach().clone() for p in worker.params]
        indices = torch.arange(r * count, (r + 1) * count)
        worker.run_node(theta, node, indices, lambda i: data[i], STEPS, LRS)
    _reference_loop(reference, settings, data, STEPS + STEPS, LRS + LRS)
    for got, want in zip(worker.params, reference.parameters(), strict=True):
        assert torch.equal(got, want)
    assert [int(s["step"]) for s in node.inner_state] == [6] * len(worker.params)


def test_a_fresh_slot_starts_from_theta_with_no_state(model, settings):
    worker = Worker(model, settings, torch.device("cpu"))
    theta = [p.detach().clone() for p in worker.params]
    data = _sequences(2)
    first, second = NodeState(0), NodeState(1)
    worker.run_node(theta, first, torch.arange(2), lambda i: data[i], [(2,)], [1e-3])
    after_first = [p.detach().clone() for p in worker.params]
    worker.run_node(theta, second, torch.arange(2), lambda i: data[i], [(2,)], [1e-3])
    for a, b in zip(after_first, worker.params, strict=True):
        assert torch.equal(a, b)  # the same step from the same θ and no state
    assert any(not torch.equal(b, t) for b, t in zip(worker.params, theta, strict=True))


def test_statistics_groups_are_the_micro_batch_mean_gradients(model, settings):
    reference = copy.deepcopy(model)
    worker = Worker(model, settings, torch.device("cpu"))
    theta = [p.detach().clone() for p in worker.params]
    data = _sequences(5, seed=2)
    steps = [(1, 3), (1,)]
    acc = GradientStatsAccumulator(worker.params)
    worker.run_node(
        theta, NodeState(0), torch.arange(5), lambda i: data[i], steps, [1e-3, 1e-3],
        stats=lambda h: acc if h == 0 else None,
    )  # fmt: skip
    # The groups by hand: each pass's mean gradient at θ.
    params = list(reference.parameters())
    by_hand = GradientStatsAccumulator(params)
    for start, size in ((0, 1), (1, 3)):
        reference.zero_grad(set_to_none=True)
        loss_sum, tokens = batch_loss(reference, data[start : start + size])
        (loss_sum / tokens).backward()
        by_hand.add_group([p.grad.clone() for p in params], size)
    got, want = acc.finalize(), by_hand.finalize()
    assert (got.groups, got.samples) == (2, 4)
    assert got.sum_n_sqnorm == pytest.approx(want.sum_n_sqnorm, rel=1e-6)
    assert got.pooled_sum_sqnorm == pytest.approx(want.pooled_sum_sqnorm, rel=1e-6)


def test_step_gradient_with_groups_is_the_token_weighted_sum(model):
    params = list(model.parameters())
    data = _sequences(6, seed=3)
    sizes = (1, 2, 3)

    def backward(start, size, scale):
        loss_sum, _ = batch_loss(model, data[start : start + size])
        (loss_sum / scale).backward()
        return loss_sum.detach()

    loss_plain = step_gradient(params, sizes, SEQ_LEN - 1, backward)
    plain = [p.grad.clone() for p in params]
    groups = []
    loss_groups = step_gradient(
        params,
        sizes,
        SEQ_LEN - 1,
        backward,
        lambda g, n: groups.append(([x.clone() for x in g], n)),
    )
    assert torch.equal(loss_plain, loss_groups)
    assert [n for _, n in groups] == list(sizes)
    # Each group is its pass's mean gradient; their token-weighted sum is the step's.
    weighted = [sum(g[i] * (n / 6) for g, n in groups) for i in range(len(params))]
    for got, plain_grad, mixed in zip(params, plain, weighted, strict=True):
        torch.testing.assert_close(got.grad, plain_grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(got.grad, mixed, rtol=1e-6, atol=1e-8)
    # The one-pass gradient of all 6 sequences, by plain torch.
    for p in params:
        p.grad = None
    loss_sum, tokens = batch_loss(model, data)
    (loss_sum / tokens).backward()
    for got, plain_grad in zip(params, plain, strict=True):
        torch.testing.assert_close(got.grad, plain_grad, rtol=1e-5, atol=1e-7)


def test_non_finite_loss_raises_and_leaves_the_optimizer_empty(model, settings):
    worker = Worker(model, settings, torch.device("cpu"))
    theta = [p.detach().clone() for p in worker.params]
    theta[0][0, 0] = float("nan")
    data = _sequences(2)
    node = NodeState(slot=7)
    with pytest.raises(NonFiniteLoss, match="slot 7"):
        worker.run_node(theta, node, torch.arange(2), lambda i: data[i], [(2,)], [1e-3])
    assert len(worker.optimizer.state) == 0 and node.inner_state is not None


def test_steps_rates_and_indices_must_agree(model, settings):
    worker = Worker(model, settings, torch.device("cpu"))
    theta = [p.detach().clone() for p in worker.params]
    data = _sequences(4)
    fetch = lambda i: data[i]  # noqa: E731
    with pytest.raises(ValueError, match="disagree"):
        worker.run_node(theta, NodeState(0), torch.arange(4), fetch, [(2,), (2,)], [1e-3])
    with pytest.raises(ValueError, match="disagree"):
        worker.run_node(theta, NodeState(0), torch.arange(3), fetch, [(2,), (2,)], [1e-3, 1e-3])


def test_make_optimizer(model, settings, make_config):
    params = list(model.parameters())
    adamw = make_optimizer(params, settings)
    assert isinstance(adamw, torch.optim.AdamW)
    group = adamw.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (
        settings.inner_lr,
        settings.betas,
        settings.weight_decay,
    )
    _, sgd_settings = make_config(train={"inner_optimizer": "sgd", "weight_decay": 0.0})
    sgd = make_optimizer(params, sgd_settings)
    assert isinstance(sgd, torch.optim.SGD)
    assert (sgd.param_groups[0]["lr"], sgd.param_groups[0]["weight_decay"]) == (
        sgd_settings.inner_lr,
        0.0,
    )
