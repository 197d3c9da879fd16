"""Tokenize stage: packing, split by document, manifest, determinism, atomic output."""

from __future__ import annotations

import dataclasses
import datetime as dt
import filecmp
import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import yaml
from transformers import AutoTokenizer

from adloco import cli
from adloco.core.io import OWNED_LIST, atomic_dir, sha256_file
from adloco.data import c4
from adloco.data.reader import TokenData
from adloco.data.reference import reference_perplexity
from adloco.data.splits import SPLITS, document_splits, validation_mask
from adloco.data.tokenize import WRITER, tokenize_corpus

REPO = Path(__file__).resolve().parents[2]


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _stream(folder: Path, split: str) -> np.ndarray:
    """All tokens of a split's shards, in order (read without the reader under test)."""
    manifest = _manifest(folder)
    shards = manifest["splits"][split]["shards"]
    return np.concatenate([np.fromfile(folder / s["file"], dtype="<u2") for s in shards])


def _expected_stream(records, manifest, tokenizer, split: str) -> list[int]:
    """Brute force: the split's documents, encoded one by one, each followed by EOS."""
    is_val = validation_mask(
        np.arange(len(records)), manifest["seed"], manifest["validation_fraction"]
    )
    eos = manifest["tokenizer"]["eos_token_id"]
    stream: list[int] = []
    for record, val in zip(records, is_val, strict=True):
        if bool(val) == (split == "validation"):
            stream += tokenizer(record["text"])["input_ids"] + [eos]
    return stream


def _same_files(a: Path, b: Path) -> bool:
    names_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    names_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return names_a == names_b and all(filecmp.cmp(a / n, b / n, shallow=False) for n in names_a)


def test_manifest_layout(tiny_tokenized, tiny_c4_records):
    manifest = _manifest(tiny_tokenized)
    assert set(manifest) == {
        "format_version",
        "dataset",
        "source",
        "tokenizer",
        "vocab_size",
        "seq_len_tokens",
        "dtype",
        "seed",
        "validation_fraction",
        "base_fraction",
        "splits",
        "reference_perplexity",
    }
    assert manifest["base_fraction"] == 0.0
    assert manifest["format_version"] == 1 and manifest["dataset"] == "tiny"
    assert manifest["source"] == {
        "kind": "local",
        "files": [f"c4-train.{i:05d}-of-00003.json.gz" for i in range(3)],
        "documents_read": len(tiny_c4_records),
        "on_bad_record": "error",
        "skipped_records": 0,
        "skipped_record_examples": [],
        "empty_documents": 0,
    }
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenized / "tokenizer")
    files = manifest["tokenizer"].pop("files")
    assert manifest["tokenizer"] == {
        "kind": "bpe",
        "name": None,
        "dir": "tokenizer",
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
    }
    # Every file of the tokenizer folder, checksummed like the shards.
    folder = tiny_tokenized / "tokenizer"
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert [f["file"] for f in files] == on_disk and "tokenizer.json" in on_disk
    for entry in files:
        assert entry["sha256"] == sha256_file(folder / entry["file"])
        assert entry["bytes"] == (folder / entry["file"]).stat().st_size
    assert manifest["vocab_size"] == len(tokenizer) == 300
    assert (manifest["dtype"], manifest["seq_len_tokens"], manifest["seed"]) == ("uint16", 16, 0)
    assert set(manifest["splits"]) == set(SPLITS)
    for entry in manifest["splits"].values():
        assert set(entry) == {"documents", "tokens", "sequences", "dropped_tokens", "shards"}


def test_shards_are_the_split_documents_packed_with_eos(tiny_tokenized, tiny_c4_records):
    manifest = _manifest(tiny_tokenized)
    seq_len = manifest["seq_len_tokens"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenized / "tokenizer")
    is_val = validation_mask(np.arange(len(tiny_c4_records)), 0, manifest["validation_fraction"])
    for split in SPLITS:
        entry = manifest["splits"][split]
        expected = _expected_stream(tiny_c4_records, manifest, tokenizer, split)
        assert entry["tokens"] == len(expected)
        assert entry["sequences"] == len(expected) // seq_len
        assert entry["dropped_tokens"] == len(expected) % seq_len
        kept = entry["sequences"] * seq_len
        assert _stream(tiny_tokenized, split).tolist() == expected[:kept]
        want_docs = int(is_val.sum()) if split == "validation" else int((~is_val).sum())
        assert entry["documents"] == want_docs > 0


def test_no_document_in_both_splits_and_documents_round_trip(tiny_tokenized, tiny_c4_records):
    manifest = _manifest(tiny_tokenized)
    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenized / "tokenizer")
    eos = manifest["tokenizer"]["eos_token_id"]
    texts = {r["text"] for r in tiny_c4_records}
    decoded = {}
    for split in SPLITS:
        stream = _stream(tiny_tokenized, split).tolist()
        ends = [i for i, t in enumerate(stream) if t == eos]
        starts = [0] + [e + 1 for e in ends[:-1]]
        # Complete documents only: the dropped tail cuts the last one.
        docs = [tokenizer.decode(stream[s:e]) for s, e in zip(starts, ends, strict=True)]
        assert set(docs) <= texts  # decode gives each document's text back exactly
        decoded[split] = set(docs)
    assert decoded["train"] and decoded["validation"]
    assert not decoded["train"] & decoded["validation"]


def test_manifest_checksums_and_sizes_match_the_files(tiny_tokenized):
    manifest = _manifest(tiny_tokenized)
    for entry in manifest["splits"].values():
        for shard in entry["shards"]:
            path = tiny_tokenized / shard["file"]
            assert sha256_file(path) == shard["sha256"]
            assert path.stat().st_size == shard["sequences"] * manifest["seq_len_tokens"] * 2


def test_two_runs_give_identical_bytes(tmp_path, tiny_tokenized, tiny_data_config):
    tokenize_corpus(tiny_data_config(), 0, tmp_path / "again", progress=False)
    assert _same_files(tiny_tokenized, tmp_path / "again")


@pytest.mark.heavy
def test_worker_processes_give_identical_bytes(tmp_path, tiny_tokenized, tiny_data_config):
    tokenize_corpus(tiny_data_config(num_proc=2), 0, tmp_path / "pool", progress=False)
    assert _same_files(tiny_tokenized, tmp_path / "pool")


def test_shards_roll_over(tmp_path, tiny_tokenized, tiny_data_config):
    manifest = tokenize_corpus(
        tiny_data_config(), 0, tmp_path / "small", shard_sequences=7, progress=False
    )
    for split in SPLITS:
        shards = manifest["splits"][split]["shards"]
        assert [s["file"] for s in shards] == [f"{split}-{i:05d}.bin" for i in range(len(shards))]
        assert all(s["sequences"] == 7 for s in shards[:-1]) and 1 <= shards[-1]["sequences"] <= 7
        assert len(shards) > 1
        assert (_stream(tmp_path / "small", split) == _stream(tiny_tokenized, split)).all()


def test_seed_changes_the_split(tmp_path, tiny_tokenized, tiny_data_config):
    manifest = tokenize_corpus(tiny_data_config(), 1, tmp_path / "seed1", progress=False)
    base = _manifest(tiny_tokenized)
    assert manifest["splits"]["train"]["shards"] != base["splits"]["train"]["shards"]
    total = sum(manifest["splits"][s]["documents"] for s in SPLITS)
    assert total == sum(base["splits"][s]["documents"] for s in SPLITS)


def test_reference_perplexities_are_those_of_the_written_shards(tiny_tokenized):
    data = TokenData.open(tiny_tokenized)
    train, val = data.split("train"), data.split("validation")
    want = reference_perplexity(
        [train.get_numpy(np.arange(len(train)))],
        val.get_numpy(np.arange(len(val))),
        data.vocab_size,
        counts_from=["train"],
    )
    ref = data.manifest["reference_perplexity"]
    assert ref == want.as_dict()
    assert ref["uniform"] == data.vocab_size
    assert ref["predicted_tokens"] == len(val) * (data.seq_len_tokens - 1)
    assert ref["bigram"] < ref["unigram"] < ref["uniform"]


def test_a_base_split_takes_documents_from_train_and_never_from_validation(
    tmp_path, tiny_tokenized, tiny_c4_records, tiny_data_config
):
    manifest = tokenize_corpus(
        tiny_data_config(base_fraction=0.5), 0, tmp_path / "based", progress=False
    )
    plain = _manifest(tiny_tokenized)
    assert list(manifest["splits"]) == ["base", "train", "validation"]
    assert manifest["base_fraction"] == 0.5
    # Validation is untouched by the base fraction, byte for byte.
    assert manifest["splits"]["validation"] == plain["splits"]["validation"]
    codes = document_splits(np.arange(len(tiny_c4_records)), 0, plain["validation_fraction"], 0.5)
    assert (codes == 1).tolist() == validation_mask(
        np.arange(len(tiny_c4_records)), 0, plain["validation_fraction"]
    ).tolist()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "based" / "tokenizer")
    eos = manifest["tokenizer"]["eos_token_id"]
    seq_len = manifest["seq_len_tokens"]
    for name, code in (("base", 2), ("train", 0)):
        expected = []
        for record, c in zip(tiny_c4_records, codes, strict=True):
            if c == code:
                expected += tokenizer(record["text"])["input_ids"] + [eos]
        entry = manifest["splits"][name]
        assert entry["documents"] == int((codes == code).sum()) > 0
        kept = entry["sequences"] * seq_len
        assert _stream(tmp_path / "based", name).tolist() == expected[:kept]
    # Base and train together hold the documents train held without a base split.
    both = manifest["splits"]["base"]["documents"] + manifest["splits"]["train"]["documents"]
    assert both == plain["splits"]["train"]["documents"]
    assert manifest["reference_perplexity"]["counts_from"] == ["base", "train"]


def test_empty_split_is_an_error_and_leaves_the_output_alone(tmp_path, tiny_data_config):
    out = tmp_path / "out"
    with atomic_dir(out, WRITER) as tmp:
        (tmp / "manifest.json").write_text("previous output")
    with pytest.raises(ValueError, match="validation split got 0 documents"):
        tokenize_corpus(tiny_data_config(validation_fraction=1e-9), 0, out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == [OWNED_LIST, "manifest.json"]
    assert (out / "manifest.json").read_text() == "previous output"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_hub_source_gives_the_same_shards(tmp_path, monkeypatch, tiny_c4_records, tiny_data_config):
    real_load = datasets.load_dataset

    def fake_load(path, name=None, **kwargs):
        if path == "json":
            return real_load(path, name, **kwargs)
        assert (path, name, kwargs) == ("allenai/c4", "en", {"split": "train", "streaming": True})
        return (
            {**r, "timestamp": dt.datetime.strptime(r["timestamp"], c4.C4_TIMESTAMP_FORMAT)}
            for r in tiny_c4_records
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    hub = tokenize_corpus(
        tiny_data_config(source="hub", max_documents=80), 0, tmp_path / "hub", progress=False
    )
    local = tokenize_corpus(
        tiny_data_config(max_documents=80), 0, tmp_path / "local", progress=False
    )
    assert hub["source"] == {
        "kind": "hub",
        "hub_path": "allenai/c4",
        "hub_name": "en",
        "files": [],
        "documents_read": 80,
        "on_bad_record": "error",
        "skipped_records": 0,
        "skipped_record_examples": [],
        "empty_documents": 0,
    }
    assert hub["splits"] == local["splits"]


def test_cli_tokenize_writes_the_same_folder(tmp_path, tiny_tokenized, tiny_c4_dir):
    cfg = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    cfg["seed"] = 0
    cfg["model"]["source"] = "config"  # no base split in this data
    cfg["data"] = {
        "dataset": "tiny",
        "source": "local",
        "raw_dir": "/nonexistent",
        "seq_len_tokens": 16,
        "validation_fraction": 0.2,
        "num_proc": 1,
        "tokenizer": {"kind": "bpe", "vocab_size": 300},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "tokenized" / "tiny"
    argv = ["tokenize", "--config", str(config), "--raw", str(tiny_c4_dir), "--out", str(out)]
    assert cli.main(argv) == 0
    assert _same_files(tiny_tokenized, out)


@pytest.mark.heavy
def test_mistral_v1_stage_opens_documents_with_bos(tmp_path, tiny_c4_records, tiny_data_config):
    cfg = tiny_data_config(tokenizer={"kind": "mistral-v1"}, max_documents=40)
    manifest = tokenize_corpus(cfg, 0, tmp_path / "mistral", progress=False)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "mistral" / "tokenizer")
    assert manifest["vocab_size"] == len(tokenizer) == 32000
    assert manifest["tokenizer"]["bos_token_id"] == 1 and manifest["tokenizer"]["eos_token_id"] == 2
    assert manifest["tokenizer"]["name"] == "mistral-common:mistral_common/data/tokenizer.model.v1"
    for split in SPLITS:
        expected = _expected_stream(tiny_c4_records[:40], manifest, tokenizer, split)
        stream = _stream(tmp_path / "mistral", split).tolist()
        assert stream == expected[: len(stream)] and stream[0] == 1
        assert len(stream) == len(expected) - len(expected) % 16


# ---------------------------------------------------------------- broken raw data
def _write_lines(path: Path, lines: list[bytes]) -> None:
    import gzip

    with gzip.open(path, "wb") as fh:
        fh.write(b"".join(line + b"\n" for line in lines))


def test_skipped_bad_records_are_counted_and_the_rest_tokenized_as_without_them(
    tmp_path, tiny_c4_records, tiny_data_config, caplog
):
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    clean.mkdir()
    dirty.mkdir()
    good = [json.dumps(r).encode() for r in tiny_c4_records]
    bad = [b'{"text": "\xff\xfe"}', b"{not json", b'{"url": "x"}']
    mixed = good[:10] + bad[:2] + good[10:60] + bad[2:] + good[60:]
    _write_lines(clean / "c4-train.00000-of-00001.json.gz", good)
    _write_lines(dirty / "c4-train.00000-of-00001.json.gz", mixed)
    with pytest.raises(ValueError, match=r"line 11: not UTF-8"):
        tokenize_corpus(tiny_data_config(raw_dir=str(dirty)), 0, tmp_path / "x", progress=False)
    cfg = tiny_data_config(on_bad_record="skip")
    want = tokenize_corpus(
        dataclasses.replace(cfg, raw_dir=str(clean)), 0, tmp_path / "a", progress=False
    )
    with caplog.at_level("WARNING"):
        got = tokenize_corpus(
            dataclasses.replace(cfg, raw_dir=str(dirty)), 0, tmp_path / "b", progress=False
        )
    assert got["splits"] == want["splits"]  # the same documents, the same shards
    assert got["source"]["skipped_records"] == 3
    examples = got["source"]["skipped_record_examples"]
    lines = [e.split(", ", 1)[1].split(":")[0] for e in examples]
    assert lines == ["line 11", "line 12", "line 63"]
    assert "skipped 3 bad records" in caplog.text


def test_empty_texts_are_counted_and_reported(tmp_path, tiny_c4_records, tiny_data_config, caplog):
    raw = tmp_path / "raw"
    raw.mkdir()
    records = [*tiny_c4_records[:50], {"text": "", "url": "e"}, {"text": "  ", "url": "f"}]
    _write_lines(raw / "c4-train.00000-of-00001.json.gz", [json.dumps(r).encode() for r in records])
    with caplog.at_level("WARNING"):
        manifest = tokenize_corpus(tiny_data_config(raw_dir=str(raw)), 0, tmp_path / "out")
    assert manifest["source"]["empty_documents"] == 2
    assert "2 documents have an empty text" in caplog.text


def test_cli_reports_a_broken_file_in_one_line(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    _write_lines(raw / "c4-train.00000-of-00001.json.gz", [b'{"text": "a"}', b'{"text": 1'])
    cfg = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    cfg["data"].update(source="local", raw_dir=str(raw))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    argv = ["tokenize", "--config", str(config), "--raw", str(raw), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    broken = raw / "c4-train.00000-of-00001.json.gz"
    assert err[-1].startswith(f"adloco tokenize: error: {broken}, line 2")
    assert not any("Traceback" in line for line in err)
