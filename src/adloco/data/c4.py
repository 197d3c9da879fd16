"""C4 record loader: local C4-format files or the hub, into one record stream.

The tokenize stage reads its documents here. Records are C4's
``{"text", "timestamp", "url"}``: from gzipped JSON-lines files on disk
(sources ``offline-wiki`` and ``local``), read line by line by
:func:`read_local_records`, or streamed from the hub
(``load_dataset("allenai/c4", "en", split="train", streaming=True)``, source
``hub``). Both streams pass through the same :func:`normalize_records`, which
keeps the three fields, gives the timestamp back as C4's string (the hub's
reader parses it into a datetime), counts empty texts and stops after
``max_documents`` good records. Nothing is held in memory beyond the current
record.

A broken record (bytes that are not UTF-8, a line that is not JSON or not an
object, a record without a ``text`` string) and a truncated or corrupt gzip
file stop the stage with one line naming the file and the line
(:class:`BadRecordError`); with ``data.on_bad_record: skip`` they are skipped
and counted instead (:class:`RecordStats`, written to the manifest). The local
files are read with Python's own gzip and json rather than the ``datasets``
JSON reader, whose errors name neither the file nor the line.

Each local file is read to its end, and its gzip checksum checked, before any
of its records is used (:func:`gzip_problem`): a file whose checksum fails is
refused even when ``max_documents`` would stop reading before the damage. An
empty (0-byte) file is a broken file too, named. A record longer than
:data:`MAX_RECORD_BYTES` (1 MiB of JSON, far above any C4 document) is a bad
record, read no further than that: one hostile line never costs more memory
than that, in reading or in tokenization, which takes about 130 bytes of
memory per byte of text.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import datasets

from adloco.config import DataConfig

C4_FIELDS = ("text", "timestamp", "url")
C4_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
LOCAL_PATTERN = "*.json.gz"
ON_BAD_RECORD = ("error", "skip")
# Skipped records quoted in the manifest (all are counted).
EXAMPLES_KEPT = 10
# The longest record (one JSON line, or a hub record's text in UTF-8) that is read.
MAX_RECORD_BYTES = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


class BadRecordError(ValueError):
    """A raw record or file that cannot be read; the message names the file and line."""


@dataclass
class RecordStats:
    """What the reader skipped (``data.on_bad_record: skip``) and the empty texts it passed."""

    skipped: int = 0
    examples: list[str] = field(default_factory=list)
    empty: int = 0

    def skip(self, message: str) -> None:
        self.skipped += 1
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append(message)


def _bad(message: str, on_bad_record: str, stats: RecordStats | None) -> None:
    """Raise for ``error``; count for ``skip``."""
    if on_bad_record == "skip":
        if stats is not None:
            stats.skip(message)
        return
    raise BadRecordError(
        f"{message} (data.on_bad_record: skip skips such records and counts them in the manifest)"
    )


def _text_problem(record: object) -> str | None:
    """Why ``record`` is no C4 record, or None."""
    if not isinstance(record, dict):
        return f"a record must be a JSON object, not {type(record).__name__}"
    if "text" not in record:
        return f'no "text" field (its fields: {", ".join(sorted(map(str, record))) or "none"})'
    if not isinstance(record["text"], str):
        kind = "null" if record["text"] is None else type(record["text"]).__name__
        return f'"text" is {kind}, not a string'
    return None


def gzip_problem(path: str | Path) -> str | None:
    """Why the gzip file ``path`` cannot be trusted (read to its end, checksum included), or None.

    The message names the file and the line where reading stopped. Results
    are remembered per file, size and modification time: tokenization reads
    each file twice (BPE training, then encoding).
    """
    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = _read_to_end(path, stat.st_size)
    return _VERIFIED[key]


_VERIFIED: dict[tuple, str | None] = {}


def _read_to_end(path: Path, size_bytes: int) -> str | None:
    if size_bytes == 0:
        return f"{path}: empty file (0 bytes), not gzip data"
    with open(path, "rb") as fh:
        if fh.read(2) != GZIP_MAGIC:
            return f"{path}, line 1: not a gzip file (it does not start with gzip's magic bytes)"
    lines = 0
    try:
        with gzip.open(path, "rb") as fh:
            # Line by line (each read no further than a record may be long), so
            # that the message names the line where the damage is.
            while raw := fh.readline(MAX_RECORD_BYTES + 1):
                lines += raw.endswith(b"\n")
    except (gzip.BadGzipFile, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if isinstance(exc, gzip.BadGzipFile):
            return f"{path}, line {lines + 1}: corrupt gzip data ({exc})"
        return f"{path}, after line {lines}: truncated or corrupt gzip data ({exc})"
    return None


def _lines(fh) -> Iterator[bytes | None]:
    """The lines of ``fh``, each read no further than MAX_RECORD_BYTES; None for a longer one."""
    while raw := fh.readline(MAX_RECORD_BYTES + 1):
        if len(raw) <= MAX_RECORD_BYTES or raw.endswith(b"\n"):
            yield raw
            continue
        # The rest of an overlong line, dropped as it is read.
        while (rest := fh.readline(MAX_RECORD_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield None


def read_local_records(
    files: Iterable[str | Path], on_bad_record: str = "error", stats: RecordStats | None = None
) -> Iterator[dict]:
    """The records of gzipped JSON-lines files, in order, each checked line by line.

    Every file is first read to its end (:func:`gzip_problem`); a broken file
    raises :class:`BadRecordError` naming it before any of its records is used
    (``on_bad_record="error"``), or with ``"skip"`` counts once in ``stats``
    while its complete lines before the damage are kept. Blank lines are passed
    over. A bad line, or one longer than :data:`MAX_RECORD_BYTES`, raises
    naming the file and the line, or is skipped and counted.
    """
    if on_bad_record not in ON_BAD_RECORD:
        raise ValueError(f"data.on_bad_record: {on_bad_record!r} is not one of {ON_BAD_RECORD}")
    for path in files:
        yield from _file_records(path, on_bad_record, stats)


def _file_records(
    path: str | Path, on_bad_record: str, stats: RecordStats | None
) -> Iterator[dict]:
    """The good records of one gzipped JSON-lines file (see :func:`read_local_records`)."""
    problem = gzip_problem(path)
    if problem is not None:
        _bad(problem, on_bad_record, stats)
    line_no = 0
    try:
        with gzip.open(path, "rb") as fh:
            for line_no, raw in enumerate(_lines(fh), start=1):  # noqa: B007 (used after)
                record = _line_record(raw, f"{path}, line {line_no}", on_bad_record, stats)
                if record is not None:
                    yield record
    except (gzip.BadGzipFile, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if problem is None:  # the file changed since it was verified
            _bad(f"{path}, after line {line_no}: unreadable ({exc})", on_bad_record, stats)


def _line_record(
    raw: bytes | None, where: str, on_bad_record: str, stats: RecordStats | None
) -> dict | None:
    """The C4 record of one line (``where`` names it), or None: blank, or bad (raised or counted).

    ``raw`` is None for a line longer than :data:`MAX_RECORD_BYTES` (:func:`_lines`).
    """
    if raw is None:
        _bad(
            f"{where}: a record longer than {MAX_RECORD_BYTES} bytes (the "
            "longest one read, so that one line cannot exhaust memory)",
            on_bad_record,
            stats,
        )
        return None
    if not raw.strip():
        return None
    try:
        line = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start : exc.start + 1].hex()
        _bad(
            f"{where}: not UTF-8 text (byte 0x{byte} at column {exc.start + 1})",
            on_bad_record,
            stats,
        )
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        _bad(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})", on_bad_record, stats)
        return None
    problem = _text_problem(record)
    if problem is not None:
        _bad(f"{where}: {problem}", on_bad_record, stats)
        return None
    return record


def local_files(raw_dir: str | Path) -> list[Path]:
    """The C4-format files of a folder, sorted by name.

    C4's own ``c4-validation.*`` files are left out: the validation split is
    drawn by document from what is read (:mod:`adloco.data.splits`).
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
    stream: Iterable[dict],
    max_documents: int | None = None,
    origin: str = "records",
    on_bad_record: str = "error",
    stats: RecordStats | None = None,
) -> Iterator[dict]:
    """C4 records from a raw stream: the three fields, C4 timestamps, at most ``max_documents``.

    A record without a ``text`` string (the hub's stream; local files are
    checked line by line before) is an error or skipped, as ``on_bad_record``
    says; ``max_documents`` counts the records kept. Empty texts (nothing but
    white space) are kept and counted in ``stats``.
    """
    if max_documents is not None and max_documents < 1:
        return
    kept = 0
    for index, record in enumerate(stream):
        problem = _text_problem(record)
        if problem is None and _utf8_bytes_over(record["text"], MAX_RECORD_BYTES):
            problem = f"a text longer than {MAX_RECORD_BYTES} bytes (the longest one read)"
        if problem is not None:
            _bad(f"{origin}: record {index}: {problem}", on_bad_record, stats)
            continue
        text = record["text"]
        if stats is not None and not text.strip():
            stats.empty += 1
        yield {
            "text": text,
            "timestamp": _c4_timestamp(record.get("timestamp")),
            "url": record.get("url"),
        }
        kept += 1
        if max_documents is not None and kept >= max_documents:
            return


def _utf8_bytes_over(text: str, limit: int) -> bool:
    # A character is 1 to 4 bytes: encode only a text that may be over.
    return len(text) > limit or (len(text) > limit // 4 and len(text.encode("utf-8")) > limit)


def open_stream(
    data: DataConfig, raw_dir: str | Path | None = None, stats: RecordStats | None = None
) -> tuple[Iterable[dict], dict]:
    """The raw record stream of the configured source and a description of it.

    ``data`` is the ``data`` section of the configuration; ``raw_dir``
    overrides ``data.raw_dir`` for the local sources; ``stats`` counts what a
    local stream skips (``data.on_bad_record: skip``).
    """
    source = data.source
    if source == "hub":
        stream = datasets.load_dataset(data.hub_path, data.hub_name, split="train", streaming=True)
        return stream, {
            "kind": "hub",
            "hub_path": data.hub_path,
            "hub_name": data.hub_name,
            "files": [],
        }
    if source not in ("offline-wiki", "local"):
        raise ValueError(f"data.source: unknown source {source!r}")
    files = local_files(raw_dir if raw_dir is not None else data.raw_dir)
    stream = read_local_records(files, data.on_bad_record, stats)
    return stream, {"kind": source, "files": [p.name for p in files]}


def open_records(
    data: DataConfig, raw_dir: str | Path | None = None, stats: RecordStats | None = None
) -> tuple[Iterator[dict], dict]:
    """C4 records of the configured source (the first ``data.max_documents`` good
    ones) and the description of the source (:func:`open_stream`)."""
    stream, info = open_stream(data, raw_dir, stats)
    origin = info.get("hub_path") or str(raw_dir or data.raw_dir)
    records = normalize_records(stream, data.max_documents, origin, data.on_bad_record, stats)
    return records, info


def iter_records(
    data: DataConfig, raw_dir: str | Path | None = None, stats: RecordStats | None = None
) -> Iterator[dict]:
    """C4 records of the configured source, the first ``data.max_documents`` good ones."""
    return open_records(data, raw_dir, stats)[0]
