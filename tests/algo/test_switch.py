"""Switch policies (adloco.algo.switch): requested batch → micro-batches."""

from __future__ import annotations

import math

import pytest

from adloco.algo.switch import StepPlan, plan_step


def test_three_regimes_of_switch_mode():
    assert plan_step(5, 8, "switch") == StepPlan(5, (5,), 5, 1, "plain")
    assert plan_step(8, 8, "switch") == StepPlan(8, (8,), 8, 1, "plain")
    assert plan_step(9, 8, "switch") == StepPlan(9, (8,), 8, 1, "capped")
    assert plan_step(16, 8, "switch") == StepPlan(16, (8,), 8, 1, "capped")
    assert plan_step(17, 8, "switch") == StepPlan(17, (6, 6, 5), 17, 3, "accumulate")
    assert plan_step(40, 8, "switch") == StepPlan(40, (8, 8, 8, 8, 8), 40, 5, "accumulate")
    # λ = 3: 24 is still capped, 25 accumulates in 4 micro-batches of 7, 6, 6, 6.
    assert plan_step(24, 8, "switch", lam=3.0).mode == "capped"
    assert plan_step(25, 8, "switch", lam=3.0).micro_batches == (7, 6, 6, 6)


def test_always_and_never_accumulate():
    assert plan_step(9, 8, "always_accumulate") == StepPlan(9, (5, 4), 9, 2, "accumulate")
    assert plan_step(8, 8, "always_accumulate").mode == "plain"
    assert plan_step(1000, 8, "never_accumulate") == StepPlan(1000, (8,), 8, 1, "capped")
    assert plan_step(3, 8, "never_accumulate").mode == "plain"


def test_every_micro_batch_fits_for_all_sizes():
    for policy, lam in (
        ("switch", 2.0),
        ("switch", 1.5),
        ("always_accumulate", 2.0),
        ("never_accumulate", 2.0),
    ):
        threshold = {"always_accumulate": 1.0, "never_accumulate": math.inf}.get(policy, lam)
        for max_batch in range(1, 21):
            for requested in range(1, 161):
                plan = plan_step(requested, max_batch, policy, lam)
                assert all(1 <= m <= max_batch for m in plan.micro_batches)
                assert plan.accum_steps == len(plan.micro_batches)
                assert max(plan.micro_batches) - min(plan.micro_batches) <= 1
                assert plan.micro_batch == max(plan.micro_batches)
                if requested <= max_batch:
                    assert plan.mode == "plain" and plan.effective == requested
                elif requested <= threshold * max_batch:
                    assert plan.mode == "capped" and plan.effective == max_batch
                else:
                    assert plan.mode == "accumulate"
                    assert plan.effective == requested == sum(plan.micro_batches)
                    assert plan.accum_steps == math.ceil(requested / max_batch)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown switch policy"):
        plan_step(4, 2, "sometimes")
    with pytest.raises(ValueError, match="switch_lambda"):
        plan_step(4, 2, "switch", lam=0.5)
    with pytest.raises(ValueError, match="max_batch"):
        plan_step(4, 0, "switch")
    with pytest.raises(ValueError, match="requested"):
        plan_step(0, 4, "switch")
