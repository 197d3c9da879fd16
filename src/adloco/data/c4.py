"""C4 record loader: local C4-format files or the hub, through one code path.

The tokenize stage reads its documents here. Records are C4's
``{"text", "timestamp", "url"}``: from gzipped JSON-lines files on disk
(``load_dataset("json", data_files=...)``, sources ``offline-wiki`` and
``local``) or streamed from the hub (``load_dataset("allenai/c4", "en",
split="train", streaming=True)``, source ``hub``). Both are Hugging Face
``IterableDataset`` streams that pass through the same :func:`normalize_records`,
which keeps the three fields, gives the timestamp back as C4's string (the JSON
reader parses it into a datetime) and stops after ``max_documents``. Nothing is
held in memory beyond the current record.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

C4_FIELDS = ("text", "timestamp", "url")
C4_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
LOCAL_PATTERN = "*.json.gz"


def local_files(raw_dir: str | Path) -> list[Path]:
    """The C4-format files of a folder, sorted by name.

    C4's own ``c4-validation.*`` files are left out: the validation split is
    drawn by document from what is read (:mod:`adloco.data.tokenize`).
    """
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise FileNotFoundError(f"raw data folder not found: {raw_dir}")
    files = sorted(p for p in raw_dir.glob(LOCAL_PATTERN) if not p.name.startswith("c4-validation"))
    if not files:
        raise FileNotFoundError(f"no C4-format {LOCAL_PATTERN} files in {raw_dir}")
    return files


def _c4_timestamp(value: object) -> object:
    if isinstance(value, dt.datetime):
        return value.strftime(C4_TIMESTAMP_FORMAT)
    return value


def normalize_records(
    stream: Iterable[dict], max_documents: int | None = None, origin: str = "records"
) -> Iterator[dict]:
    """C4 records from a raw stream: the three fields, C4 timestamps, at most ``max_documents``."""
    if max_documents is not None:
        stream = itertools.islice(stream, max_documents)
    for index, record in enumerate(stream):
        text = record.get("text")
        if not isinstance(text, str):
            raise ValueError(f"{origin}: record {index} has no text field (keys {sorted(record)})")
        yield {
            "text": text,
            "timestamp": _c4_timestamp(record.get("timestamp")),
            "url": record.get("url"),
        }


def open_stream(data_cfg: dict, raw_dir: str | Path | None = None) -> tuple[Iterable[dict], dict]:
    """The raw record stream of the configured source and a description of it.

    ``data_cfg`` is the ``data`` section of the configuration; ``raw_dir``
    overrides ``data.raw_dir`` for the local sources.
    """
    import datasets

    source = data_cfg["source"]
    if source == "hub":
        stream = datasets.load_dataset(
            data_cfg["hub_path"], data_cfg["hub_name"], split="train", streaming=True
        )
        return stream, {
            "kind": "hub",
            "hub_path": data_cfg["hub_path"],
            "hub_name": data_cfg["hub_name"],
            "files": [],
        }
    if source not in ("offline-wiki", "local"):
        raise ValueError(f"data.source: unknown source {source!r}")
    files = local_files(raw_dir if raw_dir is not None else data_cfg["raw_dir"])
    stream = datasets.load_dataset(
        "json", data_files=[str(p) for p in files], split="train", streaming=True
    )
    return stream, {"kind": source, "files": [p.name for p in files]}


def iter_records(data_cfg: dict, raw_dir: str | Path | None = None) -> Iterator[dict]:
    """C4 records of the configured source, the first ``data.max_documents``."""
    stream, info = open_stream(data_cfg, raw_dir)
    origin = info.get("hub_path") or str(raw_dir or data_cfg["raw_dir"])
    return normalize_records(stream, data_cfg.get("max_documents"), origin)
