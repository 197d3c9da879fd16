"""Split by document: the seeded hash, its thresholds, and the splits a configuration writes."""

from __future__ import annotations

import dataclasses

import numpy as np

from adloco.config import section
from adloco.data.splits import (
    BASE_SPLIT,
    SPLIT_CODES,
    SPLITS,
    document_splits,
    document_uniforms,
    splits_of,
    validation_mask,
)

M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64's finalizer on a Python int (the reference the numpy code must match)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def uniform(index: int, seed: int) -> float:
    return (splitmix64(index ^ splitmix64(seed & M64)) >> 11) * 2.0**-53


def test_document_uniforms_match_a_hand_computed_splitmix64():
    indices = [0, 1, 17, 19999, 2**40 + 3]
    for seed in (0, 3, 2**63 + 5):
        got = document_uniforms(np.array(indices), seed)
        assert got.tolist() == [uniform(i, seed) for i in indices]
    # SplitMix64 of 0: the first output of the reference generator seeded with 0.
    assert splitmix64(0) == 0xE220A8397B1DCDAF


def test_validation_mask_is_a_seeded_hash():
    indices = np.arange(20000)
    mask = validation_mask(indices, 3, 0.1)
    assert (mask == validation_mask(indices, 3, 0.1)).all()
    assert (mask[:500] == validation_mask(indices[:500], 3, 0.1)).all()  # prefix-stable
    assert (mask != validation_mask(indices, 4, 0.1)).any()
    # Binomial(20000, 0.1): sd ~ 42; 5 sd either side.
    assert abs(int(mask.sum()) - 2000) < 212
    for i in (0, 1, 17, 19999):
        assert bool(mask[i]) == (uniform(i, 3) < 0.1)


def test_document_splits_follow_the_thresholds():
    indices = np.arange(20000)
    codes = document_splits(indices, 7, 0.1, 0.5)
    u = np.array([uniform(int(i), 7) for i in indices[:2000]])
    # validation u < 0.1; base 0.1 <= u < 0.1 + 0.9 * 0.5 = 0.55; train the rest.
    want = np.where(u < 0.1, 1, np.where(u < 0.55, 2, 0))
    assert codes[:2000].tolist() == want.tolist()
    assert set(np.unique(codes).tolist()) == {0, 1, 2}
    # Binomial(20000, 0.45) for base: sd ~ 70; 5 sd either side.
    assert abs(int((codes == 2).sum()) - 9000) < 352


def test_the_base_fraction_never_moves_a_validation_document():
    indices = np.arange(5000)
    plain = document_splits(indices, 1, 0.2, 0.0)
    assert set(np.unique(plain).tolist()) == {0, 1}
    assert (plain == 1).tolist() == validation_mask(indices, 1, 0.2).tolist()
    for base in (0.3, 0.9, 1.0):
        codes = document_splits(indices, 1, 0.2, base)
        assert ((codes == 1) == (plain == 1)).all()
        assert (codes[plain == 0] != 1).all()
    # A base fraction of 1 takes every document that is not validation.
    assert ((document_splits(indices, 1, 0.2, 1.0) == 2) == (plain == 0)).all()


def test_splits_of_a_configuration():
    assert SPLITS == ("train", "validation") and BASE_SPLIT == "base"
    assert SPLIT_CODES == {"train": 0, "validation": 1, "base": 2}
    plain = section("data", {"dataset": "d", "source": "local"})
    assert plain.base_fraction == 0.0
    assert splits_of(plain) == ("train", "validation")
    based = dataclasses.replace(plain, base_fraction=0.25)
    assert splits_of(based) == ("base", "train", "validation")
