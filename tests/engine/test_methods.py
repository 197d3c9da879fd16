"""What each method supplies to the engine (adloco.engine.methods)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from adloco.config.runs import METHOD_RULES
from adloco.engine import methods

SETTINGS = SimpleNamespace(
    outer_lr=0.7,
    outer_momentum=0.9,
    nesterov=True,
    inner_optimizer="adamw",
    inner_lr=3e-4,
    betas=(0.9, 0.95),
    weight_decay=0.1,
)


def test_one_method_per_rule_set_and_its_rules():
    assert sorted(methods.METHODS) == sorted(METHOD_RULES)
    for name, method in methods.METHODS.items():
        assert method.name == name
        assert method.rules is METHOD_RULES[name]
    assert {n for n, m in methods.METHODS.items() if m.per_step_sync} == {"ddp"}
    with pytest.raises(ValueError, match="unknown method 'sgd'; expected one of diloco, "):
        methods.get("sgd")


def test_step_batch_and_all_reduces():
    ddp, diloco = methods.get("ddp"), methods.get("diloco")
    # A trainer of 4 slots with 24 sequences a step: a DiLoCo slot's step averages
    # over 6, a ddp step over all 24.
    assert diloco.step_batch(24, 4) == 6.0
    assert ddp.step_batch(24, 4) == 24
    # A round of 5 steps: DiLoCo all-reduces once, ddp after every step.
    assert diloco.all_reduces(5) == 1
    assert ddp.all_reduces(5) == 5


def test_optimizer_of_theta():
    params = [torch.zeros(3, requires_grad=True)]
    opt = methods.get("adloco").make_optimizer(params, SETTINGS)
    assert type(opt) is torch.optim.SGD
    group = opt.param_groups[0]
    assert (group["lr"], group["momentum"], group["nesterov"]) == (0.7, 0.9, True)
    # ddp steps θ with the inner optimizer's settings.
    opt = methods.get("ddp").make_optimizer(params, SETTINGS)
    assert type(opt) is torch.optim.AdamW
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (3e-4, (0.9, 0.95), 0.1)
