"""Damaged or edited tokenized data: refused before any stage uses it, naming file or key.

Each case changes one thing in a copy of the tiny tokenized folder (a shard,
a tokenizer file, a field of ``manifest.json``, one split's shard copied over
another's) and opens it as training, pretraining and the variance stage do
(:meth:`TokenData.open`), and runs ``adloco calibrate`` on it, which opens it
the same way. An edited ``vocab_size`` would otherwise give a traceback in
training and a model of the wrong size in calibration; an edited
``eos_token_id`` would go unnoticed; a validation shard copied over the
training one, its sha256 rewritten, would train on the validation sequences.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from adloco import cli
from adloco.core.io import sha256_file
from adloco.data.reader import CorruptDataError, TokenData

TEST_CONFIG = Path(__file__).parents[2] / "config" / "test.yaml"


@pytest.fixture
def copy_of(tiny_tokenized, tmp_path):
    folder = tmp_path / "tokenized"
    shutil.copytree(tiny_tokenized, folder)
    return folder


def edit_manifest(change: Callable[[dict], None]) -> Callable[[Path], str]:
    def edit(folder: Path) -> str:
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text())
        change(manifest)
        path.write_text(json.dumps(manifest))
        return str(path)

    return edit


def damage_file(name: str, how: Callable[[bytes], bytes]) -> Callable[[Path], str]:
    def damage(folder: Path) -> str:
        path = folder / name
        path.write_bytes(how(path.read_bytes()))
        return str(path)

    return damage


def remove(name: str) -> Callable[[Path], str]:
    def gone(folder: Path) -> str:
        (folder / name).unlink()
        return str(folder / name)

    return gone


def flip(data: bytes) -> bytes:
    data = bytearray(data)
    data[len(data) // 2] ^= 0x01
    return bytes(data)


def first_shard(manifest: dict) -> dict:
    return manifest["splits"]["train"]["shards"][0]


def copy_split(into: str, source: str, *, counts: tuple[str, ...]) -> Callable[[Path], str]:
    """Split ``source``'s first shard copied over ``into``'s, its sha256 and ``counts`` rewritten.

    ``counts``: the fields of ``into``'s entry set to ``source``'s (its shard's
    ``sequences`` always, so that the file's size fits the manifest).
    """

    def swap(folder: Path) -> str:
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text())
        target, origin = manifest["splits"][into], manifest["splits"][source]
        shard = target["shards"][0]
        shutil.copyfile(folder / origin["shards"][0]["file"], folder / shard["file"])
        shard.update(sha256=sha256_file(folder / shard["file"]))
        shard.update(sequences=origin["shards"][0]["sequences"])
        target.update({key: origin[key] for key in counts})
        path.write_text(json.dumps(manifest))
        return str(path)

    return swap


def swap_entries(first: str, second: str) -> Callable[[dict], None]:
    def swap(manifest: dict) -> None:
        splits = manifest["splits"]
        splits[first], splits[second] = splits[second], splits[first]

    return swap


def _set(**fields):
    return lambda m: m.update(fields)


def _tokenizer(**fields):
    return lambda m: m["tokenizer"].update(fields)


# (case, the change, what the message names besides the file)
CASES = [
    (
        "vocab_size +1",
        edit_manifest(lambda m: m.update(vocab_size=m["vocab_size"] + 1)),
        "vocab_size",
    ),
    (
        "vocab_size -1",
        edit_manifest(lambda m: m.update(vocab_size=m["vocab_size"] - 1)),
        "vocab_size",
    ),
    (
        "tokenizer.vocab_size",
        edit_manifest(lambda m: m["tokenizer"].update(vocab_size=m["vocab_size"] * 2)),
        "tokenizer.vocab_size",
    ),
    ("eos_token_id", edit_manifest(_tokenizer(eos_token_id=2)), "tokenizer.eos_token_id"),
    ("bos_token_id", edit_manifest(_tokenizer(bos_token_id=1)), "tokenizer.bos_token_id"),
    ("shard bit flip", damage_file("train-00000.bin", flip), "sha256"),
    ("shard truncated", damage_file("train-00000.bin", lambda d: d[:-64]), "bytes"),
    ("shard extended", damage_file("validation-00000.bin", lambda d: d + b"\0\0"), "bytes"),
    ("shard missing", remove("train-00000.bin"), "not found"),
    (
        "shard sha256 edited",
        edit_manifest(lambda m: first_shard(m).update(sha256="0" * 64)),
        "sha256",
    ),
    (
        "shard sequences edited",
        edit_manifest(lambda m: first_shard(m).update(sequences=first_shard(m)["sequences"] + 1)),
        "add up",
    ),
    (
        "validation shard over train, sha256 and sequences rewritten",
        copy_split("train", "validation", counts=("sequences",)),
        "split train has",
    ),
    (
        "validation shard over train, its whole entry rewritten",
        copy_split("train", "validation", counts=("sequences", "tokens", "documents")),
        "the same sha256 as",
    ),
    (
        "train and validation split entries swapped",
        edit_manifest(swap_entries("train", "validation")),
        "tokenize names it 'train-00000.bin'",
    ),
    ("seq_len_tokens edited", edit_manifest(_set(seq_len_tokens=32)), "bytes"),
    ("dtype edited", edit_manifest(_set(dtype="int8")), "dtype"),
    ("format_version edited", edit_manifest(_set(format_version=2)), "format_version"),
    ("splits missing", edit_manifest(lambda m: m.pop("splits")), "missing fields"),
    (
        "manifest not JSON",
        damage_file("manifest.json", lambda d: d[: len(d) // 2]),
        "not valid JSON",
    ),
    ("manifest missing", remove("manifest.json"), "run adloco tokenize"),
    ("tokenizer.json bit flip", damage_file("tokenizer/tokenizer.json", flip), "sha256"),
    ("tokenizer.json missing", remove("tokenizer/tokenizer.json"), "not found"),
    (
        "tokenizer_config.json edited",
        damage_file(
            "tokenizer/tokenizer_config.json", lambda d: d.replace(b"<|endoftext|>", b"<|end|>")
        ),
        "tokenizer",
    ),
]


@pytest.mark.reliability("tokenized files")
@pytest.mark.parametrize(("case", "change", "named"), CASES, ids=[c[0] for c in CASES])
def test_damaged_tokenized_data_is_refused_naming_file_and_key(copy_of, case, change, named):
    change(copy_of)
    with pytest.raises((CorruptDataError, FileNotFoundError)) as refused:
        TokenData.open(copy_of)
    message = str(refused.value)
    # The file (the one changed, or the shard an edit of the manifest no longer fits).
    assert f"{copy_of}/" in message, message
    assert named in message and "\n" not in message, message


@pytest.mark.reliability("tokenized files")
@pytest.mark.parametrize(("case", "change", "named"), CASES, ids=[c[0] for c in CASES])
def test_calibration_refuses_the_same_data_in_one_line(
    copy_of, tmp_path, capsys, case, change, named
):
    # adloco calibrate opens the data as training does, before any measurement.
    change(copy_of)
    out = tmp_path / "cpu-tiny.json"
    argv = ["calibrate", "--config", str(TEST_CONFIG), "--data", str(copy_of)]
    assert cli.main([*argv, "--device", "cpu-tiny", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("adloco calibrate: error: ") and err.count("\n") == 1, err
    assert f"{copy_of}/" in err and named in err, err
    assert not out.exists()


def test_the_intact_folder_opens(copy_of):
    data = TokenData.open(copy_of)
    assert data.eos_token_id == 0 and data.bos_token_id is None
