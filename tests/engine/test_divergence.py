"""Which lr a diverged round names first (``adloco.engine.divergence``): hand-worked losses
against ln V, and the engine's message for an outer lr and an inner failure."""

from __future__ import annotations

import math

import pytest
from array_data import make_engine

from adloco.engine import divergence
from adloco.engine import inner as inner_mod
from adloco.engine.trainers import TrainingDiverged

LN_512 = math.log(512)  # 6.238324625039508: a uniform guess over 512 tokens
KEYS = ("train.inner_lr", "train.outer_lr")


@pytest.mark.parametrize(
    ("failure", "start_loss", "previous", "outer"),
    [
        # Measured on the test preset, train.outer_lr 1.0e+30: round 2 starts from a model
        # that predicts uniformly (up to float32 rounding) after inner steps at 5.23.
        ("inner loss or gradient norm", 6.2383246421813965, 5.226512847408172, True),
        # train.inner_lr 1000: the inner steps of round 1 had already exploded.
        ("validation loss", 6.2383246421813965, 4914151.583885562, False),
        # A sound θ whose inner steps diverge: the inner lr.
        ("inner loss or gradient norm", 5.0, 4.9, False),
        ("inner loss or gradient norm", math.inf, 5.0, True),
        ("inner loss or gradient norm", math.nan, 5.0, True),
        # Round 1 (no outer step behind it, nothing measured): the inner lr.
        ("inner loss or gradient norm", None, None, False),
        # The outer step itself overflowed: the outer lr, whatever the losses.
        ("parameters after the outer step", None, None, True),
        # At the tolerance's edge: ln V x (1 - 1e-6) counts as uniform, a hair below does not.
        ("validation loss", LN_512 * (1 - 1e-6), 5.0, True),
        ("validation loss", LN_512 * (1 - 2e-6), 5.0, False),
    ],
)
def test_the_outer_lr_is_suspected_when_the_outer_step_broke_a_sound_model(
    failure, start_loss, previous, outer
):
    assert divergence.outer_step_suspected(failure, start_loss, previous, 512) is outer


def test_the_advice_names_the_likely_key_first_with_the_numbers():
    assert divergence.advice("validation loss", 5.0, 4.9, 512, KEYS) == (
        "lower train.inner_lr (or train.outer_lr) or check the data"
    )
    assert divergence.advice("validation loss", 7.5, 5.25, 512, KEYS) == (
        "the last outer step left the model no better than a uniform guess (validation loss "
        "7.5, ln 512 = 6.238) after inner steps at loss 5.25; "
        "lower train.outer_lr (or train.inner_lr) or check the data"
    )
    assert divergence.advice("parameters after the outer step", None, None, 512, KEYS) == (
        "lower train.outer_lr (or train.inner_lr) or check the data"
    )


@pytest.mark.reliability("messages")
def test_a_run_broken_by_its_outer_lr_names_the_outer_lr_first(array_data, make_config, tmp_path):
    cfg, run = make_config({"method": "diloco", "max_rounds": 3}, train={"outer_lr": 1.0e30})
    engine = make_engine(cfg, run, array_data, tmp_path)
    with pytest.raises(TrainingDiverged) as caught:
        engine.run()
    message = str(caught.value)
    assert "round 2;" in message and "no better than a uniform guess" in message, message
    assert message.endswith("lower outer_lr (or inner_lr) or check the data")


@pytest.mark.reliability("messages")
def test_inner_steps_that_diverge_from_a_sound_model_name_the_inner_lr_first(
    array_data, make_config, tmp_path, monkeypatch
):
    cfg, run = make_config({"method": "diloco", "max_rounds": 3})
    engine = make_engine(cfg, run, array_data, tmp_path)
    calls = {"n": 0}
    original = inner_mod.batch_loss

    def from_round_two(model, x):
        # Round 1 is 4 slots x 2 steps of forward passes; every later one is NaN.
        calls["n"] += 1
        loss, n = original(model, x)
        return (loss * math.nan, n) if calls["n"] > 8 else (loss, n)

    monkeypatch.setattr(inner_mod, "batch_loss", from_round_two)
    with pytest.raises(TrainingDiverged) as caught:
        engine.run()
    message = str(caught.value)
    assert "non-finite inner loss or gradient norm in 4 attempts of round 2;" in message
    assert message.endswith("; lower inner_lr (or outer_lr) or check the data"), message
