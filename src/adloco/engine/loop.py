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
results on CPU; the distributed backend must match this engine.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from adloco import clock
from adloco.algo import batch_tests, budget, merge, outer, schedule, stats, switch, trust
from adloco.config import RunSettings, setting_key
from adloco.engine import checkpoint, ddp
from adloco.engine.collective import LocalCollective
from adloco.engine.inner import NodeState, Worker
from adloco.engine.sampler import SubsetSampler, draw_subset
from adloco.engine.slots import SlotJob, SlotRunner
from adloco.model import DTYPES, build_model, evaluate, evaluation_sample, num_parameters
from adloco.records import MetricsRow

log = logging.getLogger(__name__)

MAX_NAN_RETRIES = 3
BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}


def sync_payload_bytes(settings: RunSettings, num_params: int) -> tuple[int, ...]:
    """What each node of a trainer puts into the all-reduces of one round.

    The pseudo-gradient at ``pseudo_grad_dtype``, and with a batch test the
    statistics (``stats_reduce``: a few float64 scalars, or a float32 D-vector).
    """
    payloads = [num_params * BYTES_PER_ELEMENT[settings.pseudo_grad_dtype]]
    if settings.batch_test != "none":
        payloads.append(stats.stats_payload_bytes(settings.stats_reduce, num_params))
    return tuple(payloads)


class TrainingDiverged(RuntimeError):
    """A trainer's round stayed non-finite after every retry."""


@dataclass
class Slot:
    index: int
    device: str  # device name from cluster.devices
    device_index: int  # which physical device of the cluster carries the slot
    max_batch: int


@dataclass
class Trainer:
    id: int
    params: list[torch.Tensor]
    outer_opt: torch.optim.SGD
    global_batch: int  # requested global batch B: sequences per inner step over all its slots
    sampler: SubsetSampler
    tokens: int = 0
    direction: list[torch.Tensor] | None = None  # previous round's pooled statistics gradient
    smoothed: trust.Smoothed | None = None  # the batch test's running estimate
    events: list[dict] = field(default_factory=list)


@dataclass
class SlotPlan:
    """What one slot runs this round."""

    slot: Slot
    plan: switch.StepPlan  # a full inner step of the slot's local batch
    steps: list[tuple[int, ...]]  # micro-batches of each inner step this round
    stats_blocks: list[tuple[int, ...]] = field(default_factory=list)  # steps feeding the test

    @property
    def sequences(self) -> int:
        return sum(sum(m) for m in self.steps)

    def work(self) -> clock.SlotWork:
        return clock.SlotWork(
            self.slot.index, self.slot.device, self.slot.device_index, clock.run_length(self.steps)
        )


@dataclass
class TrainerRound:
    """One trainer's result of a round; :meth:`Engine.record` turns it into a metrics row."""

    trainer: Trainer
    slots: list[SlotPlan]
    lr_scale: float
    lrs: list[float]
    tokens: int = 0
    train_loss: float = math.nan
    val: dict | None = None
    round_stats: stats.RoundStats | None = None  # the statistics of the batch test, reduced
    estimate: stats.VarianceEstimate | None = None
    pseudo_gradient: list[torch.Tensor] | None = None  # kept as a scalars-mode direction
    test: dict | None = None
    sync: clock.TrainerSync | None = None


def initial_local_batch(settings: RunSettings, max_batches) -> int:
    """A slot's local batch at the start: ``initial_batch``, or the smallest max batch."""
    if settings.initial_batch == "max_batch":
        return min(max_batches)
    return int(settings.initial_batch)


@dataclass(frozen=True)
class MergeTransfer:
    """What a merge sends: ``messages`` transfers of ``payload_bytes`` to trainer ``kept``."""

    kept: int
    payload_bytes: int
    messages: int


def build_slots(cluster_cfg: dict, max_batches: dict[str, int]) -> list[Slot]:
    per_device = cluster_cfg["nodes_per_device"]
    slots = []
    device_index = 0
    for dev in cluster_cfg["devices"]:
        for _ in range(dev["count"]):
            for _ in range(per_device):
                slots.append(Slot(len(slots), dev["name"], device_index, max_batches[dev["name"]]))
            device_index += 1
    return slots


class Engine:
    """Trains one run for one seed; ``run()`` resumes from the last checkpoint."""

    def __init__(
        self,
        cfg: dict,
        settings: RunSettings,
        seed: int,
        data,
        max_batches: dict[str, int],
        curves: Mapping[str, clock.StepTimeCurve],
        checkpoint_dir: str | Path,
        device: torch.device | None = None,
        progress: bool = True,
        collective=None,
        resume_finished: bool = False,
    ):
        self.cfg = cfg
        # A finished checkpoint of the same fingerprint is resumed (at its last
        # round, so nothing is trained) rather than trained again: how one job
        # of every seed of a run (`adloco train --seed all`) re-writes the
        # outputs of the seeds a killed job had finished.
        self.resume_finished = resume_finished
        self.settings = settings
        self.seed = seed
        self.data = data
        self.train_split = data.split("train")
        self.val_split = data.split("validation")
        self.seq_len = data.seq_len_tokens
        self.ckpt_dir = Path(checkpoint_dir)
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.ckpt_dir / "metrics.jsonl"
        self.progress = progress
        self.device = device or torch.device("cpu")
        self.comm = collective or LocalCollective()
        self.slots = build_slots(cfg["cluster"], max_batches)
        self.curves = dict(curves)
        self.network = clock.Network.from_config(cfg["cluster"]["network"])
        self.slot_sharing = cfg["cluster"].get("slot_sharing", "concurrent")
        self.H = settings.inner_steps
        self.initial_local_batch = initial_local_batch(settings, max_batches.values())
        self.lr_reference_batch = settings.lr_reference_batch or self.initial_local_batch
        self.fingerprint = checkpoint.fingerprint(
            {
                "run": asdict(settings),
                "seed": seed,
                "model": cfg["model"],
                # How many processes run the slots does not change the trajectory,
                # so a run may resume under another number of them.
                "cluster": {
                    k: v for k, v in cfg["cluster"].items() if k != "processes_per_machine"
                },
                "max_batches": max_batches,
                "curves": {name: c.as_dict() for name, c in sorted(self.curves.items())},
                "data": data.manifest.get("splits"),
            }
        )
        model = build_model(cfg["model"], data.vocab_size, self.seq_len, seed)
        self.num_params = num_parameters(model)
        self.worker = Worker(model, settings, self.device)
        self.slot_runner = SlotRunner(settings.slot_execution, self.worker, settings)
        self.sync_payloads = sync_payload_bytes(settings, self.num_params)
        self.eval_seqs = evaluation_sample(self.val_split, settings.eval_sequences)
        self.round = 0
        self.tokens_total = 0
        self.communications = 0
        self.bytes_total = 0
        self.sim_time_s = 0.0
        self.wall_offset_s = 0.0
        self.slot_owner: dict[int, int] = {}
        self.nodes = {s.index: NodeState(s.index) for s in self.slots}
        self.trainers: list[Trainer] = []
        self.history: list[dict] = []

    # ----------------------------------------------------------- set-up
    def _new_outer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        """The trainer's optimizer of θ: outer SGD, or (ddp) the optimizer of every step."""
        if self.settings.method == "ddp":
            return ddp.make_optimizer(params, self.settings)
        return outer.make_outer_optimizer(
            params, self.settings.outer_lr, self.settings.outer_momentum, self.settings.nesterov
        )

    def _init_trainers(self) -> None:
        shared = [p.detach().clone().float() for p in self.worker.params]
        k = self.settings.initial_trainers
        # Equal shares of the slots; each trainer's global batch is initial_batch per slot.
        first_slots = merge.slot_counts(dict.fromkeys(range(k), len(self.slots)), len(self.slots))
        for t in range(k):
            if self.settings.init == "independent" and t > 0:
                model = build_model(
                    self.cfg["model"], self.data.vocab_size, self.seq_len, self.seed * 1000 + t
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

    # ----------------------------------------------------------- state
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
            self.nodes[slot] = NodeState(slot, _copy_state(local["nodes"].get(slot), self.device))
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

    def _wall_s(self) -> float:
        return self.wall_offset_s + (time.perf_counter() - self._t0)

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
        testing = self.settings.batch_test != "none"
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
        # The batch one optimizer step averages over: a slot's, or (ddp) the trainer's.
        step_batch = full_step if self.settings.method == "ddp" else full_step / len(slots)
        scale = schedule.lr_scale(step_batch, self.lr_reference_batch, self.settings.lr_scaling)
        res = TrainerRound(trainer, slots, scale, [lr * scale for lr in base_lrs])
        res.tokens = sum(p.sequences for p in slots) * self.seq_len
        # Host copies, so a rollback never costs device memory.
        theta = [p.detach().to("cpu", copy=True) for p in trainer.params]
        outer_state = _copy_outer_state(trainer.outer_opt.state_dict(), "cpu")
        inner = {
            p.slot.index: _copy_state(self.nodes[p.slot.index].inner_state, "cpu") for p in slots
        }
        for attempt in range(MAX_NAN_RETRIES + 1):
            failure = self._attempt(trainer, res, evaluate_now)
            if failure is None:
                return res
            log.warning("trainer %d round %d: non-finite %s", trainer.id, self.round + 1, failure)
            trainer.events.append({"type": "nan_rollback", "attempt": attempt + 1, "what": failure})
            with torch.no_grad():
                torch._foreach_copy_(trainer.params, [t.to(self.device) for t in theta])
            trainer.outer_opt.load_state_dict(_copy_outer_state(outer_state, self.device))
            for p in slots:
                self.nodes[p.slot.index].inner_state = _copy_state(inner[p.slot.index], self.device)
            # The samplers have moved past the offending batches, so the retry
            # sees fresh data from the same θ and optimizer states.
        lr_keys = [setting_key(self.cfg, self.settings.name, f) for f in ("inner_lr", "outer_lr")]
        raise TrainingDiverged(
            f"trainer {trainer.id}: non-finite {failure} in {MAX_NAN_RETRIES + 1} attempts of "
            f"round {self.round + 1}; lower {lr_keys[0]} (or {lr_keys[1]}) or check the data"
        )

    def _attempt(self, trainer: Trainer, res: TrainerRound, evaluate_now: bool) -> str | None:
        """One try at the trainer's round; what turned non-finite, or None."""
        if self.settings.method == "ddp":
            return self._attempt_ddp(trainer, res, evaluate_now)
        testing = self.settings.batch_test != "none"
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
        if self.settings.batch_test == "augmented_inner_product":
            # Copied before the outer step: the foreach Nesterov path of torch's
            # SGD (the default on CUDA) overwrites its gradient argument in place.
            res.pseudo_gradient = [d.clone() for d in delta]
        outer.apply_pseudo_gradient(trainer.outer_opt, trainer.params, delta)
        if not all(torch.isfinite(p).all() for p in trainer.params):
            return "parameters after the outer step"
        res.round_stats = round_stats
        res.estimate = None if round_stats is None else round_stats.reduce(self.comm)
        return self._evaluate(trainer, res, evaluate_now)

    def _attempt_ddp(self, trainer: Trainer, res: TrainerRound, evaluate_now: bool) -> str | None:
        """One try at a ddp trainer's round (:mod:`adloco.engine.ddp`)."""
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
            self.settings.batch_test,
            usable,
            trainer.global_batch,
            eta=self.settings.eta,
            vartheta=self.settings.vartheta,
            nu=self.settings.nu,
            max_growth=self.settings.max_batch_growth,
        )
        if self.settings.batch_test == "augmented_inner_product":
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
        with torch.no_grad():
            merged = merge.average_tensors([t.params for t in group], weights)
            torch._foreach_copy_(kept.params, merged)
            if with_momentum:
                # A trainer that has no momentum yet contributes zeros.
                momenta = [outer.momentum_buffers(t.outer_opt, t.params) for t in group]
                outer.set_momentum_buffers(
                    kept.outer_opt, kept.params, merge.average_tensors(momenta, weights)
                )
        new_batch = merge.merged_batch([t.global_batch for t in group], self.settings.merge_batch)
        subset = torch.unique(torch.cat([t.sampler.subset for t in group]))
        kept.sampler.replace_subset(subset)
        kept.tokens = sum(t.tokens for t in group)
        kept.direction = None  # directions of different trainers do not average meaningfully
        kept.smoothed = trust.pool([t.smoothed for t in group], weights)
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
        per_step = self.settings.method == "ddp"
        for res in results:
            into = merged is not None and res.trainer.id == merged.kept
            res.sync = clock.TrainerSync(
                len(res.slots),
                self.sync_payloads,
                merged.payload_bytes if into else 0,
                merged.messages if into else 0,
                # ddp all-reduces after every step of the round.
                max(len(p.steps) for p in res.slots) if per_step else 1,
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
            trainer, plans = res.trainer, [p.plan for p in res.slots]
            modes = {p.mode for p in plans}
            steps = max(len(p.steps) for p in res.slots)  # fewer in a round cut to the budget
            self.communications += res.sync.allreduce_count
            row_bytes = res.sync.bytes_moved()
            self.bytes_total += row_bytes
            trainer.tokens += res.tokens
            row = MetricsRow(
                run=self.settings.name,
                seed=self.seed,
                method=self.settings.method,
                round=r,
                trainer=trainer.id,
                active_trainers=len(results),
                nodes=len(res.slots),
                requested_batch=sum(p.requested for p in plans),
                local_batch=max(p.requested for p in plans),
                effective_batch=sum(p.effective for p in plans),
                micro_batch=max(p.micro_batch for p in plans),
                accum_steps=max(p.accum_steps for p in plans),
                switch_mode=next(m for m in ("accumulate", "capped", "plain") if m in modes),
                inner_steps=steps,
                tokens=res.tokens,
                tokens_total=self.tokens_total,
                communications=self.communications,
                bytes=row_bytes,
                bytes_total=self.bytes_total,
                train_loss=res.train_loss,
                val_loss=None if res.val is None else res.val["loss"],
                val_perplexity=None if res.val is None else res.val["perplexity"],
                val_loss_stderr=None if res.val is None else res.val["loss_stderr"],
                lr_scale=res.lr_scale,
                inner_lr=res.lrs[steps - 1],
                inner_lr_sum=sum(res.lrs[:steps]),
                sim_time_s=self.sim_time_s,
                round_time_s=round_s,
                wall_time_s=self._wall_s(),
                stats=res.test,
                epochs=trainer.sampler.epoch,
                events=trainer.events,
                slot_work=[p.work().as_dict() for p in res.slots],
                sync=res.sync.as_dict(),
            )
            rows.append(row.as_dict())
            trainer.events = []
        return rows

    def trainer_by_id(self, trainer_id: int) -> Trainer:
        return next(t for t in self.trainers if t.id == trainer_id)

    def _finished(self, r: int, pending_tokens: int = 0) -> bool:
        """Whether the run ends after round ``r``, with ``pending_tokens`` not yet counted."""
        return (
            r >= self.settings.max_rounds
            or self.tokens_total + pending_tokens >= self.settings.max_tokens
        )

    # ----------------------------------------------------------- driver
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
        # Progress in tokens: runs end at the token budget, after however many rounds.
        bar = _progress(
            self.settings.max_tokens,
            min(self.tokens_total, self.settings.max_tokens),
            f"{self.settings.name} s{self.seed}",
            self.progress and self.comm.is_writer,
        )
        try:
            while not self._finished(self.round):
                before = self.tokens_total
                rows = self.run_round()
                if self.comm.is_writer:
                    with open(self.metrics_path, "a") as fh:
                        for row in rows:
                            fh.write(json.dumps(row) + "\n")
                self.history.extend(rows)
                if self.round % self.settings.checkpoint_every_rounds == 0 or self._finished(
                    self.round
                ):
                    self.save_checkpoint()
                bar.update(
                    min(self.tokens_total, self.settings.max_tokens) - min(before, bar.total)
                )
                bar.set_postfix(_postfix(rows))
        finally:
            bar.close()
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
        dtype = DTYPES[self.cfg["model"]["dtype"]]
        return self.worker.model.to(dtype)


def _decision(abstain: str, old: int, new: int, requested: float | None) -> str:
    """Why the batch test changed the batch or not, for the metrics row."""
    if abstain:
        return f"kept: {abstain}"
    if requested is None:
        return "kept: the test could not say"
    if new > old:
        return "raised" if new >= math.ceil(requested) else "raised to the growth cap"
    return "kept: the test asks for no more"


def _copy_state(inner_state: list[dict] | None, device) -> list[dict] | None:
    """A copy of a slot's inner optimizer state on ``device`` (AdamW's step counters stay put)."""
    if inner_state is None:
        return None
    return [
        {k: v.clone() if k == "step" else v.to(device, copy=True) for k, v in s.items()}
        for s in inner_state
    ]


def _copy_outer_state(state: dict, device) -> dict:
    """A copy of an outer optimizer's state_dict with its tensors on ``device``."""
    return {
        "state": {
            k: {n: v.to(device, copy=True) if torch.is_tensor(v) else v for n, v in s.items()}
            for k, s in state["state"].items()
        },
        "param_groups": [dict(g) for g in state["param_groups"]],
    }


def _progress(total: int, initial: int, desc: str, enabled: bool):
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="tok",
        unit_scale=True,
        disable=not enabled,
        dynamic_ncols=True,
    )


def _postfix(rows: list[dict]) -> dict:
    ppl = [r["val_perplexity"] for r in rows if r["val_perplexity"] is not None]
    return {
        "round": rows[0]["round"],
        "trainers": len(rows),
        "batch": ",".join(str(r["requested_batch"]) for r in rows),
        "val_ppl": f"{min(ppl):.1f}" if ppl else "-",
    }
