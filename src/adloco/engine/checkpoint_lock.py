"""One trainer per checkpoint folder: an exclusive lock that the kernel releases.

Two ``adloco train`` on the same folders would append their rounds to the
same ``metrics.jsonl`` and save over each other's rounds: one crashes, the
other ends with rows duplicated and out of order. So a trainer takes
``fcntl.flock`` on ``<checkpoints>/.adloco.lock`` before any work and holds
it to its end; a second one fails at once, in one line naming the folder and
the pid (and host) the holder recorded in the file.

The lock sits in the checkpoint folder, not in ``--out``: the run folder is
written beside itself and swapped in whole (:func:`adloco.core.io.atomic_dir`),
which would replace a lock file inside it, while the checkpoint folder stays
in place (:func:`adloco.engine.checkpoint.set_aside` moves its contents, not
the lock file). The holder also records the ``--out`` it writes, so a second
trainer's message names both. A ``flock`` belongs to the open file: a process
killed by any signal, even ``kill -9``, holds it no longer, so no stale lock
is left to clear by hand. The file itself is never deleted (deleting it on
release would let a second process lock the deleted file while a third
creates a new one). Under torchrun only rank 0 takes it: the ranks of one job
share the folder by design, and a second job's rank 0 fails, which ends its
other ranks (:mod:`adloco.engine.distributed`).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

LOCK_NAME = ".adloco.lock"


class FolderLockedError(ValueError):
    """Another process holds the checkpoint folder's lock: it is training into that folder."""


class FolderLock:
    """A held lock on a checkpoint folder; :meth:`release` (or leaving ``with``) lets it go."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops the flock
            self._fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(path: Path) -> str:
    """Who holds the lock, as its file records it ('' when it cannot be read)."""
    try:
        record = json.loads(path.read_text())
        where = f"pid {int(record['pid'])} on {record['host']}"
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    out = record.get("out")
    return f" ({where}, writing --out {out})" if out else f" ({where})"


def lock(directory: str | Path, out: str | Path | None = None) -> FolderLock:
    """Take the exclusive lock of the checkpoint folder ``directory`` (created if need be).

    ``out``: the run folder this trainer writes, recorded for the message a
    second trainer gets. Raises :class:`FolderLockedError` at once when another
    process holds the lock.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderLockedError(
            f"--checkpoints {directory}: another `adloco train`{_holder(path)} is writing it; "
            "let it finish or stop it before training into this folder (two trainers on one "
            "folder would mix their rounds)"
        ) from None
    except OSError:
        os.close(fd)
        raise
    record = {"pid": os.getpid(), "host": socket.gethostname(), "out": None}
    if out is not None:
        record["out"] = str(out)
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return FolderLock(path, fd)
