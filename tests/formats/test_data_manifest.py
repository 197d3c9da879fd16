"""adloco.formats.data_manifest: manifest.json's check, on hand-written manifests."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adloco.data.reader import DTYPES
from adloco.formats.data_manifest import (
    DTYPE_CODES,
    FORMAT_VERSION,
    CorruptDataError,
    read_manifest,
)


def manifest(**changes) -> dict:
    shards = [
        {"file": "train-00000.bin", "sequences": 3},
        {"file": "train-00001.bin", "sequences": 2},
    ]
    split = {"documents": 4, "tokens": 80, "sequences": 5, "shards": shards}
    fields = {
        "format_version": FORMAT_VERSION,
        "vocab_size": 300,
        "seq_len_tokens": 16,
        "dtype": "uint16",
        "tokenizer": {"dir": "tokenizer"},
        "splits": {"train": split},
    }
    return {**fields, **changes}


def write(folder, fields: dict):
    folder.mkdir(exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(fields))
    return folder


def test_a_whole_manifest_reads_as_written(tmp_path):
    assert read_manifest(write(tmp_path / "data", manifest())) == manifest()


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"format_version": FORMAT_VERSION + 1}, "format_version 2, this reader reads 1"),
        ({"dtype": "int8"}, r"dtype 'int8' is not one of \['uint16', 'uint32'\]"),
        (
            {"splits": {"train": {"documents": 1, "tokens": 1, "shards": []}}},
            "no field 'sequences'",
        ),
        (
            {"splits": {"train": {"documents": 1, "tokens": 1, "sequences": 9, "shards": []}}},
            "shard sequences do not add up",
        ),
    ],
    ids=["version", "dtype", "split field", "split count"],
)
def test_a_manifest_that_breaks_the_format_is_named_with_what_breaks_it(tmp_path, changes, refusal):
    folder = write(tmp_path / "data", manifest(**changes))
    with pytest.raises(CorruptDataError, match=refusal) as refused:
        read_manifest(folder)
    assert str(folder / "manifest.json") in str(refused.value)


def test_a_missing_field_and_a_missing_file_are_named(tmp_path):
    fields = manifest()
    del fields["splits"], fields["vocab_size"]
    with pytest.raises(CorruptDataError, match=r"missing fields \['vocab_size', 'splits'\]"):
        read_manifest(write(tmp_path / "data", fields))
    with pytest.raises(FileNotFoundError, match="run adloco tokenize"):
        read_manifest(tmp_path / "nothing")


def test_the_readers_dtypes_are_the_formats_names_and_codes():
    assert {name: dtype.str for name, dtype in DTYPES.items()} == DTYPE_CODES
    assert DTYPES["uint16"] == np.uint16 and DTYPES["uint32"] == np.uint32
