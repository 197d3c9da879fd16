"""C4 loader: local C4-format files and the hub stream give the same records."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import datasets
import pytest

from adloco.data import c4
from adloco.data.corpus import write_c4_files


def test_local_files_give_exactly_the_records_written(
    tiny_c4_dir, tiny_c4_records, tiny_data_config
):
    assert [p.name for p in c4.local_files(tiny_c4_dir)] == [
        f"c4-train.{i:05d}-of-00003.json.gz" for i in range(3)
    ]
    assert list(c4.iter_records(tiny_data_config())) == tiny_c4_records


def test_local_max_documents(tiny_c4_records, tiny_data_config):
    # 57 crosses the boundary between the first two files (50 records each).
    records = list(c4.iter_records(tiny_data_config(max_documents=57)))
    assert records == tiny_c4_records[:57]


def test_raw_dir_argument_overrides_config(tiny_c4_dir, tiny_c4_records, tiny_data_config):
    cfg = tiny_data_config(raw_dir="/nonexistent")
    assert list(c4.iter_records(cfg, raw_dir=tiny_c4_dir)) == tiny_c4_records


def _as_hub_stream(records, consumed):
    """What the hub's JSON reader yields: C4 records with the timestamp parsed."""
    for record in records:
        consumed.append(record["url"])
        stamp = dt.datetime.strptime(record["timestamp"], c4.C4_TIMESTAMP_FORMAT)
        yield {**record, "timestamp": stamp}


def test_hub_path_yields_the_same_records_lazily(monkeypatch, tiny_c4_records, tiny_data_config):
    real_load = datasets.load_dataset
    calls, consumed = [], []

    def fake_load(path, name=None, **kwargs):
        if path == "json":
            return real_load(path, name, **kwargs)
        calls.append((path, name, kwargs))
        return _as_hub_stream(tiny_c4_records, consumed)

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    hub_cfg = tiny_data_config(source="hub", max_documents=23, raw_dir="/nonexistent")
    hub = list(c4.iter_records(hub_cfg))
    local = list(c4.iter_records(tiny_data_config(max_documents=23)))
    assert calls == [("allenai/c4", "en", {"split": "train", "streaming": True})]
    assert hub == local == tiny_c4_records[:23]
    # The stream is read no further than max_documents.
    assert len(consumed) == 23


def test_local_reader_parses_timestamps_and_we_restore_c4_strings(tiny_c4_dir):
    first = next(
        iter(
            datasets.load_dataset(
                "json",
                data_files=[str(c4.local_files(tiny_c4_dir)[0])],
                split="train",
                streaming=True,
            )
        )
    )
    # The JSON reader turns C4's timestamps into datetimes; normalize_records gives them back.
    assert isinstance(first["timestamp"], dt.datetime)
    assert next(c4.normalize_records([first]))["timestamp"] == "2019-04-01T12:00:00Z"


def test_c4_validation_files_are_not_read(tmp_path, tiny_c4_records):
    folder = tmp_path / "raw"
    write_c4_files(tiny_c4_records[:5], folder)
    with gzip.open(folder / "c4-validation.00000-of-00001.json.gz", "wt") as fh:
        fh.write(json.dumps(tiny_c4_records[5]) + "\n")
    assert [p.name for p in c4.local_files(folder)] == ["c4-train.00000-of-00001.json.gz"]


def test_missing_folder_and_empty_folder_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        c4.local_files(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no C4-format"):
        c4.local_files(tmp_path)


def test_record_without_text_is_an_error_on_the_hub_stream():
    with pytest.raises(ValueError, match='x: record 1: no "text" field'):
        list(c4.normalize_records([{"text": "a"}, {"content": "b"}], origin="x"))


# ---------------------------------------------------------------- broken raw data
def _write_gz(path, lines: list[bytes]) -> None:
    with gzip.open(path, "wb") as fh:
        fh.write(b"".join(line + b"\n" for line in lines))


def _good(index: int) -> bytes:
    return json.dumps({"text": f"document {index}", "timestamp": "", "url": ""}).encode()


BROKEN_LINES = [
    (b'{"text": "caf\xe9 au lait", "url": ""}', "line 3: not UTF-8 text (byte 0xe9"),
    (b'{"text": "unclosed', "line 3: not valid JSON (Unterminated string"),
    (b'["a", "list"]', "line 3: a record must be a JSON object, not list"),
    (b'{"content": "x", "url": "u"}', 'line 3: no "text" field (its fields: content, url)'),
    (b'{"text": null, "url": "u"}', 'line 3: "text" is null, not a string'),
]


@pytest.mark.parametrize(("bad", "message"), BROKEN_LINES, ids=[m for _, m in BROKEN_LINES])
def test_a_broken_record_names_the_file_and_line(tmp_path, tiny_data_config, bad, message):
    raw = tmp_path / "raw"
    raw.mkdir()
    _write_gz(raw / "c4-train.00000-of-00002.json.gz", [_good(0)])
    _write_gz(raw / "c4-train.00001-of-00002.json.gz", [_good(1), _good(2), bad, _good(3)])
    with pytest.raises(ValueError) as err:
        list(c4.iter_records(tiny_data_config(raw_dir=str(raw))))
    text = str(err.value)
    assert text.startswith(f"{raw / 'c4-train.00001-of-00002.json.gz'}, {message}"), text
    assert "\n" not in text and "data.on_bad_record: skip" in text


def test_a_truncated_gzip_file_names_the_file_and_the_last_good_line(tmp_path, tiny_data_config):
    raw = tmp_path / "raw"
    raw.mkdir()
    path = raw / "c4-train.00000-of-00001.json.gz"
    _write_gz(path, [_good(i) + b" " * 200 for i in range(50)])
    path.write_bytes(path.read_bytes()[:-30])  # the end of a download that broke off
    with pytest.raises(ValueError) as err:
        list(c4.iter_records(tiny_data_config(raw_dir=str(raw))))
    text = str(err.value)
    assert text.startswith(f"{path}, after line ") and "truncated or corrupt gzip" in text, text


def test_not_gzip_at_all_names_the_file(tmp_path, tiny_data_config):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "c4-train.00000-of-00001.json.gz").write_bytes(b'{"text": "plain"}\n')
    with pytest.raises(ValueError, match=r"c4-train\.00000-of-00001\.json\.gz, line 1: not a gzip"):
        list(c4.iter_records(tiny_data_config(raw_dir=str(raw))))


def test_skip_mode_skips_and_counts_bad_records(tmp_path, tiny_data_config):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = [_good(0), BROKEN_LINES[0][0], _good(1), BROKEN_LINES[1][0], _good(2), b"", _good(3)]
    _write_gz(raw / "c4-train.00000-of-00002.json.gz", lines)
    cut = raw / "c4-train.00001-of-00002.json.gz"
    _write_gz(cut, [_good(i) + b" " * 200 for i in range(4, 54)])
    cut.write_bytes(cut.read_bytes()[:-30])
    stats = c4.RecordStats()
    cfg = tiny_data_config(raw_dir=str(raw), on_bad_record="skip")
    texts = [r["text"] for r in c4.iter_records(cfg, stats=stats)]
    assert texts[:4] == [f"document {i}" for i in range(4)]
    assert 4 < len(texts) < 54  # the readable part of the truncated file is kept
    assert stats.skipped == 3  # two records, one unreadable end of a file
    assert "line 2: not UTF-8" in stats.examples[0] and "line 4" in stats.examples[1]
    assert "truncated" in stats.examples[2]


def test_max_documents_counts_good_records(tmp_path, tiny_data_config):
    raw = tmp_path / "raw"
    raw.mkdir()
    _write_gz(raw / "c4-train.00000-of-00001.json.gz", [_good(0), b"{", _good(1), _good(2)])
    cfg = tiny_data_config(raw_dir=str(raw), on_bad_record="skip", max_documents=2)
    assert [r["text"] for r in c4.iter_records(cfg)] == ["document 0", "document 1"]


def test_empty_texts_are_counted(tmp_path, tiny_data_config):
    stats = c4.RecordStats()
    records = [{"text": "a"}, {"text": ""}, {"text": " \n"}, {"text": "b"}]
    assert len(list(c4.normalize_records(records, stats=stats))) == 4
    assert stats.empty == 2
