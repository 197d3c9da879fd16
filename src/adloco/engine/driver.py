"""What runs an engine's rounds and keeps them: start, checkpoints, agreement, progress, export.

:class:`Driver` is the half of :class:`adloco.engine.loop.Engine` that is not
the round: ``run()`` creates the trainers of round 0 (``_init_trainers``) or
resumes from the checkpoint folder, calls
``Engine.run_round`` until the run ends, appends each round's metrics rows,
saves a checkpoint every ``checkpoint_every_rounds`` rounds, and shows
progress in tokens (:mod:`adloco.progress`: a bar on a terminal, one line per
round in a log) and live curves (:mod:`adloco.live_curves`, with a live
folder). The replicated state (:meth:`Driver.state_dict`, saved once) and
each process's own (:meth:`Driver.local_state_dict`: its slots' inner
optimizer states and its RNG) go through :mod:`adloco.engine.checkpoint`;
every process checks that all hold the same replicated state at the start and
whenever a checkpoint is saved (:meth:`Driver._agree`). ``best_trainer`` and
``export_model`` hand the finished run to ``adloco train``'s outputs.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path

import torch

from adloco import paths
from adloco.algo import merge, trust
from adloco.clock import StepTimeCurve
from adloco.config import ClusterConfig, ModelConfig, RunSettings, thaw
from adloco.engine import checkpoint, methods
from adloco.engine.inner import NodeState
from adloco.engine.sampler import SubsetSampler, draw_subset
from adloco.engine.trainers import Trainer, copy_inner_state
from adloco.live_curves import LiveCurves
from adloco.model import DTYPES, build_model
from adloco.progress import Progress

log = logging.getLogger(__name__)


def run_fingerprint(
    settings: RunSettings,
    seed: int,
    model: ModelConfig,
    base_sha256: Mapping[str, str] | None,
    cluster: ClusterConfig,
    max_batches: Mapping[str, int],
    curves: Mapping[str, StepTimeCurve],
    data,
) -> str:
    """What a checkpoint must have been trained under to be resumed (``checkpoint.fingerprint``).

    ``base_sha256``: the checksums of the base model the run starts from
    (:class:`adloco.base_model.StartModel`), part of the model's entry.
    """
    model_entry = thaw(model)
    if base_sha256 is not None:
        model_entry["base"] = dict(base_sha256)
    return checkpoint.fingerprint(
        {
            "run": asdict(settings),
            "seed": seed,
            "model": model_entry,
            # How many processes run the slots does not change the trajectory,
            # so a run may resume under another number of them.
            "cluster": {k: v for k, v in thaw(cluster).items() if k != "processes_per_machine"},
            "max_batches": dict(max_batches),
            "curves": {name: c.as_dict() for name, c in sorted(curves.items())},
            "data": data.manifest.get("splits"),
        }
    )


class Driver:
    """Start, resume, checkpoint and export an :class:`adloco.engine.loop.Engine`.

    A base of ``Engine``: it creates the trainers of round 0 or restores them,
    using the engine's settings, slots, worker and collective, and its
    ``run_round``. It holds the run's replicated state (round, counters, slot
    owners, trainers) that the rounds advance.
    """

    def __init__(
        self,
        checkpoint_dir: str | Path,
        fingerprint: str,
        progress: bool,
        resume_finished: bool,
        live_dir: str | Path | None = None,
    ):
        """``progress``: a bar on a terminal (else one line per round); ``live_dir``: the
        folder of the run's live curves (None: none)."""
        self.ckpt_dir = Path(checkpoint_dir)
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = paths.metrics_file(self.ckpt_dir)
        self.fingerprint = fingerprint
        self.progress = progress
        self.live_dir = live_dir
        # A finished checkpoint of the same fingerprint is resumed (at its last
        # round, so nothing is trained) rather than trained again: how one job
        # of every seed of a run (`adloco train --seed all`) re-writes the
        # outputs of the seeds a killed job had finished.
        self.resume_finished = resume_finished
        self.wall_offset_s = 0.0
        self.history: list[dict] = []
        # The replicated state the rounds advance (:meth:`state_dict`).
        self.round = 0
        self.tokens_total = 0
        self.communications = 0
        self.bytes_total = 0
        self.sim_time_s = 0.0
        self.slot_owner: dict[int, int] = {}
        self.trainers: list[Trainer] = []

    def _new_outer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        """The trainer's optimizer of θ: its method's (:mod:`adloco.engine.methods`)."""
        return methods.get(self.settings.method).make_optimizer(params, self.settings)

    def _init_trainers(self) -> None:
        """The trainers of round 0, when there is no checkpoint to resume."""
        shared = [p.detach().clone().float() for p in self.worker.params]
        k = self.settings.initial_trainers
        # Equal shares of the slots; each trainer's global batch is initial_batch per slot.
        first_slots = merge.slot_counts(dict.fromkeys(range(k), len(self.slots)), len(self.slots))
        for t in range(k):
            if self.settings.init == "independent" and t > 0:
                model = build_model(
                    self.model_config, self.data.vocab_size, self.seq_len, self.seed * 1000 + t
                )
                params = [p.detach().clone().float().to(self.device) for p in model.parameters()]
            else:
                params = [p.clone() for p in shared]
            subset = draw_subset(
                len(self.train_split), self.settings.subset_fraction, self.seed * 7919 + t
            )
            sampler = SubsetSampler(subset, seed=self.seed * 104_729 + t)
            batch = self.initial_local_batch * first_slots[t]
            self.trainers.append(Trainer(t, params, self._new_outer(params), batch, sampler))

    def state_dict(self) -> dict:
        """The replicated state: identical on every process, saved once (by rank 0)."""
        return {
            "round": self.round,
            "tokens_total": self.tokens_total,
            "communications": self.communications,
            "bytes_total": self.bytes_total,
            "sim_time_s": self.sim_time_s,
            "wall_time_s": self._wall_s(),
            "slot_owner": [[s, t] for s, t in sorted(self.slot_owner.items())],
            "trainers": [
                {
                    "id": t.id,
                    "params": [p.cpu() for p in t.params],
                    "outer_state": t.outer_opt.state_dict(),
                    "global_batch": t.global_batch,
                    "sampler": t.sampler.state_dict(),
                    "tokens": t.tokens,
                    "direction": None if t.direction is None else [d.cpu() for d in t.direction],
                    "smoothed": json.dumps(None if t.smoothed is None else t.smoothed.as_dict()),
                }
                for t in self.trainers
            ],
            "history": json.dumps(self.history),
        }

    def local_state_dict(self) -> dict:
        """This process's own state: inner optimizer states of the slots it runs, its RNG."""
        return {
            "nodes": [
                {"slot": n.slot, "inner_state": n.inner_state}
                for n in self.nodes.values()
                if self.comm.owns(n.slot) and n.inner_state is not None
            ],
            "rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict, local: dict) -> None:
        """Restore from :meth:`state_dict` and ``local`` (``{"nodes": {slot: inner}, "rng"}``)."""
        self.round = state["round"]
        self.tokens_total = state["tokens_total"]
        self.communications = state["communications"]
        self.bytes_total = state["bytes_total"]
        self.sim_time_s = state["sim_time_s"]
        self.wall_offset_s = state["wall_time_s"]
        self.slot_owner = {int(s): int(t) for s, t in state["slot_owner"]}
        self.trainers = []
        for ts in state["trainers"]:
            params = [p.to(self.device) for p in ts["params"]]
            opt = self._new_outer(params)
            opt.load_state_dict(ts["outer_state"])
            direction = ts["direction"]
            self.trainers.append(
                Trainer(
                    ts["id"],
                    params,
                    opt,
                    ts["global_batch"],
                    SubsetSampler.from_state_dict(ts["sampler"]),
                    ts["tokens"],
                    None if direction is None else [d.to(self.device) for d in direction],
                    trust.Smoothed.from_dict(json.loads(ts["smoothed"])),
                )
            )
        for slot in self.nodes:
            self.nodes[slot] = NodeState(
                slot, copy_inner_state(local["nodes"].get(slot), self.device)
            )
        if local["rng"] is not None:
            torch.set_rng_state(local["rng"])
        self.history = json.loads(state["history"])

    def _replica_digest(self) -> int:
        """A 31-bit digest of the replicated state; equal on all processes whose replicas agree."""
        values = [self.round, self.tokens_total]
        for t in self.trainers:
            # The bit patterns of θ: any changed bit changes the sum (barring cancellation).
            bits = torch.stack(
                [p.detach().contiguous().view(torch.int32).sum(dtype=torch.int64) for p in t.params]
            ).sum()
            values += [t.id, t.global_batch, t.sampler.epoch, t.sampler.position, int(bits)]
        digest = 0
        for v in values:
            digest = (digest * 1_000_003 + v) % (2**31 - 1)
        return digest

    def _agree(self, when: str) -> None:
        """Fail on every process unless all hold the same round and replicated state.

        Also a barrier. Sums of small integers are exact in float64, so the
        check is exact; a second reduction makes every process reach the same
        verdict.
        """
        mine = torch.tensor(
            [self.round, self._replica_digest()], dtype=torch.float64, device=self.device
        )
        total = mine.clone()
        self.comm.all_reduce_sum_([total])
        verdict = torch.tensor(
            [0.0 if torch.equal(total, mine * self.comm.world_size) else 1.0],
            dtype=torch.float64,
            device=self.device,
        )
        self.comm.all_reduce_sum_([verdict])
        if verdict.item() > 0:
            raise RuntimeError(
                f"rank {self.comm.rank}: the {self.comm.world_size} processes disagree on the "
                f"round or the trainers' state {when}; their replicas diverged (different "
                "checkpoints, code or non-deterministic kernels)"
            )

    def trainer_by_id(self, trainer_id: int) -> Trainer:
        return next(t for t in self.trainers if t.id == trainer_id)

    def _finished(self, r: int, pending_tokens: int = 0) -> bool:
        """Whether the run ends after round ``r``, with ``pending_tokens`` not yet counted."""
        return (
            r >= self.settings.max_rounds
            or self.tokens_total + pending_tokens >= self.settings.max_tokens
        )

    def _wall_s(self) -> float:
        return self.wall_offset_s + (time.perf_counter() - self._t0)

    def start(self) -> None:
        """Resume from the checkpoint folder, or create the trainers of round 0."""
        self._t0 = time.perf_counter()
        if not self.load_checkpoint():
            self._init_trainers()
            if self.comm.is_writer:
                self.metrics_path.write_text("")
        else:
            log.info(
                "resuming %s seed %d after round %d", self.settings.name, self.seed, self.round
            )
            if self.comm.is_writer:
                self._truncate_metrics()
        self._agree("at the start")

    def run(self) -> list[dict]:
        """Train to the end, resuming from the checkpoint folder; return all rows."""
        self.start()
        writer = self.comm.is_writer
        # Progress in tokens: runs end at the token budget, after however many rounds.
        shown = Progress(
            f"{self.settings.name} seed {self.seed}",
            self.settings.max_tokens,
            self.tokens_total,
            writer,
            self.progress,
        )
        curves = LiveCurves(
            self.live_dir if writer else None,
            [(rows[-1]["tokens_total"], round_scalars(rows)) for rows in rounds(self.history)],
        )
        try:
            while not self._finished(self.round):
                rows = self.run_round()
                if writer:
                    with open(self.metrics_path, "a") as fh:
                        for row in rows:
                            fh.write(json.dumps(row) + "\n")
                self.history.extend(rows)
                if self.round % self.settings.checkpoint_every_rounds == 0 or self._finished(
                    self.round
                ):
                    self.save_checkpoint()
                shown.report(self.tokens_total, round_fields(rows), rows[-1]["wall_time_s"])
                curves.add(rows[-1]["tokens_total"], round_scalars(rows))
        finally:
            shown.close()
            curves.close()
        return self.history

    def save_checkpoint(self) -> None:
        """Save the current round; every process calls it (see ``checkpoint``'s protocol)."""
        checkpoint.save(
            self.ckpt_dir,
            self.round,
            self.fingerprint,
            self.state_dict() if self.comm.is_writer else None,
            self.local_state_dict(),
            self.comm.rank,
            self.comm.world_size,
            barrier=lambda: self._agree(f"when saving round {self.round}"),
        )

    def load_checkpoint(self) -> bool:
        """Load the last complete round, if any; whether there was one.

        A checkpoint of another configuration, run or seed cannot be resumed:
        it is moved aside to ``<folder>.stale`` and the run starts over.
        """
        try:
            saved = checkpoint.load(self.ckpt_dir, self.fingerprint, self.resume_finished)
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
        return self.trainer_by_id(best_id)

    def export_model(self, trainer: Trainer) -> torch.nn.Module:
        self.worker.load(trainer.params)
        dtype = DTYPES[self.model_config.dtype]
        return self.worker.model.to(dtype)


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
