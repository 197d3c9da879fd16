"""Helpers of the gradient-statistics tests in tests/algo (not a test file).

Hand-made group gradients: means of DIM = 10 numbers, split into two parameter
tensors of shapes (2, 3) and (4,), fed node by node to a ``RoundStats`` in one
process. A tiny model and a fixed population of token sequences.
"""

from __future__ import annotations

import numpy as np
import torch

from adloco.algo.stats import RoundStats
from adloco.engine.collective import LocalCollective
from adloco.model.llama import build_model

SHAPES = [(2, 3), (4,)]
DIM = 10


def split(flat) -> list[torch.Tensor]:
    flat = torch.as_tensor(np.asarray(flat), dtype=torch.float32)
    return [flat[:6].reshape(2, 3), flat[6:]]


def run_round(mode, nodes, direction=None, comm=None):
    """RoundStats over ``nodes`` (each a list of (mean gradient, size)) in one process."""
    rs = RoundStats(mode, split(np.zeros(DIM)), None if direction is None else split(direction))
    for node in nodes:
        acc = rs.node()
        for g, n in node:
            acc.add_group(split(g), n)
    return rs, rs.reduce(comm or LocalCollective())


def random_nodes(rng, sizes_per_node, loc=0.5):
    return [[(rng.normal(loc, 1.0, DIM), n) for n in sizes] for sizes in sizes_per_node]


def tiny_population(model_cfg: dict, num_sequences: int = 24, seq_len: int = 8):
    model = build_model(model_cfg, vocab_size=64, seq_len_tokens=seq_len, seed=0)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (num_sequences, seq_len), generator=gen)
    return model, ids
