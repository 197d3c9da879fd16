"""Checkpoints that resume exactly, from one process or many.

A checkpoint of round r is a folder ``round-<r>/`` plus the manifest
``checkpoint.json`` that names it. The folder holds ``shared.pt`` (the state
every process holds a replica of: trainers, outer optimizers, samplers,
counters, history; written by rank 0) and one ``rank-<k>.pt`` per process (the
inner optimizer states of the node slots that process runs, and its RNG).
Protocol: every rank writes its files atomically (temporary name, fsync,
rename) with their sha256 beside them (``<file>.sha256``, in ``sha256sum``'s
format), all ranks meet at a barrier, then rank 0 replaces the manifest
atomically, naming the round, every file and its sha256, and the previous
complete round the same way, and only then deletes older round folders. A
kill at any moment leaves the manifest naming a round whose files are all
complete, so every rank resumes from the same complete round; a half-written
newer folder is ignored and overwritten when that round is saved again.
Loading checks every file of the round against its sha256 first: a corrupt
file (a flipped bit, a truncated or replaced file) is named in a warning and
the run resumes from the previous complete round, or, when that one is
corrupt or gone too, is refused with :class:`CorruptCheckpointError` naming
the file (:func:`load`). Files hold only tensors and plain Python containers
and load with ``torch.load(weights_only=True)``, so nothing in a checkpoint
can execute code; a file that holds anything else is refused without being
run. A fingerprint of the run's resolved
settings, the package version and a digest of the package's source guards
against resuming under a changed configuration or changed code: such a
checkpoint is stale (Snakemake re-runs a job whose settings changed), so the
engine moves it to ``<folder>.stale`` and starts over. So is the checkpoint of
a finished run: ``adloco train`` writes ``finished.json`` beside the manifest
once the run's outputs are written, and a new job (``snakemake --forcerun
train``, a changed input) then trains again instead of resuming the last round
and rewriting the same results; a job killed before that mark resumes. Node states
are stored per slot, so a run may resume under another number of processes:
each rank takes the slots it now owns from whichever file holds them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pickle
import re
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import adloco
from adloco.core.io import (
    atomic_path,
    check_only_named,
    read_json_object,
    sha256_file,
    write_json_atomic,
    write_text_atomic,
)
from adloco.engine.checkpoint_lock import LOCK_NAME

log = logging.getLogger(__name__)

MANIFEST_NAME = "checkpoint.json"
SHARED_NAME = "shared.pt"
FINISHED_NAME = "finished.json"
# 2: files carry a sha256, and the manifest names the previous complete round.
FORMAT_VERSION = 2
DIGEST_SUFFIX = ".sha256"
ROUND_DIR = re.compile(r"round-\d{6}")
# What the source digest reads: the package's code and the schema (defaults).
SOURCE_PATTERNS = ("*.py", "*.yaml")


def _digest_of(package: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(
        path
        for pattern in SOURCE_PATTERNS
        for path in package.rglob(pattern)
        if "__pycache__" not in path.parts
    )
    for path in files:
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def source_digest(package: str | Path | None = None) -> str:
    """sha256 over the package's source files (``*.py``, ``*.yaml``), by relative path.

    Read once per process: a run resumes only under the code that wrote its
    checkpoint (a change anywhere in the package counts, which errs on the side
    of starting over).
    """
    if package is None:
        return _installed_digest()
    return _digest_of(Path(package))


@functools.lru_cache(maxsize=1)
def _installed_digest() -> str:
    return _digest_of(Path(adloco.__file__).parent)


def fingerprint(settings: dict) -> str:
    """A stable hash of everything that determines a run's trajectory.

    ``settings`` (the run's resolved configuration, seed, data, ...) plus the
    package version and :func:`source_digest`, so changed code never resumes
    the state that other code wrote.
    """
    code = {"adloco_version": adloco.__version__, "source_sha256": source_digest()}
    blob = json.dumps({"settings": settings, "code": code}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def mark_finished(directory: str | Path, info: dict | None = None) -> Path:
    """Mark the checkpoint folder of a run whose outputs are written: not to be resumed."""
    path = Path(directory) / FINISHED_NAME
    write_json_atomic(path, {"finished": True, **(info or {})})
    return path


def round_dir_name(round_: int) -> str:
    return f"round-{round_:06d}"


def rank_file_name(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


class _HashingWriter:
    """A file object for ``torch.save`` that hashes what it writes and keeps its write error.

    torch turns an error of the file's ``write`` into a RuntimeError of its
    own (``inline_container``) that names neither the file nor the cause; the
    OSError kept here (a full disk) is raised instead.
    """

    def __init__(self, fh):
        self.fh = fh
        self.digest = hashlib.sha256()
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            written = self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise
        self.digest.update(data)
        return written

    def flush(self) -> None:
        self.fh.flush()


def _save_tensor_file(path: Path, obj: dict) -> str:
    """Write ``obj`` to ``path`` atomically with its ``.sha256`` beside it; return the sha256."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            writer = _HashingWriter(fh)
            try:
                torch.save(obj, writer)
            except RuntimeError:
                if writer.error is not None:
                    raise writer.error from None
                raise
            fh.flush()
            os.fsync(fh.fileno())
    digest = writer.digest.hexdigest()
    write_text_atomic(path.with_name(path.name + DIGEST_SUFFIX), f"{digest}  {path.name}\n")
    return digest


def _read_digest(path: Path) -> str:
    """The sha256 a rank wrote beside ``path``."""
    digest_path = path.with_name(path.name + DIGEST_SUFFIX)
    try:
        return digest_path.read_text().split()[0]
    except (OSError, IndexError) as exc:
        raise FileNotFoundError(
            f"{digest_path}: the sha256 of {path.name} is missing (is the checkpoint folder on "
            "a file system every process shares?)"
        ) from exc


def _entry(manifest: dict) -> dict | None:
    """A manifest's round entry (round, dir, files, sha256), or None for a v1 manifest."""
    if "sha256" not in manifest:
        return None
    return {k: manifest[k] for k in ("round", "dir", "files", "sha256")}


def _named_rounds(directory: Path) -> set[str]:
    """The round folders the manifest names (current and previous)."""
    try:
        manifest = read_json_object(directory / MANIFEST_NAME)
    except (OSError, ValueError):
        return set()
    previous = manifest.get("previous") or {}
    return {name for name in (manifest.get("dir"), previous.get("dir")) if name}


def _previous_entry(directory: Path, round_: int) -> dict | None:
    """The newest complete round before ``round_`` that the current manifest names."""
    path = directory / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = read_json_object(path)
    except ValueError:
        return None
    entries = [_entry(manifest), manifest.get("previous")]
    earlier = [e for e in entries if e and isinstance(e, dict) and e.get("round", round_) < round_]
    return max(earlier, key=lambda e: e["round"]) if earlier else None


def save(
    directory: str | Path,
    round_: int,
    fingerprint_: str,
    shared: dict | None,
    local: dict,
    rank: int,
    world_size: int,
    barrier: Callable[[], None],
    identity_: dict | None = None,
) -> Path:
    """Save round ``round_``: call on every rank; ``shared`` is given by rank 0 only.

    ``barrier`` must return on no rank before every rank has written its file
    (and may check that the ranks agree); rank 0 then commits the manifest.
    """
    directory = Path(directory)
    round_dir = directory / round_dir_name(round_)
    round_dir.mkdir(parents=True, exist_ok=True)
    header = {"format_version": FORMAT_VERSION, "fingerprint": fingerprint_, "round": round_}
    if rank == 0 and shared is None:
        raise ValueError("rank 0 must provide the shared state of the checkpoint")
    try:
        if rank == 0:
            _save_tensor_file(round_dir / SHARED_NAME, {**header, **shared})
        _save_tensor_file(round_dir / rank_file_name(rank), {**header, "rank": rank, **local})
    except OSError:
        # A full disk: leave no partial round behind (the manifest still names the last one).
        if rank == 0 and round_dir.name not in _named_rounds(directory):
            shutil.rmtree(round_dir, ignore_errors=True)
        raise
    barrier()
    if rank == 0:
        files = [SHARED_NAME] + [rank_file_name(k) for k in range(world_size)]
        previous = _previous_entry(directory, round_)
        write_json_atomic(
            directory / MANIFEST_NAME,
            {
                **header,
                "dir": round_dir.name,
                "world_size": world_size,
                "files": files,
                "sha256": {name: _read_digest(round_dir / name) for name in files},
                # Kept, so that a corrupt file of this round resumes from that one.
                "previous": previous,
                **({} if identity_ is None else {"identity": identity_}),
            },
        )
        kept = {round_dir.name, previous["dir"] if previous else None}
        for old in directory.iterdir():
            if ROUND_DIR.fullmatch(old.name) and old.is_dir() and old.name not in kept:
                shutil.rmtree(old, ignore_errors=True)
    return round_dir


@dataclass
class Checkpoint:
    """A complete saved round: the shared state and the per-rank files beside it."""

    round: int
    fingerprint: str
    shared: dict
    rank_files: list[Path]

    def local(self, rank: int, wants_slot: Callable[[int], bool]) -> dict:
        """This rank's part: inner states of the slots it owns, and an RNG state.

        The slots are looked up in every rank file (memory-mapped, so only the
        wanted tensors are read), which lets a run resume under a different
        number of processes. The RNG state is this rank's own when it had one,
        else rank 0's.
        """
        nodes: dict[int, list[dict] | None] = {}
        rng = None
        for path in self.rank_files:
            part = _check_header(path, _load(path, mmap=True), self.round, self.fingerprint)
            for node in part["nodes"]:
                if wants_slot(node["slot"]):
                    nodes[node["slot"]] = _materialise(node["inner_state"])
            if part["rank"] == rank or (rng is None and part["rank"] == 0):
                rng = part["rng"].clone()
        return {"nodes": nodes, "rng": rng}


def _materialise(inner_state: list[dict] | None) -> list[dict] | None:
    # Memory-mapped tensors would alias the file; the optimizer updates them in place.
    if inner_state is None:
        return None
    return [{k: v.clone() for k, v in s.items()} for s in inner_state]


class StaleCheckpointError(ValueError):
    """The checkpoint belongs to another configuration, run, seed, format or code, or finished."""


class CorruptCheckpointError(ValueError):
    """A checkpoint file does not match its sha256, or is not a checkpoint adloco wrote."""


# What a checkpoint folder holds, all written by the engine or pretraining: the
# manifest, the finished mark, the metrics rows, each round's files with their
# sha256, and what a killed atomic write leaves (``.<name>.<random>.tmp``).
CHECKPOINT_FILES = (
    "checkpoint.json",
    "finished.json",
    "metrics.jsonl",
    "round-[0-9]*/shared.pt",
    "round-[0-9]*/rank-[0-9]*.pt",
    "round-[0-9]*/*.pt.sha256",
    ".*.tmp",
    "round-[0-9]*/.*.tmp",
    LOCK_NAME,
)


def check_folder(directory: str | Path, what: str = "--checkpoints") -> None:
    """Refuse a checkpoint folder that holds files adloco did not write (before any work).

    A stale checkpoint is moved aside and a finished one trained over: a
    user's file in the folder would go with it.
    """
    check_only_named(directory, CHECKPOINT_FILES, what)


def set_aside(directory: str | Path) -> Path:
    """Move a stale checkpoint to ``<folder>.stale`` (replacing an older one); return that.

    An existing ``<folder>.stale`` is deleted only when it holds nothing but a
    checkpoint's files: a user's own folder of that name is refused, named.
    Only a run's own (checkpoint_identity); its lock file stays, the manifest moves first.
    """
    directory = Path(directory)
    stale = directory.with_name(directory.name + ".stale")
    check_only_named(stale, CHECKPOINT_FILES, "the stale checkpoint's place")
    shutil.rmtree(stale, ignore_errors=True)
    stale.mkdir()
    for old in sorted(directory.iterdir(), key=lambda p: (p.name != MANIFEST_NAME, p.name)):
        if old.name != LOCK_NAME:
            os.replace(old, stale / old.name)
    return stale


def _load(path: Path, mmap: bool = False) -> dict:
    """A checkpoint file's content; one line naming the file when it is not one adloco wrote."""
    # torch's own messages mislead here: an mmap hint for a file that is no
    # archive, and for a file holding other objects, advice to load it with
    # weights_only=False, which would run whatever it holds.
    if not zipfile.is_zipfile(path):
        raise CorruptCheckpointError(
            f"{path}: not a checkpoint adloco wrote (not a PyTorch zip archive: truncated, "
            "overwritten or another kind of file)"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise CorruptCheckpointError(
            f"{path}: holds objects other than tensors and plain containers, which adloco never "
            "writes; refused without loading them (loading could run code)"
        ) from exc
    except Exception as exc:  # noqa: BLE001 (any other way the archive is broken)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptCheckpointError(f"{path}: unreadable checkpoint ({reason})") from exc
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"{path}: not a checkpoint adloco wrote (no mapping)")
    return state


def _verify(round_dir: Path, entry: dict) -> str | None:
    """Why the files of a round do not match their sha256 in the manifest, or None."""
    for name in entry["files"]:
        path = round_dir / name
        digest = sha256_file(path)
        expected = entry["sha256"].get(name)
        if digest != expected:
            return (
                f"{path}: sha256 {digest[:16]}... does not match the manifest's "
                f"{str(expected)[:16]}...: the file is corrupt"
            )
    return None


def _open_round(directory: Path, entry: dict, expected_fingerprint: str) -> Checkpoint:
    """A verified round of the manifest; CorruptCheckpointError when it is not intact."""
    round_dir = directory / entry["dir"]
    paths = [round_dir / name for name in entry["files"]]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        # With several machines, every rank must see the folder rank 0 wrote.
        raise FileNotFoundError(
            f"{directory / MANIFEST_NAME} names files this process cannot see: "
            f"{', '.join(missing)} (is the checkpoint folder on a file system every process "
            "shares?)"
        )
    problem = _verify(round_dir, entry)
    if problem is not None:
        raise CorruptCheckpointError(problem)
    shared = _check_header(paths[0], _load(paths[0]), entry["round"], expected_fingerprint)
    for path in paths[1:]:
        # Opened now (memory-mapped: the headers only), so that a file that is
        # no checkpoint gives way to the previous round here, not in local().
        _check_header(path, _load(path, mmap=True), entry["round"], expected_fingerprint)
    return Checkpoint(entry["round"], expected_fingerprint, shared, paths[1:])


def _read_manifest(directory: Path) -> dict:
    """The manifest of ``directory``; one that does not read is refused saying what to do.

    It is replaced atomically, so one that does not read was damaged afterwards,
    and it alone says which round folder is whole.
    """
    return read_json_object(
        directory / MANIFEST_NAME,
        error=CorruptCheckpointError,
        fix=f"move {directory} away (or delete it) to train this run from the start",
    )


def load(
    directory: str | Path, expected_fingerprint: str, finished_ok: bool = False
) -> Checkpoint | None:
    """The last complete, intact round, or None if there is none.

    A finished run's folder is stale unless ``finished_ok``: then its last
    round is returned like any other (same fingerprint required).

    A checkpoint of another configuration, run, seed, format or code raises
    :class:`StaleCheckpointError`. A round whose files do not match their
    sha256, or are not checkpoints, gives way to the previous complete round
    the manifest names (with a warning naming the file); with none intact,
    :class:`CorruptCheckpointError` names the file and what to do.
    """
    directory = Path(directory)
    manifest_path = directory / MANIFEST_NAME
    finished = directory / FINISHED_NAME
    if finished.exists() and not finished_ok:
        raise StaleCheckpointError(
            f"{finished}: the run of this checkpoint finished and wrote its outputs; "
            "a new job trains it again"
        )
    if not manifest_path.exists():
        return None
    manifest = _read_manifest(directory)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise StaleCheckpointError(
            f"{manifest_path}: checkpoint format {manifest.get('format_version')} is not "
            f"{FORMAT_VERSION}"
        )
    if manifest.get("fingerprint") != expected_fingerprint:
        raise StaleCheckpointError(
            f"{manifest_path}: checkpoint was written under a different configuration, run, "
            "seed or code"
        )
    entries = [_entry(manifest), manifest.get("previous")]
    problems = []
    for entry in (e for e in entries if e):
        try:
            saved = _open_round(directory, entry, expected_fingerprint)
        except (CorruptCheckpointError, FileNotFoundError) as exc:
            # A file of the last round this process cannot see is no corruption
            # (a folder not shared by every machine): say so, do not fall back.
            if isinstance(exc, FileNotFoundError) and not problems:
                raise
            problems.append(str(exc))
            continue
        if problems:
            log.warning(
                "%s; resuming from the previous checkpoint, round %d", problems[0], saved.round
            )
        return saved
    raise CorruptCheckpointError(
        f"{problems[0] if problems else manifest_path}; no intact earlier round is kept: move "
        f"{directory} away (or delete it) to train this run from the start"
    )


def _check_header(path: Path, state: dict, round_: int, expected_fingerprint: str) -> dict:
    if state.get("round") != round_ or state.get("fingerprint") != expected_fingerprint:
        raise CorruptCheckpointError(f"{path}: does not belong to round {round_} of this run")
    return state
