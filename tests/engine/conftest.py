"""An in-memory stand-in for TokenData and a tiny configuration for engine tests."""

from __future__ import annotations

import copy

import pytest
from array_data import TINY_MODEL, ArrayData

from adloco.config import config_from_dict

BASE_CONFIG = {
    "seed": 0,
    "data": {"dataset": "array", "source": "local", "seq_len_tokens": 12},
    "model": TINY_MODEL,
    "cluster": {
        "nodes_per_device": 2,
        "devices": [
            {"name": "sim", "count": 2, "memory_gib": 1.0, "speed_tflops": 1.0, "max_batch": 4}
        ],
    },
    "train": {
        "max_rounds": 3,
        "max_tokens": 10**9,
        "inner_steps": 2,
        "inner_lr": 0.01,
        "warmup_fraction": 0.0,
        "initial_batch": 2,
        "eval_sequences": 8,
        "eval_batch": 8,
    },
    "runs": {"r": {"method": "adloco"}},
}


@pytest.fixture
def array_data() -> ArrayData:
    return ArrayData()


@pytest.fixture
def make_config():
    """make_config(run_overrides, cluster=None) -> (Config, RunSettings of run r)."""

    def make(run: dict | None = None, cluster: dict | None = None, train: dict | None = None):
        cfg = copy.deepcopy(BASE_CONFIG)
        cfg["runs"]["r"].update(run or {})
        cfg["train"].update(train or {})
        if cluster:
            cfg["cluster"].update(cluster)
        config = config_from_dict(cfg)
        return config, config.run("r")

    return make
