"""The round loop: trainers, node slots, outer steps, batch tests, merges.

One round reads top to bottom in :meth:`Engine.run_round`: node slots are
allocated to trainers in proportion to their requested global batches
(``allocate``); each trainer's global batch is split over its slots and turned
into the micro-batches of every inner step, the last round cut to the token
budget (``plan``); every slot of a trainer runs its inner steps from the
trainer's θ (``inner.Worker``), the trainer averages its slots' parameters,
weighted by tokens, takes an outer step and is evaluated when due, all rolled
back and retried on fresh batches if anything turns non-finite (``train``); the
batch test turns the first inner step's gradient statistics into the next
global batch (``test``); every ``merge_frequency`` rounds the trainers with the
smallest batches merge (``merge``); a metrics row per trainer is written with
the simulated time of the round (``record``). Slots run one after another in
one process, or stacked (``engine.slots``), so a seed gives bit-identical
results on CPU; the distributed backend must match this engine. What runs the
rounds and keeps them (start or resume, checkpoints, replica agreement, the
progress bar, the exported model) is :class:`adloco.engine.driver.Driver`; the
state the round works on (slots, trainers, a trainer's round) is
:mod:`adloco.engine.trainers`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path

import torch

from adloco import clock
from adloco.algo import batch_tests, budget, merge, outer, schedule, stats, switch, trust
from adloco.config import ClusterConfig, ModelConfig, RunSettings
from adloco.engine import ddp, divergence, methods
from adloco.engine.collective import LocalCollective
from adloco.engine.driver import Driver, run_fingerprint
from adloco.engine.inner import NodeState, Worker
from adloco.engine.slots import SlotJob, SlotRunner
from adloco.engine.trainers import (
    MergeTransfer,
    SlotPlan,
    Trainer,
    TrainerRound,
    TrainingDiverged,
    absorb,
    build_slots,
    copy_inner_state,
    copy_outer_state,
    initial_local_batch,
    sync_payload_bytes,
)
from adloco.model import DTYPES, build_model, evaluate, evaluation_sample, num_parameters
from adloco.records import MetricsRow

log = logging.getLogger(__name__)

MAX_NAN_RETRIES = 3


class Engine(Driver):
    """Trains one run for one seed; ``run()`` resumes from the last checkpoint."""

    def __init__(
        self,
        settings: RunSettings,
        seed: int,
        data,
        model: ModelConfig,
        cluster: ClusterConfig,
        max_batches: Mapping[str, int],
        curves: Mapping[str, clock.StepTimeCurve],
        checkpoint_dir: str | Path,
        *,
        base_sha256: Mapping[str, str] | None = None,
        lr_keys: tuple[str, str] = ("inner_lr", "outer_lr"),
        device: torch.device | None = None,
        progress: bool = True,
        collective=None,
        resume_finished: bool = False,
        live_dir: str | Path | None = None,
    ):
        """``model``: a base model resolved (:func:`adloco.base_model.start_model`,
        its ``base_sha256`` in the fingerprint); ``lr_keys``: where the run's
        inner and outer lr are written, for the message of a diverged round;
        ``live_dir``: where the run's live curves go (:mod:`adloco.live_curves`)."""
        self.settings = settings
        self.seed = seed
        self.data = data
        self.model_config = model
        self.lr_keys = lr_keys
        self.curves = dict(curves)
        super().__init__(
            checkpoint_dir,
            run_fingerprint(
                settings, seed, model, base_sha256, cluster, max_batches, self.curves, data
            ),
            progress,
            resume_finished,
            live_dir,
        )
        self.train_split = data.split("train")
        self.val_split = data.split("validation")
        self.seq_len = data.seq_len_tokens
        self.device = device or torch.device("cpu")
        self.comm = collective or LocalCollective()
        self.slots = build_slots(cluster, max_batches)
        self.network = clock.Network.from_config(cluster.network)
        self.slot_sharing = cluster.slot_sharing
        self.H = settings.inner_steps
        self.method = methods.get(settings.method)  # what the method and test supply
        self.batch_test = batch_tests.get(settings.batch_test)
        self.test_settings = self.batch_test.settings_from(settings)
        self.initial_local_batch = initial_local_batch(settings, max_batches.values())
        self.lr_reference_batch = settings.lr_reference_batch or self.initial_local_batch
        model = build_model(model, data.vocab_size, self.seq_len, seed)
        self.num_params = num_parameters(model)
        self.worker = Worker(model, settings, self.device)
        self.slot_runner = SlotRunner(settings.slot_execution, self.worker, settings)
        self.sync_payloads = sync_payload_bytes(settings, self.num_params)
        self.eval_seqs = evaluation_sample(self.val_split, settings.eval_sequences)
        self.nodes = {s.index: NodeState(s.index) for s in self.slots}

    # ----------------------------------------------------------- round
    def run_round(self) -> list[dict]:
        """Train one round of every trainer; the metrics rows it adds."""
        r = self.round + 1
        self.allocate()
        plans, base_lrs = self.plan()
        planned = sum(p.sequences for ps in plans.values() for p in ps) * self.seq_len
        evaluate_now = r % self.settings.eval_every_rounds == 0 or self._finished(r, planned)
        results = [self.train(t, plans[t.id], base_lrs, evaluate_now) for t in self.trainers]
        for res in results:
            self.test(res)
        merged = self.merge(r, evaluate_now)
        rows = self.record(r, results, merged)
        self.round = r
        return rows

    def allocate(self) -> None:
        """Slots to trainers in proportion to their global batches, moving as few as possible."""
        batches = {t.id: t.global_batch for t in self.trainers}
        owner = merge.allocate_slots(batches, len(self.slots), self.slot_owner or None)
        moved = 0
        for slot, trainer in owner.items():
            if self.slot_owner.get(slot) != trainer:
                # Inner optimizer moments belong to the trajectory a slot followed;
                # a slot that joins another trainer starts them afresh.
                self.nodes[slot].inner_state = None
                moved += slot in self.slot_owner
        self.slot_owner = owner
        if moved:
            self.trainers[0].events.append({"type": "realloc", "slots_moved": moved})

    def plan(self) -> tuple[dict[int, list[SlotPlan]], list[float]]:
        """Every slot's steps this round, and the schedule's inner lr before each step.

        A trainer's global batch is split over its slots; switch mode turns each
        local batch into micro-batches; a round that would pass the token budget
        is cut (:mod:`adloco.algo.budget`, the same rule for every method).
        """
        step_plans = {}
        for t in self.trainers:
            mine = [s for s in self.slot_owner if self.slot_owner[s] == t.id]
            for index, local in merge.local_batches(t.global_batch, mine).items():
                step_plans[index] = switch.plan_step(
                    local,
                    self.slots[index].max_batch,
                    self.settings.switch,
                    self.settings.switch_lambda,
                )
        left = math.ceil((self.settings.max_tokens - self.tokens_total) / self.seq_len)
        sequences = budget.round_step_sequences(
            {i: p.effective for i, p in step_plans.items()}, self.H, left
        )
        testing = self.batch_test.adaptive
        plans: dict[int, list[SlotPlan]] = {t.id: [] for t in self.trainers}
        for index, plan in sorted(step_plans.items()):
            blocks = (
                trust.stats_blocks(
                    len(sequences[index]), self.settings.stats_steps, self.settings.stats_blocks
                )
                if testing
                else []
            )
            steps = switch.step_micro_batches(
                plan,
                sequences[index],
                self.settings.stats_microbatches if testing else None,
                [h for b in blocks for h in b],
            )
            plans[self.slot_owner[index]].append(SlotPlan(self.slots[index], plan, steps, blocks))
        # The schedule advances with the cluster's tokens, step by step, in
        # lock-step for every slot, whatever order the slots run in here.
        per_step = [0] * max(len(v) for v in sequences.values())
        for v in sequences.values():
            for h, n in enumerate(v):
                per_step[h] += n
        seen = self.tokens_total
        base_lrs = []
        for n in per_step:
            base_lrs.append(
                schedule.inner_lr(
                    seen,
                    self.settings.max_tokens,
                    self.settings.inner_lr,
                    self.settings.warmup_fraction,
                    self.settings.min_lr_ratio,
                )
            )
            seen += n * self.seq_len
        return plans, base_lrs

    def train(
        self, trainer: Trainer, slots: list[SlotPlan], base_lrs: list[float], evaluate_now: bool
    ) -> TrainerRound:
        """Inner steps on the trainer's slots, the outer step and, when due, evaluation.

        A non-finite inner loss or gradient norm, pseudo-gradient, θ after the
        outer step, or validation loss rolls the trainer back to the start of
        the round (θ, outer and inner optimizer states) and retries on the next
        batches; after MAX_NAN_RETRIES retries the run stops.
        """
        full_step = sum(p.plan.effective for p in slots)
        step_batch = self.method.step_batch(full_step, len(slots))
        scale = schedule.lr_scale(step_batch, self.lr_reference_batch, self.settings.lr_scaling)
        res = TrainerRound(trainer, slots, scale, [lr * scale for lr in base_lrs])
        res.tokens = sum(p.sequences for p in slots) * self.seq_len
        # Host copies, so a rollback never costs device memory.
        theta = [p.detach().to("cpu", copy=True) for p in trainer.params]
        outer_state = copy_outer_state(trainer.outer_opt.state_dict(), "cpu")
        inner = {
            p.slot.index: copy_inner_state(self.nodes[p.slot.index].inner_state, "cpu")
            for p in slots
        }
        for attempt in range(MAX_NAN_RETRIES + 1):
            failure = self._attempt(trainer, res, evaluate_now)
            if failure is None:
                return res
            log.warning("trainer %d round %d: non-finite %s", trainer.id, self.round + 1, failure)
            trainer.events.append({"type": "nan_rollback", "attempt": attempt + 1, "what": failure})
            with torch.no_grad():
                torch._foreach_copy_(trainer.params, [t.to(self.device) for t in theta])
            trainer.outer_opt.load_state_dict(copy_outer_state(outer_state, self.device))
            for p in slots:
                self.nodes[p.slot.index].inner_state = copy_inner_state(
                    inner[p.slot.index], self.device
                )
            # The samplers have moved past the offending batches, so the retry
            # sees fresh data from the same θ and optimizer states.
        raise TrainingDiverged(
            f"trainer {trainer.id}: non-finite {failure} in {MAX_NAN_RETRIES + 1} attempts of "
            f"round {self.round + 1}; {self._divergence_advice(trainer, theta, failure)}"
        )

    def _divergence_advice(self, trainer: Trainer, theta: list[torch.Tensor], failure: str) -> str:
        """Which lr to lower first (:mod:`adloco.engine.divergence`), from θ's validation loss
        at the start of the round and the trainer's inner loss in its previous round."""
        rows = [r for r in self.history if r["trainer"] == trainer.id]
        start_loss = previous = None
        if rows and self.method.outer_step:
            self.worker.load([t.to(self.device) for t in theta])
            val = evaluate(self.worker.model, self.eval_seqs, self.settings.eval_batch)
            start_loss, previous = val["loss"], rows[-1]["train_loss"]
        return divergence.advice(failure, start_loss, previous, self.data.vocab_size, self.lr_keys)

    def _attempt(self, trainer: Trainer, res: TrainerRound, evaluate_now: bool) -> str | None:
        """One try at the trainer's round; what turned non-finite, or None."""
        if self.method.per_step_sync:
            return self._attempt_per_step(trainer, res, evaluate_now)
        testing = self.batch_test.adaptive
        round_stats = (
            stats.RoundStats(self.settings.stats_reduce, trainer.params, trainer.direction)
            if testing
            else None
        )
        comm_dtype = DTYPES[self.settings.pseudo_grad_dtype]
        # Σ_m w_m (θ − θ_m): each node's pseudo-gradient at the communication
        # dtype, weighted by its share of the trainer's tokens.
        delta = [torch.zeros_like(p) for p in trainer.params]
        # loss sum, predicted tokens, non-finite flag: reduced with delta.
        scalars = torch.zeros(3, dtype=torch.float64, device=self.device)
        planned = res.tokens
        jobs = []
        for p in res.slots:
            # Every process draws every slot's indices so the samplers stay in step.
            idx = trainer.sampler.take(p.sequences)
            if not self.comm.owns(p.slot.index) or not p.steps:
                continue
            node_stats = None if round_stats is None else round_stats.for_steps(p.stats_blocks)
            jobs.append(SlotJob(self.nodes[p.slot.index], idx, p.steps, node_stats, p.stats_blocks))
        # One slot after another, or stacked (train.slot_execution); in slot order.
        for out in self.slot_runner.run(trainer.params, jobs, self.train_split.get, res.lrs):
            node = out.result
            if node is None:
                scalars[2] += 1
                continue
            with torch.no_grad():
                node_delta = torch._foreach_sub(trainer.params, out.params)
                if comm_dtype != torch.float32:
                    node_delta = [d.to(comm_dtype).float() for d in node_delta]
                torch._foreach_add_(delta, node_delta, alpha=node.tokens / planned)
            scalars[0] += node.loss_sum
            scalars[1] += node.loss_tokens
        self.comm.all_reduce_sum_([*delta, scalars])
        if scalars[2] > 0:
            return "inner loss or gradient norm"
        res.train_loss = float(scalars[0] / max(float(scalars[1]), 1.0))
        if self.batch_test.needs_reference:
            # Copied before the outer step: the foreach Nesterov path of torch's
            # SGD (the default on CUDA) overwrites its gradient argument in place.
            res.pseudo_gradient = [d.clone() for d in delta]
        outer.apply_pseudo_gradient(trainer.outer_opt, trainer.params, delta)
        if not all(torch.isfinite(p).all() for p in trainer.params):
            return "parameters after the outer step"
        res.round_stats = round_stats
        res.estimate = None if round_stats is None else round_stats.reduce(self.comm)
        return self._evaluate(trainer, res, evaluate_now)

    def _attempt_per_step(
        self, trainer: Trainer, res: TrainerRound, evaluate_now: bool
    ) -> str | None:
        """One try at a round that all-reduces every step (:mod:`adloco.engine.ddp`)."""
        # Every process draws every slot's indices so the samplers stay in step.
        indices = {p.slot.index: trainer.sampler.take(p.sequences) for p in res.slots}
        out = ddp.train_round(
            self.worker,
            self.comm,
            trainer.params,
            trainer.outer_opt,
            ddp.slot_steps(res.slots, indices, self.train_split.get, self.comm.owns),
            res.lrs,
            self.settings.grad_clip_norm,
            DTYPES[self.settings.pseudo_grad_dtype],
            self.seq_len,
        )
        if out.failure is not None:
            return out.failure
        res.train_loss = out.loss_sum / max(out.loss_tokens, 1)
        if not all(torch.isfinite(p).all() for p in trainer.params):
            return "parameters after the optimizer step"
        return self._evaluate(trainer, res, evaluate_now)

    def _evaluate(self, trainer: Trainer, res: TrainerRound, evaluate_now: bool) -> str | None:
        """Validation of θ when due; "validation loss" when it is not finite."""
        res.val = None
        if evaluate_now:
            self.worker.load(trainer.params)
            res.val = evaluate(self.worker.model, self.eval_seqs, self.settings.eval_batch)
            if not math.isfinite(res.val["loss"]):
                return "validation loss"
        return None

    def test(self, res: TrainerRound) -> None:
        """The batch test: the trainer's next global batch from its running estimate.

        This round's estimate joins the trainer's running one, and the test
        acts only on a trustworthy estimate (:mod:`adloco.algo.trust`).
        """
        trainer = res.trainer
        if res.round_stats is None:
            return
        trainer.smoothed = trust.smooth(trainer.smoothed, res.estimate, self.settings.stats_decay)
        usable, abstain = trust.usable(
            trainer.smoothed, self.settings.stats_min_dof, trainer.global_batch
        )
        new_batch, requested = batch_tests.next_batch(
            self.batch_test.name,
            usable,
            trainer.global_batch,
            self.test_settings,
            max_growth=self.settings.max_batch_growth,
        )
        if self.batch_test.needs_reference:
            # The next round's reference direction: the pooled statistics
            # gradient, or (scalars) the pseudo-gradient every node already holds.
            source = (
                res.round_stats.pooled_sum()
                if self.settings.stats_reduce == "vector"
                else res.pseudo_gradient
            )
            trainer.direction = [g.detach().clone() for g in source]
        if new_batch != trainer.global_batch:
            trainer.events.append(
                {"type": "batch_change", "from": trainer.global_batch, "to": new_batch}
            )
        res.test = {"groups": res.round_stats.groups, "samples": 0, "dof": 0}
        if res.estimate is not None:
            res.test.update(res.estimate.as_dict())
            res.test["noise_scale"] = trust.noise_scale(
                res.estimate.trace_cov, res.estimate.grad_sqnorm
            )
        res.test["smoothed"] = None if trainer.smoothed is None else trainer.smoothed.as_dict()
        res.test["requested_global"] = requested
        res.test["decision"] = _decision(abstain, trainer.global_batch, new_batch, requested)
        trainer.global_batch = new_batch

    def merge(self, r: int, evaluate_now: bool = False) -> MergeTransfer | None:
        """Merge the trainers with the smallest global batches when due.

        In an evaluation round the merged model is evaluated right away, so its
        perplexity is in the merge event (``val_perplexity_merged``). Returns
        the transfer of the absorbed trainers' state to the kept trainer.
        """
        if (
            self.settings.merge == "none"
            or r % self.settings.merge_frequency != 0
            or len(self.trainers) < 2
        ):
            return None
        batches = {t.id: t.global_batch for t in self.trainers}
        ids = merge.select_for_merge(batches, self.settings.merge_count)
        keep_id = merge.kept_trainer(batches, ids)
        group = [t for t in self.trainers if t.id in ids]
        weights = merge.merge_weights([t.global_batch for t in group])
        kept = self.trainer_by_id(keep_id)
        with_momentum = self.settings.outer_momentum > 0
        absorb(kept, group, weights, with_momentum)
        new_batch = merge.merged_batch([t.global_batch for t in group], self.settings.merge_batch)
        kept.events.append(
            {
                "type": "merge",
                "merged": ids,
                "kept": keep_id,
                "weights": weights,
                "batches": [t.global_batch for t in group],
                "batch": new_batch,
                "rule": self.settings.merge_batch,
            }
        )
        kept.global_batch = new_batch
        if evaluate_now:
            self.worker.load(kept.params)
            val = evaluate(self.worker.model, self.eval_seqs, self.settings.eval_batch)
            kept.events[-1].update(
                val_loss_merged=val["loss"], val_perplexity_merged=val["perplexity"]
            )
        self.trainers = [t for t in self.trainers if t.id == keep_id or t.id not in ids]
        # Every absorbed trainer sends its parameters (and momentum) to the kept one.
        payload = self.num_params * 4 * (2 if with_momentum else 1)
        return MergeTransfer(keep_id, payload, len(ids) - 1)

    def record(
        self, r: int, results: list[TrainerRound], merged: MergeTransfer | None
    ) -> list[dict]:
        """Charge the round to the clock and the run's counters; one metrics row per trainer."""
        per_step = self.method.per_step_sync
        for res in results:
            into = merged is not None and res.trainer.id == merged.kept
            res.sync = clock.TrainerSync(
                len(res.slots),
                self.sync_payloads,
                merged.payload_bytes if into else 0,
                merged.messages if into else 0,
                self.method.all_reduces(max(len(p.steps) for p in res.slots)),
                per_step,
            )
        round_s = clock.round_time_s(
            [([p.work() for p in res.slots], res.sync) for res in results],
            self.curves,
            self.network,
            self.slot_sharing,
        )
        self.sim_time_s += round_s
        self.tokens_total += sum(res.tokens for res in results)
        rows = []
        for res in results:
            self.communications += res.sync.allreduce_count
            row_bytes = res.sync.bytes_moved()
            self.bytes_total += row_bytes
            res.trainer.tokens += res.tokens
            row = MetricsRow(
                run=self.settings.name,
                seed=self.seed,
                method=self.settings.method,
                round=r,
                active_trainers=len(results),
                tokens_total=self.tokens_total,
                communications=self.communications,
                bytes=row_bytes,
                bytes_total=self.bytes_total,
                sim_time_s=self.sim_time_s,
                round_time_s=round_s,
                wall_time_s=self._wall_s(),
                **res.row_fields(),
            )
            rows.append(row.as_dict())
            res.trainer.events = []
        return rows


def _decision(abstain: str, old: int, new: int, requested: float | None) -> str:
    """Why the batch test changed the batch or not, for the metrics row."""
    if abstain:
        return f"kept: {abstain}"
    if requested is None:
        return "kept: the test could not say"
    if new > old:
        return "raised" if new >= math.ceil(requested) else "raised to the growth cap"
    return "kept: the test asks for no more"
