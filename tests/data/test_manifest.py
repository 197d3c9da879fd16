"""The tokenize stage's manifest: its fields in order, file checksums, reference levels."""

from __future__ import annotations

import hashlib
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from adloco.config import TokenizerConfig, section
from adloco.data import c4
from adloco.data.manifest import (
    build_manifest,
    file_checksums,
    reference_levels,
    tokenizer_name,
)
from adloco.data.shards import ShardWriter, finish_splits
from adloco.formats.data_manifest import FORMAT_VERSION


def test_tokenizer_name_of_each_kind():
    assert tokenizer_name(TokenizerConfig("bpe", None, 300)) is None
    assert tokenizer_name(TokenizerConfig("pretrained", "keeeeenw/MicroLlama", 300)) == (
        "keeeeenw/MicroLlama"
    )
    assert tokenizer_name(TokenizerConfig("mistral-v1", None, 300)) == (
        "mistral-common:mistral_common/data/tokenizer.model.v1"
    )


def test_file_checksums_list_every_file_sorted_by_relative_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "z.json").write_bytes(b"{}\n")
    (tmp_path / "a.txt").write_bytes(b"abc")
    (tmp_path / "sub" / "m.bin").write_bytes(bytes(range(7)))
    assert file_checksums(tmp_path) == [
        {"file": "a.txt", "bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()},
        {"file": "sub/m.bin", "bytes": 7, "sha256": hashlib.sha256(bytes(range(7))).hexdigest()},
        {"file": "z.json", "bytes": 3, "sha256": hashlib.sha256(b"{}\n").hexdigest()},
    ]


def test_build_manifest_fields_in_their_written_order(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    tokenizer = SimpleNamespace(
        dir=tmp_path,
        vocab_size=300,
        eos_token_id=0,
        added={"bos_token_id": None, "appends_eos": False},
        dtype=np.dtype("<u2"),
    )
    stats = c4.RecordStats(skipped=2, examples=["f, line 3: x", "f, line 9: y"], empty=1)
    data = section(
        "data",
        {"dataset": "tiny", "source": "local", "base_fraction": 0.25, "on_bad_record": "skip"},
    )
    splits = {"train": {"documents": 4}}
    source = {"kind": "local", "files": ["c4-train.00000-of-00001.json.gz"]}
    manifest = build_manifest(data, 11, tokenizer, splits, source, stats, 9)
    # manifest.json is written in this order; the bytes of the file depend on it.
    assert json.dumps(manifest) == json.dumps(
        {
            "format_version": FORMAT_VERSION,
            "dataset": "tiny",
            "source": {
                "kind": "local",
                "files": ["c4-train.00000-of-00001.json.gz"],
                "documents_read": 9,
                "on_bad_record": "skip",
                "skipped_records": 2,
                "skipped_record_examples": ["f, line 3: x", "f, line 9: y"],
                "empty_documents": 1,
            },
            "tokenizer": {
                "kind": "bpe",
                "name": None,
                "dir": "tokenizer",
                "vocab_size": 300,
                "eos_token_id": 0,
                "bos_token_id": None,
                "files": [
                    {
                        "file": "tokenizer.json",
                        "bytes": 2,
                        "sha256": hashlib.sha256(b"{}").hexdigest(),
                    }
                ],
            },
            "vocab_size": 300,
            "seq_len_tokens": data.seq_len_tokens,
            "dtype": "uint16",
            "seed": 11,
            "validation_fraction": data.validation_fraction,
            "base_fraction": 0.25,
            "splits": {"train": {"documents": 4}},
        }
    )
    assert FORMAT_VERSION == 1


def test_reference_levels_count_base_and_train_by_hand(tmp_path):
    # V = 2, sequences of 2: base [0 0], train [0 1], validation [0 1].
    writers = {s: ShardWriter(tmp_path, s, 2, np.dtype("<u2"), 4) for s in ("base", "train")}
    writers["validation"] = ShardWriter(tmp_path, "validation", 2, np.dtype("<u2"), 4)
    writers["base"].add(np.array([0, 0]))
    writers["train"].add(np.array([0, 1]))
    writers["validation"].add(np.array([0, 1]))
    splits = finish_splits(writers, dict.fromkeys(writers, 1), 2)
    manifest = {"splits": splits, "dtype": "uint16", "seq_len_tokens": 2, "vocab_size": 2}
    levels = reference_levels(tmp_path, manifest)
    assert levels.counts_from == ("base", "train") and levels.predicted_tokens == 1
    # Counts 0: 3, 1: 1 (N = 4); add-1/2: p(1) = 1.5 / (4 + 1) = 0.3.
    assert levels.uniform == 2.0
    assert levels.unigram == pytest.approx(1 / 0.3, rel=1e-12)
    # Witten-Bell after 0: c(0) = 2, T(0) = 2, c(0, 1) = 1: p = (1 + 2 * 0.3) / 4 = 0.4.
    assert levels.bigram == pytest.approx(2.5, rel=1e-12)
    assert math.isclose(levels.as_dict()["bigram"], 2.5, rel_tol=1e-12)
