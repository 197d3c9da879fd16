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


def test_record_without_text_is_an_error():
    with pytest.raises(ValueError, match="record 1 has no text"):
        list(c4.normalize_records([{"text": "a"}, {"content": "b"}], origin="x"))
