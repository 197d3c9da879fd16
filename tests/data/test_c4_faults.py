"""Broken raw files: `adloco tokenize` names the file and writes nothing from it.

Each case puts one broken ``c4-train.*.json.gz`` file beside good ones and
runs the stage as users do. With ``data.on_bad_record: error`` it must stop
in one line naming the file (and the line where there is one) and leave no
output; no text of a file whose gzip checksum fails is ever used, even when
``data.max_documents`` stops reading before the damage. With ``skip`` the
file's damage is counted in the manifest. A hostile record (one 50 MB line)
is refused without being read into memory.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from adloco import cli
from adloco.config import thaw
from adloco.data import c4
from c4_records import make_c4_records

GOOD = make_c4_records(60)


def _gz(lines: list[bytes]) -> bytes:
    return gzip.compress(b"".join(line + b"\n" for line in lines), mtime=0)


def _records(start: int, count: int) -> list[bytes]:
    return [json.dumps(r).encode() for r in GOOD[start : start + count]]


def bad_crc(data: bytes) -> bytes:
    crc, size = struct.unpack("<II", data[-8:])
    return data[:-8] + struct.pack("<II", crc ^ 1, size)


def bad_length(data: bytes) -> bytes:
    crc, size = struct.unpack("<II", data[-8:])
    return data[:-8] + struct.pack("<II", crc, size + 1)


# (case, bytes of the broken file, what the message says after the file's name)
BROKEN = [
    ("bad CRC", bad_crc(_gz(_records(0, 30))), "line 31: corrupt gzip data (CRC check failed"),
    (
        "bad length",
        bad_length(_gz(_records(0, 30))),
        "line 31: corrupt gzip data (Incorrect length",
    ),
    ("empty file", b"", "empty file (0 bytes), not gzip data"),
    ("truncated", _gz(_records(0, 30))[:-40], "truncated or corrupt gzip data"),
    ("header only", _gz(_records(0, 30))[:10], "after line 0: truncated or corrupt gzip data"),
    ("not gzip", b'{"text": "plain"}\n', "line 1: not a gzip file"),
    ("random bytes", bytes(range(256)) * 4, "line 1: not a gzip file"),
    ("not UTF-8", _gz([_records(0, 1)[0], b'{"text": "caf\xe9"}']), "line 2: not UTF-8 text"),
    ("not JSON", _gz([b'{"text": "unclosed']), "line 1: not valid JSON"),
    ("not an object", _gz([b'["a", "list"]']), "line 1: a record must be a JSON object"),
    ("no text", _gz([b'{"content": "x"}']), 'line 1: no "text" field'),
    ("text null", _gz([b'{"text": null}']), 'line 1: "text" is null'),
    ("text a number", _gz([b'{"text": 12}']), 'line 1: "text" is int'),
    (
        "a record over 1 MiB",
        _gz([json.dumps({"text": "a " * (c4.MAX_RECORD_BYTES // 2)}).encode()]),
        f"line 1: a record longer than {c4.MAX_RECORD_BYTES} bytes",
    ),
]


@pytest.fixture
def tokenize(tmp_path, tiny_data_config, capsys):
    """tokenize(broken, **data) runs `adloco tokenize` on good files plus ``broken`` first."""

    def run(broken: bytes, **data) -> tuple[int, str, Path, Path]:
        raw = tmp_path / "raw"
        raw.mkdir()
        (raw / "c4-train.00000-of-00003.json.gz").write_bytes(broken)
        (raw / "c4-train.00001-of-00003.json.gz").write_bytes(_gz(_records(0, 30)))
        (raw / "c4-train.00002-of-00003.json.gz").write_bytes(_gz(_records(30, 30)))
        config = {
            "experiment": "raw-faults",
            "data": thaw(tiny_data_config(raw_dir=str(raw), **data)),
            "model": {},
            "cluster": {"devices": [{"name": "cpu", "memory_gib": 1.0}]},
            "train": {},
            "runs": {"r": {"method": "diloco"}},
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        out = tmp_path / "tokenized"
        code = cli.main(["tokenize", "--config", str(path), "--raw", str(raw), "--out", str(out)])
        return code, capsys.readouterr().err, raw / "c4-train.00000-of-00003.json.gz", out

    return run


@pytest.mark.reliability("raw files")
@pytest.mark.parametrize(("case", "broken", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_raw_file_stops_tokenization_in_one_line(
    tokenize, tmp_path, case, broken, message
):
    # max_documents below the broken file's records: it must be checked whole anyway.
    code, err, path, out = tokenize(broken, max_documents=20)
    assert code == 1
    assert err.startswith(f"adloco tokenize: error: {path}"), err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".tokenized.*"))


SKIPPED = [b for b in BROKEN if b[0] in ("bad CRC", "empty file", "a record over 1 MiB")]


@pytest.mark.reliability("raw files")
@pytest.mark.parametrize(("case", "broken", "message"), SKIPPED, ids=[b[0] for b in SKIPPED])
def test_skip_mode_counts_a_broken_file_in_the_manifest(tokenize, case, broken, message):
    code, err, path, out = tokenize(broken, on_bad_record="skip")
    assert code == 0, err
    source = json.loads((out / "manifest.json").read_text())["source"]
    assert source["skipped_records"] == 1
    assert source["skipped_record_examples"][0].startswith(str(path))
    assert message in source["skipped_record_examples"][0]


def test_a_corrupt_file_is_refused_before_any_of_its_records(tmp_path):
    path = tmp_path / "c4-train.00000-of-00001.json.gz"
    path.write_bytes(bad_crc(_gz(_records(0, 30))))
    records = c4.read_local_records([path])
    with pytest.raises(c4.BadRecordError, match="CRC check failed"):
        next(records)  # not one record of it, though the damage is at its end


def test_a_long_document_ends_its_batch(tmp_path):
    from adloco.data.tokenize import batched_texts

    texts = ["a" * 10, "b" * 600, "c" * 10, "d" * 10]
    batches = list(batched_texts(({"text": t} for t in texts), size=3, chars=500))
    assert [len(b) for b in batches] == [2, 2]


@pytest.mark.heavy
@pytest.mark.reliability("raw files")
def test_a_50_mb_line_is_refused_without_reading_it_into_memory(tmp_path):
    # In a process of its own, to measure its peak memory (the tokenizer would
    # take about 130 bytes per byte of such a line: 6.5 GB).
    raw = tmp_path / "c4-train.00000-of-00001.json.gz"
    hostile = json.dumps({"text": "word " * (10 * 2**20)}).encode()  # 50 MiB
    with gzip.open(raw, "wb", compresslevel=1) as fh:
        fh.write(b"".join(_records(0, 3)).replace(b"}{", b"}\n{") + b"\n" + hostile + b"\n")
    code = textwrap.dedent(
        f"""
        import resource, json
        from adloco.data import c4
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        stats = c4.RecordStats()
        texts = [r["text"] for r in c4.read_local_records([{str(raw)!r}], "skip", stats)]
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"kept": len(texts), "skipped": stats.skipped,
                          "grew_mib": (after - before) / 1024, "example": stats.examples[0]}}))
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["kept"] == 3 and report["skipped"] == 1
    assert "line 4: a record longer than" in report["example"]
    # The line is read 1 MiB at a time and dropped; the gzip check streams too.
    assert report["grew_mib"] < 16, report
