"""What drives a run's rounds and keeps them: start, checkpoints, progress, export.

:class:`Driver` holds a round loop (:class:`Rounds`, in the engine
:class:`adloco.engine.loop.RoundLoop`) and the run's state they share
(:class:`adloco.engine.state.RunState`). ``run()`` has the loop create the
trainers of round 0 or resumes from the checkpoint folder (a finished one,
with ``resume_finished``, is restored at its last round: nothing is trained,
and the log says so), calls
``run_round`` until the loop says the run is ``finished``, appends each
round's metrics rows, saves a checkpoint every ``checkpoint_every_rounds``
rounds, and shows progress against what ends the run, rounds or tokens,
whichever comes first (:mod:`adloco.engine.progress`: a bar on a terminal, one
line per round in a log), one log line as training starts and one as each
checkpoint is saved, and live curves
(:mod:`adloco.engine.live_curves`, with a live folder). A checkpoint holds the
replicated state (:meth:`Driver.state_dict`, saved once) and each process's
own (the loop's ``local_state_dict``: its slots' inner optimizer states and
its RNG), through :mod:`adloco.engine.checkpoint`; every process checks that
all hold the same replicated state at the start and whenever a checkpoint is
saved (the loop's ``agree``). ``best_trainer`` and ``export_model`` hand the
finished run to ``adloco train``'s outputs.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from adloco.core import paths
from adloco.engine import checkpoint, checkpoint_identity
from adloco.engine.live_curves import LiveCurves
from adloco.engine.progress import Progress
from adloco.engine.state import RunState, WallClock
from adloco.engine.trainers import Trainer

log = logging.getLogger(__name__)


class Rounds(Protocol):
    """What the driver asks of a round loop (:class:`adloco.engine.loop.RoundLoop`)."""

    state: RunState  # the replicated state the rounds advance, shared with the driver

    def init_trainers(self) -> None: ...  # the trainers of round 0

    def run_round(self) -> list[dict]: ...  # one round; its metrics rows

    def finished(self) -> bool: ...  # whether the run ends after the last round trained

    def local_state_dict(self) -> dict: ...  # this process's own state, for a checkpoint

    def load_state_dict(self, state: dict, local: dict) -> None: ...  # restore a checkpoint

    def remember(self, rows: list[dict]) -> None: ...  # the rows of a resumed run's rounds

    def agree(self, when: str) -> None: ...  # fail unless all processes hold the same state

    def export(self, trainer: Trainer) -> torch.nn.Module: ...  # a trainer's model


@dataclass(frozen=True)
class DriverSettings:
    """What the driver reads of a run: where and how often it checkpoints, what it shows."""

    checkpoint_dir: Path  # the run's checkpoint folder (its metrics file inside)
    fingerprint: str  # what a checkpoint must have been trained under (EngineSpec.fingerprint)
    checkpoint_every_rounds: int  # a checkpoint every this many rounds, and at the end
    label: str  # the run as progress and the log name it ("<run> seed <seed>")
    max_tokens: int  # the token budget: one of the two limits progress counts against
    max_rounds: int | None = None  # the rounds at most: the other (None: tokens alone)
    progress: bool = True  # a bar on a terminal (else one line per round)
    # A finished checkpoint of the same fingerprint is resumed (at its last
    # round, so nothing is trained) rather than trained again: how one job
    # of every seed of a run (`adloco train --seed all`) re-writes the
    # outputs of the seeds a killed job had finished.
    resume_finished: bool = False
    live_dir: Path | None = None  # the folder of the run's live curves (None: none)
    # Whose checkpoints these are (checkpoint_identity.identity): recorded in
    # each one; a folder holding another's is refused, never set aside (None: unchecked).
    identity: dict | None = None


class Driver:
    """Start, resume, checkpoint and export a run whose rounds a :class:`Rounds` trains."""

    def __init__(self, loop: Rounds, collective, settings: DriverSettings, wall_clock: WallClock):
        """``collective``: the processes' (the loop's own); ``wall_clock``: the one the
        loop's rows read."""
        self.loop = loop
        self.state = loop.state
        self.comm = collective
        self.settings = settings
        self.wall_clock = wall_clock
        self.ckpt_dir = Path(settings.checkpoint_dir)
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = paths.metrics_file(self.ckpt_dir)
        self.fingerprint = settings.fingerprint
        self.history: list[dict] = []
        # Whether start() loaded a finished run's checkpoint (resume_finished): nothing to train.
        self.restored_finished = False

    @property
    def round(self) -> int:
        return self.state.round

    @property
    def trainers(self) -> list[Trainer]:
        return self.state.trainers

    def state_dict(self) -> dict:
        """The replicated state: identical on every process, saved once (by rank 0)."""
        return {
            **self.state.counters(),
            "wall_time_s": self.wall_clock.elapsed_s(),
            **self.state.owners_and_trainers(),
            "history": json.dumps(self.history),
        }

    def load_state_dict(self, state: dict, local: dict) -> None:
        """Restore from :meth:`state_dict` and ``local`` (``{"nodes": {slot: inner}, "rng"}``)."""
        self.loop.load_state_dict(state, local)
        self.wall_clock.offset_s = state["wall_time_s"]
        self.history = json.loads(state["history"])
        self.loop.remember(self.history)

    def start(self) -> None:
        """Resume from the checkpoint folder, or create the trainers of round 0."""
        self.wall_clock.restart()
        if not self.load_checkpoint():
            self.loop.init_trainers()
            if self.comm.is_writer:
                self.metrics_path.write_text("")
        elif self.restored_finished:
            log.info(
                "%s: finished earlier (round %d, %s): restored from that checkpoint, "
                "not trained again; its outputs are written again",
                self.settings.label,
                self.round,
                self.ckpt_dir / checkpoint.FINISHED_NAME,
            )
            if self.comm.is_writer:
                self._truncate_metrics()
        else:
            log.info("resuming %s after round %d", self.settings.label, self.round)
            if self.comm.is_writer:
                self._truncate_metrics()
        self.loop.agree("at the start")
        if not self.loop.finished() and self.comm.is_writer:
            log.info("%s: train: from round %d; %s", self.settings.label, self.round, self.limits())

    def limits(self) -> str:
        """What ends the run, as the train line says it."""
        tokens = f"{self.settings.max_tokens} tokens"
        if self.settings.max_rounds is None:
            return f"the run ends at {tokens}"
        return (
            f"the run ends at {self.settings.max_rounds} rounds or {tokens}, whichever comes first"
        )

    def run(self) -> list[dict]:
        """Train to the end, resuming from the checkpoint folder; return all rows."""
        self.start()
        writer = self.comm.is_writer
        # Progress against what ends the run: the token budget or the rounds, whichever first.
        shown = Progress(
            self.settings.label,
            self.settings.max_tokens,
            self.state.tokens_total,
            writer,
            self.settings.progress,
            max_rounds=self.settings.max_rounds,
            done_rounds=self.round,
        )
        curves = LiveCurves(
            self.settings.live_dir if writer else None,
            [(rows[-1]["tokens_total"], round_scalars(rows)) for rows in rounds(self.history)],
        )
        try:
            while not self.loop.finished():
                rows = self.loop.run_round()
                if writer:
                    with open(self.metrics_path, "a") as fh:
                        for row in rows:
                            fh.write(json.dumps(row) + "\n")
                self.history.extend(rows)
                every = self.settings.checkpoint_every_rounds
                if self.round % every == 0 or self.loop.finished():
                    self.save_checkpoint()
                shown.report(
                    self.state.tokens_total, round_fields(rows), rows[-1]["wall_time_s"], self.round
                )
                curves.add(rows[-1]["tokens_total"], round_scalars(rows))
        finally:
            shown.close()
            curves.close()
        return self.history

    def save_checkpoint(self) -> None:
        """Save the current round; every process calls it (see ``checkpoint``'s protocol)."""
        if self.comm.is_writer:
            log.info(
                "%s: checkpoint: round %d to %s", self.settings.label, self.round, self.ckpt_dir
            )
        checkpoint.save(
            self.ckpt_dir,
            self.round,
            self.fingerprint,
            self.state_dict() if self.comm.is_writer else None,
            self.loop.local_state_dict(),
            self.comm.rank,
            self.comm.world_size,
            barrier=lambda: self.loop.agree(f"when saving round {self.round}"),
            identity_=self.settings.identity,
        )

    def load_checkpoint(self) -> bool:
        """Load the last complete round, if any; whether there was one.

        A checkpoint of this run under other settings or code (or finished)
        cannot be resumed: it is moved aside to ``<folder>.stale`` and the run
        starts over. One of another experiment, run or seed is refused
        (``checkpoint_identity.ForeignCheckpointError``) and left as it is.
        """
        if self.settings.identity is not None:
            checkpoint_identity.check(self.ckpt_dir, self.settings.identity)
        try:
            saved = checkpoint.load(self.ckpt_dir, self.fingerprint, self.settings.resume_finished)
            stale = None
        except checkpoint.StaleCheckpointError as exc:
            saved, stale = None, exc
        self.comm.barrier()  # every process has read the folder before it may move
        if stale is not None:
            if self.comm.is_writer:
                moved = checkpoint.set_aside(self.ckpt_dir)
                log.warning("%s; moved to %s, starting over", stale, moved)
            self.comm.barrier()
        if saved is None:
            return False
        self.restored_finished = (self.ckpt_dir / checkpoint.FINISHED_NAME).exists()
        self.load_state_dict(saved.shared, saved.local(self.comm.rank, self.comm.owns))
        return True

    def _truncate_metrics(self) -> None:
        # Rows written after the checkpoint belong to a round that will be redone.
        rows = [json.dumps(r) for r in self.history]
        self.metrics_path.write_text("".join(line + "\n" for line in rows))

    def best_trainer(self) -> Trainer:
        """The active trainer with the lowest validation perplexity in the last round."""
        last = [
            r for r in self.history if r["round"] == self.round and r["val_perplexity"] is not None
        ]
        alive = {t.id for t in self.trainers}
        scored = sorted((r["val_perplexity"], r["trainer"]) for r in last if r["trainer"] in alive)
        best_id = scored[0][1] if scored else self.trainers[0].id
        return self.state.trainer_by_id(best_id)

    def export_model(self, trainer: Trainer) -> torch.nn.Module:
        """The trainer's model, at the model's dtype (the loop's ``export``)."""
        return self.loop.export(trainer)


def rounds(rows: list[dict]) -> Iterator[list[dict]]:
    """The metrics rows grouped by round, in order."""
    for _, group in itertools.groupby(rows, key=lambda r: r["round"]):
        yield list(group)


def _best(rows: list[dict]) -> dict | None:
    """The round's row of the trainer with the lowest validation perplexity (None: not measured)."""
    measured = [r for r in rows if r["val_perplexity"] is not None]
    return min(measured, key=lambda r: r["val_perplexity"]) if measured else None


def round_fields(rows: list[dict]) -> dict[str, str]:
    """A round as the progress bar's postfix and the log line show it (its tokens aside)."""
    best = _best(rows)
    return {
        "round": str(rows[0]["round"]),
        "batch": ",".join(str(r["requested_batch"]) for r in rows),
        "trainers": str(len(rows)),
        "val_ppl": "-" if best is None else f"{best['val_perplexity']:.2f}",
    }


def round_scalars(rows: list[dict]) -> dict[str, float | int | None]:
    """A round's live curves: the best trainer's validation, the trainers' mean train loss,
    the round, the trainers, their batches added up (sequences) and the simulated time."""
    best = _best(rows)
    return {
        "val/perplexity": None if best is None else best["val_perplexity"],
        "val/loss": None if best is None else best["val_loss"],
        "train/loss": sum(r["train_loss"] for r in rows) / len(rows),
        "run/round": rows[0]["round"],
        "run/trainers": len(rows),
        "run/batch_sequences": sum(r["requested_batch"] for r in rows),
        "run/sim_time_s": rows[-1]["sim_time_s"],
    }
