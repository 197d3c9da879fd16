"""Live curves: a training job's metrics as TensorBoard scalars, readable while it runs.

``adloco train --live DIR`` and ``adloco pretrain --live DIR`` add each
round's summary (each evaluation's, for the base model) to a TensorBoard event
file in DIR and flush it at once, so ``tensorboard --logdir
logs/<experiment>/live`` draws every run, seed and the base model as they
train. The step of every scalar is the tokens trained so far: runs end at a
token budget, after different numbers of rounds.

The curves are a view of ``metrics.jsonl``, never a result, and nothing about
them stops a job: a missing writer package or a folder that cannot be written
gives one warning line at the start, a write that fails later one warning
line, and the job goes on without them. At each start the job writes a new
event file that first replays the rows the resumed job already holds, so each
round is drawn once in the folder; an earlier event file of adloco's there (a
killed job's, another job's given the same folder, a finished run's before
its settings changed) is moved, whole, into the folder's ``earlier/``, which
TensorBoard draws as a run of its own: none is deleted. The writer is
tensorboardX's event file writer, called in the training thread (no queue
that a dead writer thread could block): a few hundred bytes a round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

try:
    from tensorboardX.event_file_writer import EventsWriter
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary

    WRITER_ERROR = None
except Exception as exc:  # missing, or built for another protobuf: no curves, no failure
    WRITER_ERROR = f"{type(exc).__name__}: {exc}"

log = logging.getLogger(__name__)

# The event files this module writes, and the only files of the folder it moves.
FILE_PREFIX = "events"
FILE_SUFFIX = ".adloco"
FILE_GLOB = f"{FILE_PREFIX}.out.tfevents.*{FILE_SUFFIX}"
# Where a start moves the folder's earlier event files (kept, never deleted).
EARLIER = "earlier"

Scalars = Mapping[str, float | int | None]


class LiveCurves:
    """An event file in ``folder`` (None: no curves), starting with the steps of ``replay``.

    ``replay``: (step, scalars) of what the job did before this start. A
    scalar whose value is None is left out of its step.
    """

    def __init__(self, folder: str | Path | None, replay: Iterable[tuple[int, Scalars]] = ()):
        self.folder = None if folder is None else Path(folder)
        self._writer = None
        if self.folder is None:
            return
        if WRITER_ERROR is not None:
            self._give_up(
                f"the writer package tensorboardX cannot be imported ({WRITER_ERROR})",
                "install it (pip install tensorboardX)",
            )
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._give_up(f"cannot write there ({exc.strerror or exc})", "make it writable")
            return
        try:
            keep_earlier(self.folder)
        except OSError as exc:
            self._give_up(
                f"cannot keep its earlier event files in {self.folder / EARLIER} "
                f"({exc.strerror or exc}), so none was written over",
                f"move {self.folder / EARLIER} away",
            )
            return
        try:
            self._writer = EventsWriter(str(self.folder / FILE_PREFIX), FILE_SUFFIX)
            for step, scalars in replay:
                self._write(step, scalars)
            self._writer.flush()
        except OSError as exc:
            self._give_up(f"cannot write there ({exc.strerror or exc})", "make it writable")

    @property
    def active(self) -> bool:
        return self._writer is not None

    def add(self, step: int, scalars: Scalars) -> None:
        """One step's scalars, on disk when this returns (while the writes succeed)."""
        if self._writer is None:
            return
        try:
            self._write(step, scalars)
            self._writer.flush()
        except OSError as exc:
            self._give_up(
                f"a write failed at step {step} ({exc.strerror or exc})",
                "free space or make it writable",
            )

    def close(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.close()
        except OSError as exc:
            self._give_up(f"closing the file failed ({exc.strerror or exc})", "free space")
        self._writer = None

    def _write(self, step: int, scalars: Scalars) -> None:
        values = [
            Summary.Value(tag=tag, simple_value=float(value))
            for tag, value in scalars.items()
            if value is not None
        ]
        event = Event(wall_time=time.time(), step=int(step), summary=Summary(value=values))
        self._writer.write_event(event)

    def _give_up(self, reason: str, remedy: str) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except OSError:
                pass  # the warning below says the curves stopped
        log.warning(
            "no live curves in %s: %s; %s, or leave out --live; training goes on without them",
            self.folder,
            reason,
            remedy,
        )


def keep_earlier(folder: Path) -> list[Path]:
    """Move ``folder``'s earlier event files of adloco's into ``folder/earlier/``, whole.

    A name already there gets a counter (``.1``, ``.2``): nothing is replaced.
    Returns the files' new paths.
    """
    earlier = sorted(p for p in folder.glob(FILE_GLOB) if p.is_file() and not p.is_symlink())
    if not earlier:
        return []
    keep = folder / EARLIER
    keep.mkdir(exist_ok=True)
    moved = []
    for old in earlier:
        new, count = keep / old.name, 0
        while new.exists() or new.is_symlink():
            count += 1
            new = keep / f"{old.name}.{count}"
        old.rename(new)
        moved.append(new)
    log.info("live curves: %d earlier event file(s) of %s kept in %s", len(moved), folder, keep)
    return moved
