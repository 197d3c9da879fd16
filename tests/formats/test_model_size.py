"""The configured Llama's size from its configuration alone, against the built model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from adloco.formats import model_size
from adloco.model.llama import build_model

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 300
SEQ_LEN = 16

# Changes of the tiny model (hidden 16, MLP 32, 1 layer, 2 heads, 2 kv heads, tied).
SHAPES = {
    "tied": {},
    "untied": {"tie_word_embeddings": False},
    "gqa one kv head": {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 1},
    "two layers": {"num_hidden_layers": 2},
    "two layers untied gqa": {
        "num_hidden_layers": 2,
        "hidden_size": 24,
        "intermediate_size": 40,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "tie_word_embeddings": False,
    },
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_count_is_the_built_models(tiny_model_cfg, shape):
    model = dataclasses.replace(tiny_model_cfg, **SHAPES[shape])
    built = build_model(model, VOCAB, SEQ_LEN, seed=0)
    assert model_size.parameter_count(model, VOCAB) == sum(p.numel() for p in built.parameters())


def test_the_count_by_hand(tiny_model_cfg):
    # Per layer: q and o 2 x 16 x 16, k and v 2 x 16 x (2 x 8), MLP 3 x 16 x 32, two norms 2 x 16;
    # the final norm 16; the embedding 300 x 16, once when tied and twice when not.
    layer = 2 * 256 + 2 * 256 + 3 * 512 + 32
    assert layer == 2592
    assert model_size.parameter_count(tiny_model_cfg, VOCAB) == layer + 16 + 4800 == 7408
    untied = dataclasses.replace(tiny_model_cfg, tie_word_embeddings=False)
    assert model_size.parameter_count(untied, VOCAB) == 7408 + 4800
    # One kv head of size 8 instead of two: k and v are 16 x 8 each.
    gqa = dataclasses.replace(tiny_model_cfg, num_key_value_heads=1)
    assert model_size.parameter_count(gqa, VOCAB) == 7408 - 2 * 16 * 8
    two = dataclasses.replace(tiny_model_cfg, num_hidden_layers=2)
    assert model_size.parameter_count(two, VOCAB) == 7408 + layer
    # Without a vocabulary (a tokenizer not known before tokenization): the layers and final norm.
    assert model_size.parameter_count(tiny_model_cfg, 0) == layer + 16


@pytest.mark.parametrize(("dtype", "size"), [("float32", 4), ("bfloat16", 2), ("float16", 2)])
def test_training_state_is_four_copies_of_the_weights(dtype, size):
    # Weights, gradients and AdamW's two moments, each one value per parameter.
    assert model_size.training_state_bytes(7408, dtype) == 7408 * size * 4
    assert model_size.training_state_bytes(0, dtype) == 0
    assert model_size.GIB == 2**30


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_training_state_is_what_an_adamw_step_holds(tiny_model_cfg, dtype):
    model = dataclasses.replace(tiny_model_cfg, dtype=dtype, tie_word_embeddings=False)
    built = build_model(model, VOCAB, SEQ_LEN, seed=0)
    params = list(built.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    ids = torch.randint(0, VOCAB, (2, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    built(input_ids=ids).logits.float().sum().backward()
    optimizer.step()
    held = sum(p.numel() * p.element_size() for p in params)
    held += sum(p.grad.numel() * p.grad.element_size() for p in params)
    for p in params:
        state = optimizer.state[p]
        held += sum(state[k].numel() * state[k].element_size() for k in ("exp_avg", "exp_avg_sq"))
    count = model_size.parameter_count(model, VOCAB)
    assert held == model_size.training_state_bytes(count, dtype)
