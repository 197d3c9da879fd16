"""Shared pieces of the engine tests and their subprocesses.

Random token sequences with the reader's API (:class:`ArrayData`), the tiny
model and cluster every engine test trains, and a run that puts every piece of
resumable state in play.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from adloco.config import ClusterConfig, Config, RunSettings
from adloco.engine.compose import build_engine
from adloco.engine.driver import Driver
from adloco.engine.spec import EngineSpec
from adloco.formats.clock import StepTimeCurve


class ArraySplit:
    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens

    def __len__(self) -> int:
        return self.tokens.size(0)

    def get(self, indices) -> torch.Tensor:
        return self.tokens[torch.as_tensor(indices, dtype=torch.long)]


class ArrayData:
    """Random token sequences with the reader's API (train and validation splits)."""

    def __init__(
        self, vocab_size: int = 64, seq_len: int = 12, n_train: int = 200, n_val: int = 24
    ):
        gen = torch.Generator().manual_seed(123)
        # A learnable pattern: token t+1 = (token t + 1) mod vocab, with noise.
        start = torch.randint(0, vocab_size, (n_train + n_val, 1), generator=gen)
        seqs = (start + torch.arange(seq_len)) % vocab_size
        noise = torch.rand(seqs.shape, generator=gen) < 0.2
        seqs = torch.where(noise, torch.randint(0, vocab_size, seqs.shape, generator=gen), seqs)
        self.splits = {
            "train": ArraySplit(seqs[:n_train]),
            "validation": ArraySplit(seqs[n_train:]),
        }
        self.vocab_size = vocab_size
        self.seq_len_tokens = seq_len
        self.manifest = {
            "splits": {"train": {"sequences": n_train}, "validation": {"sequences": n_val}}
        }
        self.tokenizer_dir = None

    def split(self, name: str) -> ArraySplit:
        return self.splits[name]


TINY_MODEL = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}

TINY_CLUSTER = {
    "nodes_per_device": 2,
    "devices": [{"name": "sim", "count": 2, "memory_gib": 1.0, "max_batch": 3}],
}

# Several trainers, the augmented inner-product test, merges, accumulation,
# outer Nesterov momentum, AdamW moments and epochs of a small subset: a run
# whose resume or distribution is right only if every piece of state is.
FULL_STATE_RUN = {
    "method": "adloco",
    "initial_trainers": 3,
    "initial_batch": 2,
    "batch_test": "augmented_inner_product",
    "vartheta": 0.05,
    "nu": 0.05,
    "max_batch_growth": 1.5,
    "merge": "smallest_batch",
    "merge_frequency": 3,
    "subset_fraction": 0.3,
    "outer_momentum": 0.9,
    "nesterov": True,
    "switch_lambda": 1.5,
}


def child_pythonpath() -> str:
    """PYTHONPATH of a worker subprocess: this folder, then the caller's own (kept, so a
    checkout's ``src`` named there is the code the worker runs)."""
    here = str(Path(__file__).resolve().parent)
    return os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)


def tiny_curves(config: Config | ClusterConfig) -> dict[str, StepTimeCurve]:
    """A step-time curve for every device of ``config``: 10 ms a sequence, flat up to 4."""
    cluster = config.cluster if isinstance(config, Config) else config
    return {d.name: StepTimeCurve.roofline(0.01, 4, update_s=0.001) for d in cluster.devices}


def configured_batches(config: Config) -> dict[str, int]:
    """Every device's configured max batch (what its calibration file would say)."""
    return {d.name: d.max_batch for d in config.cluster.devices}


def new_spec(
    config: Config,
    settings: RunSettings,
    data,
    ckpt: Path,
    seed: int = 0,
    batches: dict[str, int] | None = None,
    **options,
) -> EngineSpec:
    """The spec of ``settings`` on ``config``'s model and cluster, tiny curves, no progress.

    ``options``: the spec's other fields (``progress``, ``live_dir``, ``collective``...).
    """
    return EngineSpec(
        settings=settings,
        seed=seed,
        data=data,
        model=config.model,
        cluster=config.cluster,
        max_batches=configured_batches(config) if batches is None else batches,
        curves=tiny_curves(config),
        checkpoint_dir=Path(ckpt),
        **{"progress": False, **options},
    )


def new_engine(
    config: Config,
    settings: RunSettings,
    data,
    ckpt: Path,
    seed: int = 0,
    batches: dict[str, int] | None = None,
    **options,
) -> Driver:
    """The engine of :func:`new_spec`."""
    return build_engine(new_spec(config, settings, data, ckpt, seed, batches, **options))


def make_engine(
    config: Config, settings: RunSettings, data, folder: Path, seed: int = 0, **options
) -> Driver:
    """:func:`new_engine` checkpointing to ``folder / "ckpt"``."""
    return new_engine(config, settings, data, folder / "ckpt", seed, **options)


def assert_close(a, b, rel: float, abs_: float, where: str = "") -> None:
    """Equal structure, ints, strings and None; floats within ``rel``/``abs_``."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_close(a[k], b[k], rel, abs_, f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, rel, abs_, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert b == pytest.approx(a, rel=rel, abs=abs_), where
    else:
        assert a == b, where
