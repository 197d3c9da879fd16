"""The round loop: trainers, node slots, outer steps, batch tests, merges.

One round: node slots are (re)allocated to trainers in proportion to their
requested batches; every slot of a trainer runs H inner steps from the
trainer's θ (``inner.Worker``); the trainer averages its slots' parameters,
weighted by tokens, and takes an outer step; the batch test turns the first
inner step's gradient statistics into the next requested batch; every
``merge_frequency`` rounds the trainers with the smallest requested batches
merge. Then a metrics row per trainer is written and the state is
checkpointed. Slots run one after another in one process, so a seed gives
bit-identical results on CPU; the distributed backend must match this engine.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from adloco.algo import batch_tests, merge, outer, schedule, stats, switch
from adloco.engine import checkpoint
from adloco.engine.collective import LocalCollective
from adloco.engine.inner import NodeState, NonFiniteLoss, Worker
from adloco.engine.ledger import Ledger
from adloco.engine.sampler import SubsetSampler, draw_subset
from adloco.model import DTYPES, build_model, evaluate, num_parameters

log = logging.getLogger(__name__)

MAX_NAN_RETRIES = 3
PSEUDO_GRAD_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class Slot:
    index: int
    device: str  # device name from cluster.devices
    tflops: float  # this slot's share of its device's speed
    max_batch: int


@dataclass
class Trainer:
    id: int
    params: list[torch.Tensor]
    outer_opt: torch.optim.SGD
    requested_batch: int
    sampler: SubsetSampler
    tokens: int = 0
    direction: list[torch.Tensor] | None = None  # previous round's pooled statistics gradient
    events: list[dict] = field(default_factory=list)


def build_slots(cluster_cfg: dict, max_batches: dict[str, int]) -> list[Slot]:
    per_device = cluster_cfg["nodes_per_device"]
    slots = []
    for dev in cluster_cfg["devices"]:
        for _ in range(dev["count"] * per_device):
            slots.append(
                Slot(
                    len(slots),
                    dev["name"],
                    dev["speed_tflops"] / per_device,
                    max_batches[dev["name"]],
                )
            )
    return slots


class Engine:
    """Trains one run for one seed; ``run()`` resumes from the last checkpoint."""

    def __init__(
        self,
        cfg: dict,
        run_cfg: dict,
        seed: int,
        data,
        max_batches: dict[str, int],
        checkpoint_dir: str | Path,
        device: torch.device | None = None,
        progress: bool = True,
        collective=None,
    ):
        self.cfg = cfg
        self.tc = run_cfg
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
        self.H = run_cfg["inner_steps"]
        self.fingerprint = checkpoint.fingerprint(
            {
                "run": run_cfg,
                "seed": seed,
                "model": cfg["model"],
                # How many processes run the slots does not change the trajectory,
                # so a run may resume under another number of them.
                "cluster": {
                    k: v for k, v in cfg["cluster"].items() if k != "processes_per_machine"
                },
                "max_batches": max_batches,
                "data": data.manifest.get("splits"),
            }
        )
        model = build_model(cfg["model"], data.vocab_size, self.seq_len, seed)
        self.num_params = num_parameters(model)
        self.worker = Worker(model, run_cfg, self.device)
        self.ledger = Ledger(
            num_params=self.num_params,
            pseudo_grad_bytes_per_elem=PSEUDO_GRAD_BYTES[run_cfg["pseudo_grad_dtype"]],
            bandwidth_bytes_s=cfg["cluster"]["network"]["bandwidth_gbit_s"] * 1e9 / 8,
            latency_s=cfg["cluster"]["network"]["latency_s"],
        )
        n_val = len(self.val_split)
        n_eval = min(run_cfg["eval_sequences"], n_val)
        eval_idx = torch.linspace(0, n_val - 1, n_eval).round().long().unique()
        self.eval_seqs = self.val_split.get(eval_idx)
        self.round = 0
        self.tokens_total = 0
        self.wall_offset_s = 0.0
        self.slot_owner: dict[int, int] = {}
        self.nodes = {s.index: NodeState(s.index) for s in self.slots}
        self.trainers: list[Trainer] = []
        self.history: list[dict] = []

    # ----------------------------------------------------------- set-up
    def _new_outer(self, params: list[torch.Tensor]) -> torch.optim.SGD:
        return outer.make_outer_optimizer(
            params, self.tc["outer_lr"], self.tc["outer_momentum"], self.tc["nesterov"]
        )

    def _init_trainers(self) -> None:
        shared = [p.detach().clone().float() for p in self.worker.params]
        for k in range(self.tc["initial_trainers"]):
            if self.tc["init"] == "independent" and k > 0:
                model = build_model(
                    self.cfg["model"], self.data.vocab_size, self.seq_len, self.seed * 1000 + k
                )
                params = [p.detach().clone().float().to(self.device) for p in model.parameters()]
            else:
                params = [p.clone() for p in shared]
            subset = draw_subset(
                len(self.train_split), self.tc["subset_fraction"], self.seed * 7919 + k
            )
            sampler = SubsetSampler(subset, seed=self.seed * 104_729 + k)
            self.trainers.append(
                Trainer(k, params, self._new_outer(params), self.tc["initial_batch"], sampler)
            )

    # ----------------------------------------------------------- state
    def state_dict(self) -> dict:
        """The replicated state: identical on every process, saved once (by rank 0)."""
        return {
            "round": self.round,
            "tokens_total": self.tokens_total,
            "wall_time_s": self._wall_s(),
            "slot_owner": [[s, t] for s, t in sorted(self.slot_owner.items())],
            "trainers": [
                {
                    "id": t.id,
                    "params": [p.cpu() for p in t.params],
                    "outer_state": t.outer_opt.state_dict(),
                    "requested_batch": t.requested_batch,
                    "sampler": t.sampler.state_dict(),
                    "tokens": t.tokens,
                    "direction": None if t.direction is None else [d.cpu() for d in t.direction],
                }
                for t in self.trainers
            ],
            "ledger": self.ledger.state_dict(),
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
                    ts["requested_batch"],
                    SubsetSampler.from_state_dict(ts["sampler"]),
                    ts["tokens"],
                    None if direction is None else [d.to(self.device) for d in direction],
                )
            )
        for slot in self.nodes:
            self.nodes[slot] = NodeState(slot, _copy_state(local["nodes"].get(slot), self.device))
        self.ledger = Ledger.from_state_dict(state["ledger"])
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
            values += [t.id, t.requested_batch, t.sampler.epoch, t.sampler.position, int(bits)]
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
    def _allocate(self) -> int:
        demands = {t.id: float(t.requested_batch) for t in self.trainers}
        owner = merge.allocate_slots(demands, len(self.slots), self.slot_owner or None)
        moved = 0
        for slot, trainer in owner.items():
            if self.slot_owner.get(slot) != trainer:
                # Inner optimizer moments belong to the trajectory a slot followed;
                # a slot that joins another trainer starts them afresh.
                self.nodes[slot].inner_state = None
                moved += slot in self.slot_owner
        self.slot_owner = owner
        return moved

    def _slots_of(self, trainer_id: int) -> list[Slot]:
        return [s for s in self.slots if self.slot_owner[s.index] == trainer_id]

    def _train_trainer(
        self, trainer: Trainer, plans: dict[int, switch.StepPlan], lrs: list[float]
    ) -> dict:
        slots = self._slots_of(trainer.id)
        test_on = self.tc["batch_test"] != "none"
        node_tokens = {s.index: self.H * plans[s.index].effective * self.seq_len for s in slots}
        planned = sum(node_tokens.values())
        comm_dtype = DTYPES[self.tc["pseudo_grad_dtype"]]
        for attempt in range(MAX_NAN_RETRIES + 1):
            # Host copies, so a rollback never costs device memory.
            snapshot = {s.index: _copy_state(self.nodes[s.index].inner_state, "cpu") for s in slots}
            acc = (
                stats.GradientStatsAccumulator(trainer.params, trainer.direction)
                if test_on
                else None
            )
            # Σ_m w_m (θ − θ_m): each node's pseudo-gradient at the communication
            # dtype, weighted by its share of the trainer's tokens.
            delta = [torch.zeros_like(p) for p in trainer.params]
            # loss sum, predicted tokens, non-finite flag: reduced with delta.
            scalars = torch.zeros(3, dtype=torch.float64, device=self.device)
            for s in slots:
                plan = plans[s.index]
                # Every process draws every slot's indices so the samplers stay in step.
                idx = trainer.sampler.take(self.H * plan.effective).view(self.H, plan.effective)
                if not self.comm.owns(s.index):
                    continue
                try:
                    res = self.worker.run_node(
                        trainer.params,
                        self.nodes[s.index],
                        idx,
                        self.train_split.get,
                        plan,
                        lrs,
                        stats=acc,
                        stats_groups=self.tc["stats_microbatches"],
                    )
                except NonFiniteLoss as exc:
                    log.warning("trainer %d round %d: %s", trainer.id, self.round + 1, exc)
                    scalars[2] += 1
                    continue
                with torch.no_grad():
                    node_delta = torch._foreach_sub(trainer.params, self.worker.params)
                    if comm_dtype != torch.float32:
                        node_delta = [d.to(comm_dtype).float() for d in node_delta]
                    torch._foreach_add_(delta, node_delta, alpha=res.tokens / planned)
                scalars[0] += res.loss_sum
                scalars[1] += res.loss_tokens
            self.comm.all_reduce_sum_([*delta, scalars])
            if scalars[2] == 0:
                break
            for s in slots:
                self.nodes[s.index].inner_state = _copy_state(snapshot[s.index], self.device)
            # Remedy: the samplers have moved past the offending batches, so the
            # retry sees fresh data from the same θ and inner optimizer states.
            trainer.events.append({"type": "nan_rollback", "attempt": attempt + 1})
        else:
            raise RuntimeError(
                f"trainer {trainer.id}: non-finite loss in {MAX_NAN_RETRIES + 1} attempts of round "
                f"{self.round + 1}; lower train.inner_lr or check the data"
            )
        outer.apply_pseudo_gradient(trainer.outer_opt, trainer.params, delta)
        return {
            "slots": slots,
            "stats": self.comm.reduce_stats(acc) if acc is not None else None,
            "acc": acc,
            "loss": float(scalars[0] / max(float(scalars[1]), 1.0)),
            "tokens": planned,
            "node_tokens": node_tokens,
        }

    def _batch_test(self, trainer: Trainer, group_stats, acc, nodes: int) -> dict | None:
        if group_stats is None:
            return None
        est = stats.estimate(group_stats)
        new_batch, requested_global = batch_tests.next_batch(
            self.tc["batch_test"],
            est,
            trainer.requested_batch,
            nodes,
            eta=self.tc["eta"],
            vartheta=self.tc["vartheta"],
            nu=self.tc["nu"],
            max_growth=self.tc["max_batch_growth"],
        )
        if self.tc["batch_test"] == "augmented_inner_product":
            trainer.direction = [g.detach().clone() for g in acc.pooled_sum()]
        if new_batch != trainer.requested_batch:
            trainer.events.append(
                {"type": "batch_change", "from": trainer.requested_batch, "to": new_batch}
            )
            trainer.requested_batch = new_batch
        if est is None:
            return {"groups": group_stats.groups, "requested_global": None}
        return {
            "trace_cov": est.trace_cov,
            "grad_sqnorm": est.grad_sqnorm,
            "batch_grad_sqnorm": est.batch_grad_sqnorm,
            "ip_var": est.ip_var,
            "orth_var": est.orth_var,
            "groups": est.groups,
            "samples": est.samples,
            "requested_global": requested_global,
        }

    def _merge(self) -> tuple[int, float]:
        """Merge the trainers with the smallest requested batches; bytes and seconds spent."""
        batches = {t.id: t.requested_batch for t in self.trainers}
        ids = merge.select_for_merge(batches, self.tc["merge_count"])
        if len(ids) < 2:
            return 0, 0.0
        keep_id = merge.kept_trainer(batches, ids)
        group = [t for t in self.trainers if t.id in ids]
        weights = merge.merge_weights([t.requested_batch for t in group])
        kept = next(t for t in group if t.id == keep_id)
        with torch.no_grad():
            merged = merge.average_tensors([t.params for t in group], weights)
            torch._foreach_copy_(kept.params, merged)
            with_momentum = self.tc["outer_momentum"] > 0
            if with_momentum:
                # A trainer that has no momentum yet contributes zeros.
                momenta = [outer.momentum_buffers(t.outer_opt, t.params) for t in group]
                outer.set_momentum_buffers(
                    kept.outer_opt, kept.params, merge.average_tensors(momenta, weights)
                )
        new_batch = merge.merged_batch([t.requested_batch for t in group])
        subset = torch.unique(torch.cat([t.sampler.subset for t in group]))
        kept.sampler.replace_subset(subset)
        kept.tokens = sum(t.tokens for t in group)
        if kept.direction is not None:
            kept.direction = None  # directions of different trainers do not average meaningfully
        kept.events.append(
            {
                "type": "merge",
                "merged": ids,
                "kept": keep_id,
                "weights": weights,
                "batches": [t.requested_batch for t in group],
                "batch": new_batch,
            }
        )
        kept.requested_batch = new_batch
        self.trainers = [t for t in self.trainers if t.id == keep_id or t.id not in ids]
        return self.ledger.merge(len(ids) - 1, with_momentum)

    def _round(self) -> list[dict]:
        r = self.round + 1
        moved = self._allocate()
        plans = {
            s.index: switch.plan_step(
                self._trainer(self.slot_owner[s.index]).requested_batch,
                s.max_batch,
                self.tc["switch"],
                self.tc["switch_lambda"],
            )
            for s in self.slots
        }
        planned_round = sum(self.H * p.effective * self.seq_len for p in plans.values())
        # Every slot of the round sees the schedule advance with the cluster's
        # tokens, in lock-step, whatever order the slots run in here.
        lrs = [
            schedule.inner_lr(
                self.tokens_total + planned_round * h / self.H,
                self.tc["max_tokens"],
                self.tc["inner_lr"],
                self.tc["warmup_fraction"],
                self.tc["min_lr_ratio"],
            )
            for h in range(self.H)
        ]
        if moved:
            self.trainers[0].events.append({"type": "realloc", "slots_moved": moved})
        results = {}
        round_time_s = 0.0
        for trainer in self.trainers:
            res = self._train_trainer(trainer, plans, lrs)
            trainer.tokens += res["tokens"]
            nodes = len(res["slots"])
            res["stats"] = self._batch_test(trainer, res["stats"], res["acc"], nodes)
            res["bytes"], comm_s = self.ledger.trainer_round(nodes, res["acc"] is not None)
            compute_s = max(
                self.ledger.compute_time_s(res["node_tokens"][s.index], s.tflops)
                for s in res["slots"]
            )
            round_time_s = max(round_time_s, compute_s + comm_s)
            res["plans"] = [plans[s.index] for s in res["slots"]]
            results[trainer.id] = res
        self.tokens_total += sum(res["tokens"] for res in results.values())

        evaluate_now = r % self.tc["eval_every_rounds"] == 0 or self._finished(r)
        val = {}
        if evaluate_now:
            for trainer in self.trainers:
                self.worker.load(trainer.params)
                val[trainer.id] = evaluate(self.worker.model, self.eval_seqs, self.tc["eval_batch"])

        trained = list(self.trainers)
        merge_bytes = 0
        if (
            self.tc["merge"] != "none"
            and r % self.tc["merge_frequency"] == 0
            and len(self.trainers) > 1
        ):
            merge_bytes, merge_s = self._merge()
            round_time_s += merge_s
        self.ledger.sim_time_s += round_time_s

        rows = []
        for trainer in trained:
            res = results[trainer.id]
            self.ledger.communications += 1
            row_bytes = res["bytes"] + (
                merge_bytes if any(e["type"] == "merge" for e in trainer.events) else 0
            )
            self.ledger.bytes_total += row_bytes
            p_list = res["plans"]
            modes = {p.mode for p in p_list}
            v = val.get(trainer.id)
            rows.append(
                {
                    "run": self.tc["name"],
                    "seed": self.seed,
                    "method": self.tc["method"],
                    "round": r,
                    "trainer": trainer.id,
                    "active_trainers": len(trained),
                    "nodes": len(res["slots"]),
                    "requested_batch": p_list[0].requested,
                    "effective_batch": max(p.effective for p in p_list),
                    "global_batch": sum(p.effective for p in p_list),
                    "micro_batch": max(max(p.micro_batches) for p in p_list),
                    "accum_steps": max(p.accum_steps for p in p_list),
                    "switch_mode": "accumulate"
                    if "accumulate" in modes
                    else ("capped" if "capped" in modes else "plain"),
                    "inner_steps": self.H,
                    "tokens": res["tokens"],
                    "tokens_total": self.tokens_total,
                    "communications": self.ledger.communications,
                    "bytes": row_bytes,
                    "bytes_total": self.ledger.bytes_total,
                    "train_loss": res["loss"],
                    "val_loss": None if v is None else v["loss"],
                    "val_perplexity": None if v is None else v["perplexity"],
                    "inner_lr": lrs[-1],
                    "sim_time_s": self.ledger.sim_time_s,
                    "wall_time_s": self._wall_s(),
                    "stats": res["stats"],
                    "epochs": trainer.sampler.epoch,
                    "events": trainer.events,
                }
            )
            trainer.events = []
        self.round = r
        return rows

    def _trainer(self, trainer_id: int) -> Trainer:
        return next(t for t in self.trainers if t.id == trainer_id)

    def _finished(self, r: int) -> bool:
        return r >= self.tc["max_rounds"] or self.tokens_total >= self.tc["max_tokens"]

    # ----------------------------------------------------------- driver
    def run(self) -> list[dict]:
        """Train to the end, resuming from the checkpoint folder; return all rows."""
        self._t0 = time.perf_counter()
        if not self.load_checkpoint():
            self._init_trainers()
            if self.comm.is_writer:
                self.metrics_path.write_text("")
        else:
            log.info("resuming %s seed %d after round %d", self.tc["name"], self.seed, self.round)
            if self.comm.is_writer:
                self._truncate_metrics()
        self._agree("at the start")
        bar = _progress(
            self.tc["max_rounds"],
            self.round,
            f"{self.tc['name']} s{self.seed}",
            self.progress and self.comm.is_writer,
        )
        try:
            while not self._finished(self.round):
                rows = self._round()
                if self.comm.is_writer:
                    with open(self.metrics_path, "a") as fh:
                        for row in rows:
                            fh.write(json.dumps(row) + "\n")
                self.history.extend(rows)
                if self.round % self.tc["checkpoint_every_rounds"] == 0 or self._finished(
                    self.round
                ):
                    self.save_checkpoint()
                bar.update(1)
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
            saved = checkpoint.load(self.ckpt_dir, self.fingerprint)
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
        return self._trainer(best_id)

    def export_model(self, trainer: Trainer) -> torch.nn.Module:
        self.worker.load(trainer.params)
        dtype = DTYPES[self.cfg["model"]["dtype"]]
        return self.worker.model.to(dtype)


def _copy_state(inner_state: list[dict] | None, device) -> list[dict] | None:
    """A copy of a slot's inner optimizer state on ``device`` (AdamW's step counters stay put)."""
    if inner_state is None:
        return None
    return [
        {k: v.clone() if k == "step" else v.to(device, copy=True) for k, v in s.items()}
        for s in inner_state
    ]


def _progress(total: int, initial: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="round",
        disable=not enabled,
        dynamic_ncols=True,
    )


def _postfix(rows: list[dict]) -> dict:
    ppl = [r["val_perplexity"] for r in rows if r["val_perplexity"] is not None]
    return {
        "trainers": len(rows),
        "batch": ",".join(str(r["requested_batch"]) for r in rows),
        "val_ppl": f"{min(ppl):.1f}" if ppl else "-",
    }
