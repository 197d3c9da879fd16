"""Which split each document goes to: a seeded hash of its position in the stream.

The tokenize stage (:mod:`adloco.data.tokenize`) sends every document to
validation, base (the documents the experiment's base model pretrains on,
``data.base_fraction``) or train. The split is decided per document by a
uniform number u in [0, 1) that is a pure function of (seed, position):
validation when u < f_v, base when f_v ≤ u < f_v + (1 − f_v) f_b, train
otherwise. It needs no count of the documents up front (C4 is streamed);
raising ``max_documents`` keeps every earlier document in its split, and
changing ``base_fraction`` never moves a validation document.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adloco.config import DataConfig

SPLITS = ("train", "validation")
BASE_SPLIT = "base"
# The codes of :func:`document_splits`.
SPLIT_CODES = {"train": 0, "validation": 1, BASE_SPLIT: 2}

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64(x: Any) -> Any:
    """SplitMix64's finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(_GOLDEN)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def document_uniforms(indices: Any, seed: int) -> Any:
    """A uniform [0, 1) number per document position, a pure function of (seed, index)."""
    key = _splitmix64(np.array([seed & _MASK64], dtype=np.uint64))
    x = _splitmix64(np.asarray(indices, dtype=np.uint64) ^ key)
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def validation_mask(indices: Any, seed: int, fraction: float) -> Any:
    """True for the documents (by stream position) that go to the validation split."""
    return document_uniforms(indices, seed) < fraction


def splits_of(data: DataConfig) -> tuple[str, ...]:
    """The splits a configuration writes: base first when ``data.base_fraction`` > 0."""
    base = data.base_fraction > 0
    return ((BASE_SPLIT,) if base else ()) + SPLITS


def document_splits(indices: Any, seed: int, validation: float, base: float) -> Any:
    """The split of each document (by stream position): 0 train, 1 validation, 2 base."""
    u = document_uniforms(indices, seed)
    out = np.zeros(u.shape, dtype=np.int8)
    out[(u >= validation) & (u < validation + (1.0 - validation) * base)] = 2
    out[u < validation] = 1
    return out
