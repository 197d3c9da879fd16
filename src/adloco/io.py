"""Atomic file output and checksums.

Every stage writes its outputs through these helpers: a file is written to a
temporary name in the same folder and renamed into place, so a killed job never
leaves a half-written output that a later stage or Snakemake would trust. What a
killed writer does leave, its temporary ``.<name>.<random>.tmp`` (and, for a
folder, the ``.<name>.old`` of a swap cut between its two renames), is removed
by the next write of the same output: one job writes an output at a time
(Snakemake and DVC see to that), so such a sibling belongs to no live writer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temporary_name(name: str) -> re.Pattern:
    # tempfile.mkstemp/mkdtemp names: prefix, 8 characters of [a-z0-9_], suffix.
    return re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.tmp")


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove what killed writers of ``path`` left beside it; return the removed paths."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    pattern = _temporary_name(path.name)
    removed = []
    for sibling in path.parent.iterdir():
        if pattern.fullmatch(sibling.name) or sibling.name == f".{path.name}.old":
            if sibling.is_dir() and not sibling.is_symlink():
                shutil.rmtree(sibling, ignore_errors=True)
            else:
                sibling.unlink(missing_ok=True)
            removed.append(sibling)
    return removed


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes the file private; give it the permissions of a plain open().
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; swap it into place on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json_object(
    path: str | Path, missing: str | None = None, error: type[ValueError] = ValueError
) -> dict:
    """A JSON file that must hold an object; clear errors that name the file.

    ``missing`` is the message when the file does not exist (default: "<path>:
    not found"); a file that is not JSON or not an object raises ``error``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(missing or f"{path}: not found")
    try:
        obj = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise error(f"{path}: expected a JSON object")
    return obj


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()
