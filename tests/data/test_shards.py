"""Shard writing: fixed-length sequences, roll-over, the dropped tail, checksums, empty splits."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from adloco.data import shards
from adloco.data.shards import ShardWriter, finish_splits


def _sha(data: np.ndarray) -> str:
    return hashlib.sha256(data.tobytes()).hexdigest()


def test_23_tokens_make_5_sequences_of_4_in_shards_of_2(tmp_path):
    writer = ShardWriter(tmp_path, "train", 4, np.dtype("<u2"), shard_sequences=2)
    writer.add(np.arange(0, 9, dtype=np.int64))
    writer.add(np.arange(9, 9, dtype=np.int64))  # an empty batch adds nothing
    writer.add(np.arange(9, 23, dtype=np.int64))
    entry = writer.finish()
    tokens = np.arange(20, dtype="<u2")
    assert entry == {
        "tokens": 23,
        "sequences": 5,
        "dropped_tokens": 3,
        "shards": [
            {"file": "train-00000.bin", "sequences": 2, "sha256": _sha(tokens[0:8])},
            {"file": "train-00001.bin", "sequences": 2, "sha256": _sha(tokens[8:16])},
            {"file": "train-00002.bin", "sequences": 1, "sha256": _sha(tokens[16:20])},
        ],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "train-00000.bin",
        "train-00001.bin",
        "train-00002.bin",
    ]
    assert (tmp_path / "train-00001.bin").read_bytes() == tokens[8:16].tobytes()
    assert (tmp_path / "train-00002.bin").stat().st_size == 4 * 2


def test_flushing_mid_stream_writes_the_same_bytes(tmp_path, monkeypatch):
    stream = (np.arange(103) * 7919) % 65521
    whole = ShardWriter(tmp_path / "a", "validation", 8, np.dtype("<u2"), 3)
    (tmp_path / "a").mkdir()
    whole.add(stream)
    want = whole.finish()
    # Flushed every 5 buffered tokens: full sequences leave early, the rest waits.
    monkeypatch.setattr(shards, "FLUSH_TOKENS", 5)
    (tmp_path / "b").mkdir()
    parts = ShardWriter(tmp_path / "b", "validation", 8, np.dtype("<u2"), 3)
    for start in range(0, 103, 6):
        parts.add(stream[start : start + 6])
    assert parts.finish() == want
    assert want["sequences"] == 12 and want["dropped_tokens"] == 103 - 96
    for shard in want["shards"]:
        a, b = tmp_path / "a" / shard["file"], tmp_path / "b" / shard["file"]
        assert a.read_bytes() == b.read_bytes()
    got = np.concatenate([np.fromfile(tmp_path / "b" / s["file"], "<u2") for s in want["shards"]])
    assert got.tolist() == stream[:96].tolist()


def test_ids_over_65535_go_to_uint32_shards(tmp_path):
    writer = ShardWriter(tmp_path, "base", 2, np.dtype("<u4"), 10)
    writer.add(np.array([70000, 1, 65536, 2**32 - 1, 5]))
    entry = writer.finish()
    assert (entry["sequences"], entry["dropped_tokens"]) == (2, 1)
    assert np.fromfile(tmp_path / "base-00000.bin", "<u4").tolist() == [70000, 1, 65536, 2**32 - 1]


def test_shard_sequences_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="shard_sequences must be at least 1"):
        ShardWriter(tmp_path, "train", 4, np.dtype("<u2"), 0)


def test_finish_splits_puts_documents_first_and_refuses_a_split_without_a_sequence(tmp_path):
    train = ShardWriter(tmp_path, "train", 4, np.dtype("<u2"), 10)
    train.add(np.arange(9))
    splits = finish_splits({"train": train}, {"train": 3}, 4)
    assert list(splits["train"]) == ["documents", "tokens", "sequences", "dropped_tokens", "shards"]
    assert (splits["train"]["documents"], splits["train"]["sequences"]) == (3, 2)
    short = ShardWriter(tmp_path, "validation", 4, np.dtype("<u2"), 10)
    short.add(np.arange(3))
    with pytest.raises(ValueError, match="the validation split got 2 documents, 3 tokens: not one"):
        finish_splits({"validation": short}, {"validation": 2}, 4)
    assert not (tmp_path / "validation-00000.bin").exists()
