"""Atomic file output and checksums.

Every stage writes its outputs through these helpers: a file is written to a
temporary name in the same folder and renamed into place, so a killed job never
leaves a half-written output that a later stage or Snakemake would trust. What a
killed writer does leave, its temporary ``.<name>.<random>.tmp`` (and, for a
folder, the ``.<name>.old`` of a swap cut between its two renames), is removed
by the next write of the same output: one job writes an output at a time
(Snakemake and DVC see to that), so such a sibling belongs to no live writer.

A folder is replaced as a whole only when adloco wrote everything in it: each
folder :func:`atomic_dir` writes lists its files in ``.adloco-output.json``,
and a folder that holds anything else (a home folder given as an output, a
file a user added) is refused by :func:`check_replaceable` before any work.
A stage that writes only some files of a folder writes them beside it and
moves them in once all are written (:func:`atomic_files`). An output that
cannot be written (no space left, a read-only folder) raises an ``OSError``
that names the output, not a temporary.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Written into every folder atomic_dir writes: the files adloco put there.
OWNED_LIST = ".adloco-output.json"
# What the workflow's tools put into an output folder (Snakemake's time stamp of
# a directory output) and what check_writable's probe may leave after a kill:
# replaced with the folder like adloco's own files.
BOOKKEEPING = (".snakemake_timestamp", ".adloco-write-check.*")
# Examples quoted when a folder holds files adloco did not write.
EXAMPLES_SHOWN = 3


class ForeignFolderError(ValueError):
    """An output folder holds files adloco did not write; replacing it would delete them."""


class NotWritableError(ValueError):
    """An output folder cannot be written (permissions, a read-only file system, no space)."""


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


def _files_in(folder: Path) -> list[str]:
    """Every file (and link) under ``folder``, as sorted relative POSIX paths."""
    found = []
    for root, dirs, files in os.walk(folder):
        names = files + [d for d in dirs if os.path.islink(os.path.join(root, d))]
        found += [Path(root, n).relative_to(folder).as_posix() for n in names]
    return sorted(found)


def _listed(folder: Path) -> set[str]:
    try:
        listed = json.loads((folder / OWNED_LIST).read_text()).get("files", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {str(name) for name in listed} if isinstance(listed, list) else set()


def check_replaceable(path: str | Path, own: Iterable[str] = (), what: str = "") -> None:
    """Refuse to replace ``path`` unless every file in it is one adloco wrote.

    A missing or empty folder may be written. Otherwise each of its files must
    be listed in its ``.adloco-output.json`` or match one of the glob patterns
    ``own`` (the names the writing stage gives its files, which also covers
    folders written before the list existed). ``what`` names the setting or
    argument that chose ``path``, for the message.
    """
    path = Path(path)
    where = f"{what} {path}" if what else str(path)
    if not os.path.lexists(path):
        return
    if not path.is_dir() or path.is_symlink():
        raise ForeignFolderError(
            f"{where}: exists and is not a folder adloco wrote; choose a new or empty folder"
        )
    listed = _listed(path) | {OWNED_LIST}

    def owned(name: str) -> bool:
        # The tools' bookkeeping at any depth (Snakemake stamps a directory output
        # inside it, e.g. the report's figures/.snakemake_timestamp).
        base = name.rsplit("/", 1)[-1]
        return (
            name in listed
            or any(fnmatch.fnmatchcase(name, p) for p in own)
            or any(fnmatch.fnmatchcase(base, p) for p in BOOKKEEPING)
        )

    foreign = [name for name in _files_in(path) if not owned(name)]
    if foreign:
        shown = ", ".join(foreign[:EXAMPLES_SHOWN]) + (", ..." if len(foreign) > 3 else "")
        raise ForeignFolderError(
            f"{where}: holds {len(foreign)} file(s) adloco did not write ({shown}), which "
            "writing this output would delete; choose a new or empty folder, or move them out"
        )


def _with_name(exc: OSError, path: Path, tmp: Path | None = None) -> OSError:
    """``exc`` naming ``path`` (the output), not the temporary it was written under."""
    name = exc.filename
    if name is None or _temporary_name(path.name).fullmatch(Path(name).name):
        name = path
    elif tmp is not None:
        try:
            name = path / Path(name).relative_to(tmp)
        except ValueError:
            pass
    return type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno or 0), str(name))


@contextmanager
def naming_output(path: str | Path, tmp: str | Path | None = None) -> Iterator[None]:
    """Re-raise an ``OSError`` of writing ``path`` (under ``tmp``) with ``path`` as its file."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None or isinstance(exc, FileNotFoundError):
            raise
        raise _with_name(exc, Path(path), Path(tmp) if tmp else None) from exc


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` on success."""
    path = Path(path)
    with naming_output(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    tmp_path = Path(tmp)
    try:
        with naming_output(path, tmp_path):
            yield tmp_path
            # mkstemp makes the file private; give it the permissions of a plain open().
            os.chmod(tmp_path, 0o666 & ~_umask())
            os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _temporary_beside(path: Path) -> Path:
    """A new temporary folder beside ``path`` (a killed run's old ones removed first)."""
    with naming_output(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        return Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))


@contextmanager
def atomic_dir(path: str | Path, own: Iterable[str] = (), what: str = "") -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; swap it into place on success.

    An existing ``path`` is replaced only if adloco wrote all of it
    (:func:`check_replaceable`, with ``own`` and ``what``), checked before the
    work; the new folder lists its files in ``.adloco-output.json``.
    """
    path = Path(path)
    check_replaceable(path, own, what)
    tmp = _temporary_beside(path)
    try:
        with naming_output(path, tmp):
            yield tmp
            files = [name for name in _files_in(tmp) if name != OWNED_LIST]
            (tmp / OWNED_LIST).write_text(json.dumps({"files": files}, indent=1) + "\n")
            os.chmod(tmp, 0o777 & ~_umask())
            # Checked again: a folder that appeared or changed during the work.
            check_replaceable(path, own, what)
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


@contextmanager
def atomic_files(folder: str | Path, names: Iterable[str]) -> Iterator[Path]:
    """Yield a temporary folder beside ``folder``; on success move ``names`` from it there.

    For a stage that writes some files of a folder it does not own as a whole
    (``adloco regimes`` into a replay folder or a report). ``names`` are
    relative paths: each one written under the temporary folder replaces its
    namesake in ``folder``, and one not written is removed from ``folder`` (it
    would no longer match the others); nothing else in ``folder`` is touched.
    A failure while writing (a full disk) leaves ``folder`` as it was: the
    files are only moved in once all are written, by renames within one file
    system, which need no space.
    """
    folder, names = Path(folder), list(names)
    tmp = _temporary_beside(folder)
    try:
        with naming_output(folder, tmp):
            yield tmp
            for name in names:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
        for name in names:
            if (tmp / name).is_file():
                os.replace(tmp / name, folder / name)
            else:
                (folder / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def set_plain_modes(folder: str | Path) -> None:
    """Give every file under ``folder`` the mode a plain ``open()`` gives it (0666 less the umask).

    For files that other libraries write through a private temporary
    (safetensors' ``save_file`` leaves its file 0600).
    """
    mode = 0o666 & ~_umask()
    for name in _files_in(Path(folder)):
        path = Path(folder, name)
        if not path.is_symlink():
            os.chmod(path, mode)


def check_writable(folder: str | Path, what: str) -> None:
    """Prove, before any work, that files can be written in ``folder`` (created later if need be).

    A real write, not ``os.access``: permission bits do not stop root, and a
    read-only mount or a full quota stops everyone. The probe goes into the
    folder, or into its nearest existing parent where the folder is still to
    be created, and is removed: nothing is left behind. ``what`` names the
    argument or setting for the message.
    """
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "not a folder", str(existing))
        fd, probe = tempfile.mkstemp(prefix=".adloco-write-check.", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = folder if existing == folder else f"{folder} (in {existing})"
        raise NotWritableError(
            f"{what} {where}: cannot write there ({reason}); make it writable or choose "
            "another folder"
        ) from exc


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


# What to do about a JSON file adloco wrote that no longer reads, unless the caller knows better.
REWRITE_FIX = "write it again with the adloco stage that made it"


def read_json_object(
    path: str | Path,
    missing: str | None = None,
    error: type[ValueError] = ValueError,
    fix: str = REWRITE_FIX,
) -> dict:
    """A JSON file that must hold an object; one-line errors that name the file and ``fix``.

    ``missing`` is the message when the file does not exist (default: "<path>:
    not found"); a file that is not JSON (truncated, binary, nested too deeply
    for the parser) or not an object raises ``error``, its message ending in
    ``fix``: what to do.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(missing or f"{path}: not found")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc}); {fix}") from None
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not a JSON text file (byte {exc.start} is not UTF-8); {fix}"
        ) from None
    except RecursionError:
        raise error(f"{path}: nests too deeply to read as JSON; {fix}") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: expected a JSON object; {fix}")
    return obj


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()
