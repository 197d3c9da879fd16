"""TokenData: verification on open, batches by index, across shards."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from adloco.data.reader import CorruptDataError, TokenData
from adloco.data.tokenize import tokenize_corpus


def _rows(folder, split: str) -> np.ndarray:
    manifest = json.loads((folder / "manifest.json").read_text())
    shards = manifest["splits"][split]["shards"]
    flat = np.concatenate([np.fromfile(folder / s["file"], dtype="<u2") for s in shards])
    return flat.reshape(-1, manifest["seq_len_tokens"])


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_data_config):
    """The tiny corpus again, in shards of 5 sequences."""
    out = tmp_path_factory.mktemp("sharded") / "tiny"
    tokenize_corpus(tiny_data_config(), 0, out, shard_sequences=5, progress=False)
    return out


@pytest.fixture
def copy_of(tmp_path, tiny_tokenized):
    return shutil.copytree(tiny_tokenized, tmp_path / "copy")


def test_open_exposes_the_manifest(tiny_tokenized):
    data = TokenData.open(tiny_tokenized)
    manifest = json.loads((tiny_tokenized / "manifest.json").read_text())
    assert data.manifest == manifest
    assert (data.vocab_size, data.seq_len_tokens, data.eos_token_id) == (300, 16, 0)
    assert len(AutoTokenizer.from_pretrained(data.tokenizer_dir)) == data.vocab_size
    for name in ("train", "validation"):
        assert len(data.split(name)) == manifest["splits"][name]["sequences"]
    with pytest.raises(KeyError, match="test"):
        data.split("test")


def test_get_returns_the_rows_as_long_tensors(tiny_tokenized):
    split = TokenData.open(tiny_tokenized).split("train")
    rows = _rows(tiny_tokenized, "train")
    indices = [5, 0, len(split) - 1, 5]
    batch = split.get(indices)
    assert batch.dtype == torch.long and batch.shape == (4, 16)
    assert (batch.numpy() == rows[indices]).all()
    assert (split.get(torch.tensor(indices)) == batch).all()
    assert (split.get(np.array(indices, dtype=np.int32)) == batch).all()
    assert split.get([]).shape == (0, 16)


def test_get_across_shards_matches_one_shard(tiny_tokenized, sharded):
    one = TokenData.open(tiny_tokenized)
    many = TokenData.open(sharded)
    for name in ("train", "validation"):
        assert len(many.manifest["splits"][name]["shards"]) > 1
        n = len(one.split(name))
        assert len(many.split(name)) == n
        indices = np.random.default_rng(0).integers(0, n, size=50)
        indices[:3] = [0, n - 1, 4]  # first, last, end of the first shard
        assert (many.split(name).get(indices) == one.split(name).get(indices)).all()


def test_out_of_range_and_bad_indices(tiny_tokenized):
    split = TokenData.open(tiny_tokenized).split("validation")
    with pytest.raises(IndexError, match=str(len(split))):
        split.get([len(split)])
    with pytest.raises(IndexError, match="-1"):
        split.get([-1])
    with pytest.raises(TypeError):
        split.get([0.5])
    with pytest.raises(ValueError, match="one-dimensional"):
        split.get([[0, 1]])


def test_a_flipped_byte_is_reported_with_the_file_name(copy_of):
    shard = copy_of / "validation-00000.bin"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptDataError, match="validation-00000.bin.*sha256"):
        TokenData.open(copy_of)
    TokenData.open(copy_of, verify=False)  # sizes still match: only the checksum sees it


def test_a_truncated_shard_is_reported_with_the_file_name(copy_of):
    shard = copy_of / "train-00000.bin"
    size = shard.stat().st_size
    with open(shard, "r+b") as fh:
        fh.truncate(size - 2)
    for verify in (True, False):
        with pytest.raises(CorruptDataError, match=f"train-00000.bin: {size - 2} bytes"):
            TokenData.open(copy_of, verify=verify)
    assert issubclass(CorruptDataError, ValueError)


def test_missing_or_bad_manifest(copy_of, tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        TokenData.open(tmp_path / "nothing")
    (copy_of / "train-00000.bin").unlink()
    with pytest.raises(FileNotFoundError, match="train-00000.bin"):
        TokenData.open(copy_of)
    manifest = json.loads((copy_of / "manifest.json").read_text())
    (copy_of / "manifest.json").write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(CorruptDataError, match="format_version"):
        TokenData.open(copy_of)
    (copy_of / "manifest.json").write_text("{")
    with pytest.raises(CorruptDataError, match="not valid JSON"):
        TokenData.open(copy_of)


def test_a_split_pickles_without_its_data(tiny_tokenized):
    split = TokenData.open(tiny_tokenized).split("train")
    payload = pickle.dumps(split)
    assert len(payload) < 4096 < split.tokens * 2
    clone = pickle.loads(payload)
    assert (clone.get([1, 2, 3]) == split.get([1, 2, 3])).all()


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_corrupt_tokenizer_file_is_reported_on_open(copy_of, name):
    path = copy_of / "tokenizer" / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match=f"{path}: sha256 .* tokenizer"):
        TokenData.open(copy_of)
    # Without checksums, the tokenizer itself is still loaded to check the manifest's ids.
    with pytest.raises(CorruptDataError, match="the tokenizer does not load"):
        TokenData.open(copy_of, verify=False)


def test_a_missing_or_cut_tokenizer_file_is_reported_on_open(copy_of):
    path = copy_of / "tokenizer" / "tokenizer.json"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CorruptDataError, match=f"{path}: .* bytes, the manifest says"):
        TokenData.open(copy_of, verify=False)
    path.unlink()
    with pytest.raises(FileNotFoundError, match=f"tokenizer file .* not found: {path}"):
        TokenData.open(copy_of)


@pytest.mark.reliability("tokenized files")
def test_a_token_id_beyond_the_vocabulary_is_refused_even_with_a_matching_sha256(copy_of):
    from adloco.core.io import sha256_file

    manifest_path = copy_of / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    shard = copy_of / "train-00000.bin"
    ids = np.fromfile(shard, dtype="<u2")
    ids[3] = manifest["vocab_size"]  # one past the last id
    ids.tofile(shard)
    for entry in manifest["splits"]["train"]["shards"]:
        if entry["file"] == shard.name:
            entry["sha256"] = sha256_file(shard)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptDataError) as err:
        TokenData.open(copy_of)
    assert str(err.value) == (
        f"{shard}: token id {manifest['vocab_size']} is not below the manifest's vocabulary "
        f"size {manifest['vocab_size']}: the shard was written with another tokenizer or "
        "edited; tokenize again"
    )
    ids[3] = manifest["vocab_size"] - 1  # the last id is fine
    ids.tofile(shard)
    for entry in manifest["splits"]["train"]["shards"]:
        if entry["file"] == shard.name:
            entry["sha256"] = sha256_file(shard)
    manifest_path.write_text(json.dumps(manifest))
    TokenData.open(copy_of)
