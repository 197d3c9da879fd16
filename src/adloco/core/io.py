"""Atomic file output and checksums.

Every stage writes its outputs through these helpers: a file is written to a
temporary name in the same folder and renamed into place, so a killed job never
leaves a half-written output that a later stage or Snakemake would trust. What a
killed writer does leave, its temporary ``.<name>.<8 characters>.tmp`` (for a
folder also the old copy of a swap cut between its two renames, kept under such
a name), is removed by the next write of the same output: one job writes an
output at a time (Snakemake and DVC see to that), so such a sibling belongs to
no live writer. adloco marks its temporaries' names (:func:`_temporary_name`),
so a user's file of a similar name beside an output, a ``.<name>.old`` or a
hand-named ``.<name>.abcdefgh.tmp``, is never removed.

A folder is replaced as a whole only when adloco wrote everything in it, as
stated in the manifest each folder :func:`atomic_dir` writes,
``.adloco-output.json`` (the rule: :func:`check_replaceable`); a folder that
holds anything else (a home folder given as an output, a file a user added or
changed, another stage's output) is refused before any work. An output that
cannot be written (no space left, a read-only folder) raises an ``OSError``
that names the output, not a temporary."""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Written into every folder atomic_dir writes: which stage wrote it, and each of its files.
OWNED_LIST = ".adloco-output.json"
# What the workflow's tools put into an output folder (Snakemake's time stamp of
# a directory output) and what check_writable's probe may leave after a kill:
# replaced with the folder like adloco's own files.
BOOKKEEPING = (".snakemake_timestamp", ".adloco-write-check.*")
# Examples quoted when a folder holds files adloco did not write.
EXAMPLES_SHOWN = 3
# A temporary's 8 characters: 4 random ones, then 4 that only adloco derives from them.
RANDOM_CHARS = 4
CHECK_CHARS = 4
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# What to do about files, or a whole folder, adloco may not replace.
MOVE_OUT = "move them out, or choose a new or empty folder"
MOVE_FOLDER = (
    "choose a new or empty folder, or, if it is an older adloco's output, move or delete it "
    "(adloco writes it again)"
)


class ForeignFolderError(ValueError):
    """An output folder holds files adloco did not write; replacing it would delete them."""


class NotWritableError(ValueError):
    """An output folder cannot be written (permissions, a read-only file system, no space)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temporary_name(name: str) -> re.Pattern:
    # Any temporary of ``name``: its prefix, 8 characters of [a-z0-9_], its suffix.
    return re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.tmp")


def _check_of(name: str, chosen: str) -> str:
    """The 4 characters adloco appends to the random ``chosen`` ones of a temporary of ``name``."""
    digest = hashlib.sha256(f"adloco temporary\0{name}\0{chosen}".encode()).hexdigest()
    return digest[:CHECK_CHARS]


def is_own_temporary(name: str, sibling: str) -> bool:
    """Whether ``sibling`` is a temporary adloco made for an output called ``name``.

    Its name is ``.<name>.<4 random characters><their check>.tmp``: a user's
    file of that shape carries the right check once in 65,536 random tries,
    and no one names a file ``.summary.json.k3x9....tmp`` by chance.
    """
    match = re.fullmatch(
        rf"\.{re.escape(name)}\.([a-z0-9]{{{RANDOM_CHARS}}})([0-9a-f]{{{CHECK_CHARS}}})\.tmp",
        sibling,
    )
    return match is not None and match[2] == _check_of(name, match[1])


def _new_temporary(path: Path, folder: bool) -> Path:
    """A new temporary file (mode 0600) or folder (0700) beside ``path``, named as adloco's."""
    chooser = random.SystemRandom()
    for _ in range(1000):
        chosen = "".join(chooser.choice(ALPHABET) for _ in range(RANDOM_CHARS))
        tmp = path.with_name(f".{path.name}.{chosen}{_check_of(path.name, chosen)}.tmp")
        try:
            if folder:
                os.mkdir(tmp, 0o700)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name beside it", str(path))


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove what killed writers of ``path`` left beside it; return the removed paths.

    Only adloco's own temporaries (:func:`is_own_temporary`): a user's
    ``.<name>.old`` or ``.<name>.abcdefgh.tmp`` is kept.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    removed = []
    for sibling in path.parent.iterdir():
        if is_own_temporary(path.name, sibling.name):
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


def _size_bytes(path: Path) -> int:
    """The size of the file ``path`` (of what a link points to; of the link when it dangles)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return os.lstat(path).st_size


def _is_bookkeeping(name: str) -> bool:
    # The tools' bookkeeping at any depth (Snakemake stamps a directory output
    # inside it, e.g. the report's figures/.snakemake_timestamp).
    base = name.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(base, p) for p in BOOKKEEPING)


def manifest_of(folder: str | Path, writer: str) -> dict:
    """The manifest :func:`atomic_dir` writes into ``folder``: ``writer`` and each file's size.

    ``{"written_by": "adloco <stage>", "files": {"<relative path>":
    {"size_bytes": <n>}, ...}}``, every file under ``folder`` but the
    manifest itself.
    """
    folder = Path(folder)
    files = {
        name: {"size_bytes": _size_bytes(folder / name)}
        for name in _files_in(folder)
        if name != OWNED_LIST
    }
    return {"written_by": writer, "files": files}


def write_manifest(folder: str | Path, writer: str) -> Path:
    """Write ``folder``'s manifest (:func:`manifest_of`): everything in it is ``writer``'s."""
    path = Path(folder) / OWNED_LIST
    write_text_atomic(path, json.dumps(manifest_of(folder, writer), indent=1) + "\n")
    return path


def _read_manifest(folder: Path) -> tuple[dict | None, str]:
    """``folder``'s manifest, or None and why it is not one adloco wrote ("" when missing)."""
    path = folder / OWNED_LIST
    if not path.is_file() or path.is_symlink():
        return None, "" if not os.path.lexists(path) else "not a plain file"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None, "it does not read as JSON"
    if isinstance(manifest, dict) and "written_by" not in manifest:
        return None, "an older adloco's list, naming neither its writer nor the sizes"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("written_by"), str):
        return None, "it names no writer"
    if not manifest["written_by"].startswith("adloco "):
        return None, f"it names {manifest['written_by']!r} as its writer"
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(entry, dict) and type(entry.get("size_bytes")) is int for entry in files.values()
    ):
        return None, "it lists no size for each file"
    return manifest, ""


def _examples(names: list[str]) -> str:
    return ", ".join(names[:EXAMPLES_SHOWN]) + (", ..." if len(names) > EXAMPLES_SHOWN else "")


def _existing_folder(path: Path, what: str) -> str | None:
    """``path`` named for a message if it is a real folder, None if absent; else refused."""
    where = f"{what} {path}" if what else str(path)
    if not os.path.lexists(path):
        return None
    if not path.is_dir() or path.is_symlink():
        raise ForeignFolderError(
            f"{where}: exists and is not a folder adloco wrote; choose a new or empty folder"
        )
    return where


def check_replaceable(
    path: str | Path, writer: str, what: str = "", in_git: Iterable[str] = ()
) -> None:
    """Refuse to replace ``path`` unless ``writer`` wrote every file in it.

    The rule: a missing folder, or one that holds nothing but the tools'
    bookkeeping (``BOOKKEEPING``), may be written. Otherwise the folder's
    ``.adloco-output.json`` must be a manifest adloco wrote (:func:`manifest_of`)
    whose ``written_by`` is ``writer`` (``"adloco <stage>"``: a stage never
    replaces another stage's output, a base model given as ``data.raw_dir``),
    and every file in the folder must be listed there with the size it has
    now: a file added, or changed in size since, is the user's. A listed file
    that is gone is no loss. A hand-made list (no writer, no sizes) is refused,
    and so is a folder without one (a folder of the user's, or one an older
    adloco wrote before manifests named their writer: move or delete it). A
    file edited in place to the very same size passes: sizes are what adloco
    can check without reading gigabytes of models at every run. ``in_git``
    names (relative paths, not patterns) the files of the stage that git keeps
    (the report's ``metrics.json``): a clone holds them without the manifest,
    and a checkout of another commit changes them, so they are accepted as
    they are; git holds every committed version. ``what`` names the setting
    or argument that chose ``path``, for the message.
    """
    path = Path(path)
    where = _existing_folder(path, what)
    if where is None:
        return
    problem = _ownership_problem(path, writer, set(in_git))
    if problem is not None:
        raise ForeignFolderError(f"{where}: {problem}")


def _ownership_problem(path: Path, writer: str, in_git: set[str]) -> str | None:
    """Why ``writer`` may not replace the folder ``path`` (:func:`check_replaceable`), or None."""
    present = [n for n in _files_in(path) if not _is_bookkeeping(n) and n not in in_git]
    if not present:
        return None
    manifest, why = _read_manifest(path)
    if manifest is None and not why:
        return (
            f"holds {len(present)} file(s) adloco did not write ({_examples(present)}) and no "
            f"{OWNED_LIST}, adloco's list of what it wrote (a folder of yours, or the output of "
            f"an adloco older than that list), which writing this output would delete; "
            f"{MOVE_FOLDER}"
        )
    if manifest is None:
        return (
            f"its {OWNED_LIST} is not a list adloco wrote ({why}), so its {len(present)} "
            f"file(s) ({_examples(present)}) are not known to be adloco's and writing this "
            f"output would delete them; {MOVE_FOLDER}"
        )
    others = [name for name in present if name != OWNED_LIST]
    if manifest["written_by"] != writer:
        return (
            f"written by {manifest['written_by']}, not {writer} (its {OWNED_LIST}), so writing "
            f"this output would delete another stage's output ({_examples(others)}); choose "
            "another folder"
        )
    listed = manifest["files"]
    foreign = [name for name in others if name not in listed]
    if foreign:
        return (
            f"holds {len(foreign)} file(s) adloco did not write ({_examples(foreign)}), which "
            f"writing this output would delete; {MOVE_OUT}"
        )
    changed = [name for name in others if _size_bytes(path / name) != listed[name]["size_bytes"]]
    if changed:
        name = changed[0]
        return (
            f"{len(changed)} file(s) changed since {writer} wrote them ({_examples(changed)}; "
            f"{name} is {_size_bytes(path / name)} bytes, listed at "
            f"{listed[name]['size_bytes']}), which writing this output would delete; {MOVE_OUT}"
        )
    return None


def check_only_named(path: str | Path, names: Iterable[str], what: str = "") -> None:
    """Refuse ``path`` unless each of its files matches one of the glob patterns ``names``.

    For the one folder adloco writes file by file over a whole run, never as a
    whole, so that no manifest lists it: a checkpoint folder, whose round
    files the checkpoint's own manifest names with their sha256. Every folder
    :func:`atomic_dir` writes is checked by its manifest instead
    (:func:`check_replaceable`).
    """
    path = Path(path)
    where = _existing_folder(path, what)
    if where is None:
        return
    patterns = tuple(names)
    foreign = [
        name
        for name in _files_in(path)
        if not _is_bookkeeping(name) and not any(fnmatch.fnmatchcase(name, p) for p in patterns)
    ]
    if foreign:
        raise ForeignFolderError(
            f"{where}: holds {len(foreign)} file(s) adloco did not write ({_examples(foreign)}), "
            f"which writing this output would delete; {MOVE_OUT}"
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
        tmp_path = _new_temporary(path, folder=False)
    try:
        with naming_output(path, tmp_path):
            yield tmp_path
            # A new temporary is private; give it the permissions of a plain open().
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
        return _new_temporary(path, folder=True)


@contextmanager
def atomic_dir(
    path: str | Path, writer: str, what: str = "", in_git: Iterable[str] = ()
) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; swap it into place on success.

    ``writer`` is the stage, ``"adloco <stage>"``. An existing ``path`` is
    replaced only if that stage wrote all of it (:func:`check_replaceable`,
    with ``what`` and ``in_git``), checked before the work and again before the swap; the new
    folder carries its manifest (:func:`manifest_of`). The old folder is moved
    to a temporary name of its own before the new one takes its place, so a
    swap killed between the two renames leaves it to the next write's clean-up.
    """
    path, in_git = Path(path), tuple(in_git)
    check_replaceable(path, writer, what, in_git)
    tmp = _temporary_beside(path)
    try:
        with naming_output(path, tmp):
            yield tmp
            write_manifest(tmp, writer)
            os.chmod(tmp, 0o777 & ~_umask())
            # Checked again: a folder that appeared or changed during the work.
            check_replaceable(path, writer, what, in_git)
        if path.exists():
            old = _new_temporary(path, folder=True)
            try:
                os.replace(path, old)  # onto the empty folder: one rename
                os.replace(tmp, path)
            finally:
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
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
