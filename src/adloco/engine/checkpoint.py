"""Checkpoints that resume exactly, from one process or many.

A checkpoint of round r is a folder ``round-<r>/`` plus the manifest
``checkpoint.json`` that names it. The folder holds ``shared.pt`` (the state
every process holds a replica of: trainers, outer optimizers, samplers,
counters, history; written by rank 0) and one ``rank-<k>.pt`` per process (the
inner optimizer states of the node slots that process runs, and its RNG).
Protocol: every rank writes its files atomically (temporary name, fsync,
rename), all ranks meet at a barrier, then rank 0 replaces the manifest
atomically and only then deletes older round folders. A kill at any moment
leaves the manifest naming a round whose files are all complete, so every rank
resumes from the same complete round; a half-written newer folder is ignored
and overwritten when that round is saved again. Files hold only tensors and
plain Python containers and load with ``torch.load(weights_only=True)``, so
nothing in a checkpoint can execute code. A fingerprint of the run's resolved
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
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import adloco
from adloco.io import atomic_path, read_json_object, write_json_atomic

MANIFEST_NAME = "checkpoint.json"
SHARED_NAME = "shared.pt"
FINISHED_NAME = "finished.json"
FORMAT_VERSION = 1
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


def _save_tensor_file(path: Path, obj: dict) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())


def save(
    directory: str | Path,
    round_: int,
    fingerprint_: str,
    shared: dict | None,
    local: dict,
    rank: int,
    world_size: int,
    barrier: Callable[[], None],
) -> Path:
    """Save round ``round_``: call on every rank; ``shared`` is given by rank 0 only.

    ``barrier`` must return on no rank before every rank has written its file
    (and may check that the ranks agree); rank 0 then commits the manifest.
    """
    directory = Path(directory)
    round_dir = directory / round_dir_name(round_)
    round_dir.mkdir(parents=True, exist_ok=True)
    header = {"format_version": FORMAT_VERSION, "fingerprint": fingerprint_, "round": round_}
    if rank == 0:
        if shared is None:
            raise ValueError("rank 0 must provide the shared state of the checkpoint")
        _save_tensor_file(round_dir / SHARED_NAME, {**header, **shared})
    _save_tensor_file(round_dir / rank_file_name(rank), {**header, "rank": rank, **local})
    barrier()
    if rank == 0:
        write_json_atomic(
            directory / MANIFEST_NAME,
            {
                **header,
                "dir": round_dir.name,
                "world_size": world_size,
                "files": [SHARED_NAME] + [rank_file_name(k) for k in range(world_size)],
            },
        )
        for old in directory.glob("round-*"):
            if old.is_dir() and old.name != round_dir.name:
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


def set_aside(directory: str | Path) -> Path:
    """Move a stale checkpoint folder to ``<folder>.stale`` (replacing an older one)."""
    directory = Path(directory)
    stale = directory.with_name(directory.name + ".stale")
    shutil.rmtree(stale, ignore_errors=True)
    os.replace(directory, stale)
    directory.mkdir(parents=True)
    return stale


def _load(path: Path, mmap: bool = False) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # a truncated or foreign file
        raise ValueError(f"{path}: unreadable checkpoint ({exc}); delete it to start over") from exc


def load(directory: str | Path, expected_fingerprint: str) -> Checkpoint | None:
    """The last complete round, or None if there is none; an error if from another config."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST_NAME
    finished = directory / FINISHED_NAME
    if finished.exists():
        raise StaleCheckpointError(
            f"{finished}: the run of this checkpoint finished and wrote its outputs; "
            "a new job trains it again"
        )
    if not manifest_path.exists():
        return None
    manifest = read_json_object(manifest_path)
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
    round_dir = directory / manifest["dir"]
    paths = [round_dir / name for name in manifest["files"]]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        # With several machines, every rank must see the folder rank 0 wrote.
        raise FileNotFoundError(
            f"{manifest_path} names files this process cannot see: {', '.join(missing)} "
            "(is the checkpoint folder on a file system every process shares?)"
        )
    shared = _check_header(paths[0], _load(paths[0]), manifest["round"], expected_fingerprint)
    return Checkpoint(manifest["round"], expected_fingerprint, shared, paths[1:])


def _check_header(path: Path, state: dict, round_: int, expected_fingerprint: str) -> dict:
    if state.get("round") != round_ or state.get("fingerprint") != expected_fingerprint:
        raise ValueError(f"{path}: does not belong to round {round_} of this run")
    return state
