"""adloco.calibrate.bench: the model on its device and the engine's inner step it runs."""

from __future__ import annotations

import pytest
import torch
from calibrate_helpers import cpu_bench, tiny, typed_device

from adloco.calibrate.bench import GIB, memory_bytes, torch_device
from adloco.model.llama import batch_loss, build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def test_memory_bytes_and_the_torch_device():
    assert memory_bytes(typed_device(name="a", memory_gib=0.05)) == 53_687_091
    assert memory_bytes(typed_device(name="a", memory_gib=2)) == 2 * GIB
    assert torch_device(typed_device(name="a", kind="cpu")) == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device gpu is kind cuda, but no CUDA device"):
            torch_device(typed_device(name="gpu", kind="cuda"))


def test_the_optimizer_is_the_engines_with_the_train_settings(tiny_config, tiny_model):
    optimizer = cpu_bench(tiny_config, tiny_model).optimizer()
    assert isinstance(optimizer, torch.optim.AdamW)
    (group,) = optimizer.param_groups
    # The test preset's inner_lr, and the schema's betas and weight decay.
    assert (group["lr"], group["betas"], group["weight_decay"]) == (0.003, (0.9, 0.95), 0.1)
    assert group["foreach"] is True
    assert len(group["params"]) == len(list(tiny_model.parameters()))


def test_the_pass_is_the_backward_of_the_mean_loss(tiny_config):
    model = build_model(tiny_config.model, 64, 16, seed=0)
    bench = cpu_bench(tiny_config, model)
    ids = bench.random_tokens(3)
    assert ids.shape == (3, 16) and int(ids.max()) < 64
    bench.run_pass(ids)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    loss_sum, n_tokens = batch_loss(model, ids)
    assert int(n_tokens) == 3 * 15
    (loss_sum / n_tokens).backward()
    for grad, p in zip(grads, model.parameters(), strict=True):
        assert torch.equal(grad, p.grad)


def test_the_update_clips_then_takes_one_adamw_step(tiny_config):
    model = build_model(tiny_config.model, 64, 16, seed=0)
    bench = cpu_bench(tiny_config, model)
    params = bench.params
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.ones_like(p)
    bench.update(bench.optimizer(), params)
    # Clipped to train.grad_clip_norm (1.0): every gradient 1 / sqrt(parameters).
    count = sum(p.numel() for p in params)
    norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in params]))
    assert float(norm) == pytest.approx(1.0, rel=1e-5)
    assert float(params[0].grad.flatten()[0]) == pytest.approx(count**-0.5, rel=1e-5)
    # AdamW's first step moves every weight by lr (m / sqrt(v) = 1) after its decay.
    lr, decay = 0.003, 0.1
    for p, p0 in zip(params, before, strict=True):
        assert torch.allclose(p.detach(), p0 * (1 - lr * decay) - lr, atol=1e-6)
    assert bench.describe_update() == "AdamW step (foreach) after clip_grad_norm_ to 1.0"
    unclipped = cpu_bench(tiny(train={"grad_clip_norm": None}), model)
    assert unclipped.describe_update() == "AdamW step (foreach)"
