"""The round loop: trainers, node slots, outer steps, batch tests, merges.

One round reads top to bottom in :meth:`RoundLoop.run_round`: node slots are
allocated to trainers in proportion to their requested global batches
(``allocate``); each trainer's global batch is split over its slots and turned
into the micro-batches of every inner step, the last round cut to the token
budget (``plan``); every slot of a trainer runs its inner steps from the
trainer's θ (``inner.Worker``), the trainer averages its slots' parameters,
weighted by tokens, takes an outer step and is evaluated when due, all rolled
back and retried on fresh batches if anything turns non-finite (``train``); the
batch test turns the first inner step's gradient statistics into the next
global batch (``test``, :mod:`adloco.engine.batch_step`); every
``merge_frequency`` rounds the trainers with the smallest batches merge
(``merge``); a metrics row per trainer is written with the simulated time of
the round (``record``). Slots run one after another in one process, or stacked
(``engine.slots``), so a seed gives bit-identical results on CPU; the
distributed backend must match this engine. The rounds advance a
:class:`adloco.engine.state.RunState`; :class:`adloco.engine.driver.Driver`
drives and keeps them through the methods of the loop's first section.
"""

from __future__ import annotations

import logging
import math

import torch

from adloco.algo import batch_tests, budget, merge, outer, schedule, stats, switch, trust
from adloco.engine import ddp, divergence, methods
from adloco.engine.batch_step import apply_test
from adloco.engine.inner import NodeState, Worker
from adloco.engine.sampler import SubsetSampler, draw_subset
from adloco.engine.slots import SlotJob, SlotRunner
from adloco.engine.spec import EngineSpec
from adloco.engine.state import RunState, WallClock, agree
from adloco.engine.trainers import (
    MergeTransfer,
    SlotPlan,
    Trainer,
    TrainerRound,
    TrainingDiverged,
    build_slots,
    copy_inner_state,
    copy_outer_state,
    initial_local_batch,
    merge_group,
    sync_payload_bytes,
)
from adloco.formats import clock
from adloco.formats.metrics import MetricsRow
from adloco.model.llama import DTYPES, build_model, evaluate, evaluation_sample, num_parameters

log = logging.getLogger(__name__)

MAX_NAN_RETRIES = 3


class RoundLoop:
    """The rounds of one run for one seed, behind the interface its driver calls.

    The driver (:class:`adloco.engine.driver.Driver`) calls ``init_trainers``
    or ``load_state_dict``, then ``run_round`` until ``finished``; ``agree``,
    ``local_state_dict`` and ``export`` serve its checkpoints and outputs. The
    replicated state the rounds advance is ``state``, shared with the driver.
    """

    def __init__(self, spec: EngineSpec, *, wall_clock: WallClock | None = None):
        """``spec``: the run's seed (:class:`adloco.engine.spec.EngineSpec`; the loop reads
        its settings, data, model, cluster, max batches, curves, lr keys, device and
        collective); ``wall_clock``: the run's, for the rows."""
        settings, data, cluster = spec.settings, spec.data, spec.cluster
        self.settings = settings
        self.seed = spec.seed
        self.data = data
        self.model_config = spec.model
        self.lr_keys = spec.lr_keys
        self.curves = dict(spec.curves)
        self.wall_clock = wall_clock or WallClock()
        self.state = RunState()
        # Each trainer's train loss in its last round (what a diverged round's advice reads).
        self.last_train_loss: dict[int, float] = {}
        self.train_split = data.split("train")
        self.val_split = data.split("validation")
        self.seq_len = data.seq_len_tokens
        self.device = spec.device
        self.comm = spec.collective
        self.slots = build_slots(cluster, spec.max_batches)
        self.network = clock.Network.from_config(cluster.network)
        self.slot_sharing = cluster.slot_sharing
        self.H = settings.inner_steps
        self.method = methods.get(settings.method)  # what the method and test supply
        self.batch_test = batch_tests.get(settings.batch_test)
        self.test_settings = self.batch_test.settings_from(settings)
        self.initial_local_batch = initial_local_batch(settings, spec.max_batches.values())
        self.lr_reference_batch = settings.lr_reference_batch or self.initial_local_batch
        model = build_model(spec.model, data.vocab_size, self.seq_len, spec.seed)
        self.num_params = num_parameters(model)
        self.worker = Worker(model, settings, self.device)
        self.slot_runner = SlotRunner(settings.slot_execution, self.worker, settings)
        self.sync_payloads = sync_payload_bytes(settings, self.num_params)
        self.eval_seqs = evaluation_sample(self.val_split, settings.eval_sequences)
        self.nodes = {s.index: NodeState(s.index) for s in self.slots}

    # ------------------------------------------------------ the driver's interface
    def new_outer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        """The trainer's optimizer of θ: its method's (:mod:`adloco.engine.methods`)."""
        return self.method.make_optimizer(params, self.settings)

    def init_trainers(self) -> None:
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
            self.state.trainers.append(Trainer(t, params, self.new_outer(params), batch, sampler))

    def finished(self, r: int | None = None, pending_tokens: int = 0) -> bool:
        """Whether the run ends after round ``r`` (None: the last trained), with
        ``pending_tokens`` not yet counted."""
        r = self.state.round if r is None else r
        return (
            r >= self.settings.max_rounds
            or self.state.tokens_total + pending_tokens >= self.settings.max_tokens
        )

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
        """Restore the replicated ``state`` (:class:`RunState`'s entries of a checkpoint)
        and ``local`` (``{"nodes": {slot: inner}, "rng"}``)."""
        self.state.load_state_dict(state, self.new_outer, self.device)
        for slot in self.nodes:
            self.nodes[slot] = NodeState(
                slot, copy_inner_state(local["nodes"].get(slot), self.device)
            )
        if local["rng"] is not None:
            torch.set_rng_state(local["rng"])

    def remember(self, rows: list[dict]) -> None:
        """Take in metrics rows already trained (a resumed run's): each trainer's last loss."""
        for row in rows:
            self.last_train_loss[row["trainer"]] = row["train_loss"]

    def agree(self, when: str) -> None:
        """Fail on every process unless all hold the same replicated state (:func:`agree`)."""
        agree(self.comm, self.device, self.state, when)

    def export(self, trainer: Trainer) -> torch.nn.Module:
        """The trainer's θ in the model, at the model's dtype."""
        self.worker.load(trainer.params)
        return self.worker.model.to(DTYPES[self.model_config.dtype])

    # ----------------------------------------------------------- round
    def run_round(self) -> list[dict]:
        """Train one round of every trainer; the metrics rows it adds."""
        r = self.state.round + 1
        self.allocate()
        plans, base_lrs = self.plan()
        planned = sum(p.sequences for ps in plans.values() for p in ps) * self.seq_len
        evaluate_now = r % self.settings.eval_every_rounds == 0 or self.finished(r, planned)
        results = [self.train(t, plans[t.id], base_lrs, evaluate_now) for t in self.state.trainers]
        for res in results:
            self.test(res)
        merged = self.merge(r, evaluate_now)
        rows = self.record(r, results, merged)
        self.state.round = r
        return rows

    def allocate(self) -> None:
        """Slots to trainers in proportion to their global batches, moving as few as possible."""
        batches = {t.id: t.global_batch for t in self.state.trainers}
        owner = merge.allocate_slots(batches, len(self.slots), self.state.slot_owner or None)
        moved = 0
        for slot, trainer in owner.items():
            if self.state.slot_owner.get(slot) != trainer:
                # Inner optimizer moments belong to the trajectory a slot followed;
                # a slot that joins another trainer starts them afresh.
                self.nodes[slot].inner_state = None
                moved += slot in self.state.slot_owner
        self.state.slot_owner = owner
        if moved:
            self.state.trainers[0].events.append({"type": "realloc", "slots_moved": moved})

    def plan(self) -> tuple[dict[int, list[SlotPlan]], list[float]]:
        """Every slot's steps this round, and the schedule's inner lr before each step.

        A trainer's global batch is split over its slots; switch mode turns each
        local batch into micro-batches; a round that would pass the token budget
        is cut (:mod:`adloco.algo.budget`, the same rule for every method).
        """
        step_plans, owner = {}, self.state.slot_owner
        for t in self.state.trainers:
            mine = [s for s in owner if owner[s] == t.id]
            for index, local in merge.local_batches(t.global_batch, mine).items():
                step_plans[index] = switch.plan_step(
                    local,
                    self.slots[index].max_batch,
                    self.settings.switch,
                    self.settings.switch_lambda,
                )
        left = math.ceil((self.settings.max_tokens - self.state.tokens_total) / self.seq_len)
        sequences = budget.round_step_sequences(
            {i: p.effective for i, p in step_plans.items()}, self.H, left
        )
        testing = self.batch_test.adaptive
        plans: dict[int, list[SlotPlan]] = {t.id: [] for t in self.state.trainers}
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
            plans[owner[index]].append(SlotPlan(self.slots[index], plan, steps, blocks))
        # The schedule advances with the cluster's tokens, step by step, in
        # lock-step for every slot, whatever order the slots run in here.
        per_step = [0] * max(len(v) for v in sequences.values())
        for v in sequences.values():
            for h, n in enumerate(v):
                per_step[h] += n
        seen = self.state.tokens_total
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
            log.warning(
                "trainer %d round %d: non-finite %s", trainer.id, self.state.round + 1, failure
            )
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
            f"round {self.state.round + 1}; {self._divergence_advice(trainer, theta, failure)}"
        )

    def _divergence_advice(self, trainer: Trainer, theta: list[torch.Tensor], failure: str) -> str:
        """Which lr to lower first (:mod:`adloco.engine.divergence`), from θ's validation loss
        at the start of the round and the trainer's inner loss in its previous round."""
        start_loss = previous = None
        if trainer.id in self.last_train_loss and self.method.outer_step:
            self.worker.load([t.to(self.device) for t in theta])
            val = evaluate(self.worker.model, self.eval_seqs, self.settings.eval_batch)
            start_loss, previous = val["loss"], self.last_train_loss[trainer.id]
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
        """The batch test (:func:`adloco.engine.batch_step.apply_test`)."""
        apply_test(res, self.batch_test, self.test_settings, self.settings)

    def merge(self, r: int, evaluate_now: bool = False) -> MergeTransfer | None:
        """Merge the trainers with the smallest global batches when due.

        In an evaluation round the merged model is evaluated right away, so its
        perplexity is in the merge event (``val_perplexity_merged``). Returns
        the transfer of the absorbed trainers' state to the kept trainer.
        """
        if (
            self.settings.merge == "none"
            or r % self.settings.merge_frequency != 0
            or len(self.state.trainers) < 2
        ):
            return None
        owner = self.state.slot_owner
        slots = {t.id: sum(1 for s in owner if owner[s] == t.id) for t in self.state.trainers}
        kept, ids = merge_group(self.state.trainers, self.settings, slots)
        if evaluate_now:
            self.worker.load(kept.params)
            val = evaluate(self.worker.model, self.eval_seqs, self.settings.eval_batch)
            kept.events[-1].update(
                val_loss_merged=val["loss"], val_perplexity_merged=val["perplexity"]
            )
        self.state.trainers = [t for t in self.state.trainers if t.id == kept.id or t.id not in ids]
        # Every absorbed trainer sends its parameters (and momentum) to the kept one.
        payload = self.num_params * 4 * (2 if self.settings.outer_momentum > 0 else 1)
        return MergeTransfer(kept.id, payload, len(ids) - 1)

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
        self.state.sim_time_s += round_s
        self.state.tokens_total += sum(res.tokens for res in results)
        rows = []
        for res in results:
            self.state.communications += res.sync.allreduce_count
            self.state.messages += res.sync.messages()
            row_bytes = res.sync.bytes_moved()
            self.state.bytes_total += row_bytes
            res.trainer.tokens += res.tokens
            row = MetricsRow(
                run=self.settings.name,
                seed=self.seed,
                method=self.settings.method,
                round=r,
                active_trainers=len(results),
                tokens_total=self.state.tokens_total,
                communications=self.state.communications,
                allreduces=res.sync.allreduces(),
                merge_transfers=res.sync.merge_messages,
                messages_total=self.state.messages,
                bytes=row_bytes,
                bytes_total=self.state.bytes_total,
                sim_time_s=self.state.sim_time_s,
                round_time_s=round_s,
                wall_time_s=self.wall_clock.elapsed_s(),
                **res.row_fields(),
            )
            rows.append(row.as_dict())
            res.trainer.events = []
        self.remember(rows)
        return rows
