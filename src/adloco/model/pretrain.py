"""``adloco pretrain``: the experiment's base model, trained once by a plain AdamW loop.

The paper continues pretraining a pretrained model; averaging trainers that
share a pretrained start is meaningful, averaging trainers that diverged from
a random start is not. So every run of an experiment with ``model.source:
base`` starts from the model this stage writes. It runs after tokenization,
beside calibration, and before variance analysis and training.

The loop is the plainest there is, to be read top to bottom and to serve as
the sanity anchor of the engine's numbers: one model from the seeded random
init of ``model``, one AdamW over it, batches of ``pretrain.batch_size``
sequences drawn in a seeded order from the **base** split (documents the
runs never train on, ``data.base_fraction``), the learning rate warmed up and
decayed by tokens (:func:`adloco.algo.schedule.inner_lr`), the gradient
clipped, ``pretrain.max_tokens`` tokens. It evaluates on the runs' own
validation sample (``train.eval_sequences``), so the base's perplexity and
the runs' are measured alike.

Outputs in ``results/<experiment>/base/``: ``model/`` (the model, the
tokenizer and a model card, :func:`adloco.model.hf_export.save_model_folder`;
``AutoModelForCausalLM.from_pretrained`` loads it), ``metrics.jsonl`` (one
row per evaluation) and ``base.json`` (its final perplexity, the sha256 of
every file of ``model/`` but the card, which ``adloco train`` and ``adloco
variance`` check before using it, and the sha256 of the tokenized data's
``manifest.json``, which they and ``adloco report`` check against their
``--data``: a base pretrained on other data is refused). Checkpoints in
``results/<experiment>/checkpoints/base/`` (the engine's format, one
process) make a killed job resume exactly.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from adloco.algo.schedule import inner_lr
from adloco.config import Config, ConfigError, ModelConfig, PretrainConfig, load_config, thaw
from adloco.core import numerics, paths
from adloco.core.io import atomic_dir, check_replaceable, write_json_atomic
from adloco.data.reader import TokenData
from adloco.engine import checkpoint
from adloco.engine.live_curves import LiveCurves
from adloco.engine.progress import Progress
from adloco.engine.sampler import SubsetSampler
from adloco.model.base import DATA_KEY, MODEL_DIR, data_digest, model_digests
from adloco.model.hf_export import (
    HubMetadata,
    Provenance,
    command_line,
    hub_metadata,
    save_model_folder,
)
from adloco.model.llama import batch_loss, build_model, evaluate, evaluation_sample

log = logging.getLogger(__name__)
# The writer named in --out's manifest (adloco.core.io.check_replaceable).
WRITER = "adloco pretrain"

BASE_SPLIT = "base"
# Seeds of the base's data order, apart from every run's.
SAMPLER_SEED_OFFSET = 7_777_777


class Pretraining:
    """The base model's training state: model, optimizer, data order, progress.

    ``settings``: the ``pretrain`` section; ``model``: the ``model`` section
    (its sizes; the seeded random init of ``seed``); evaluation on
    ``eval_sequences`` of the validation split in batches of ``eval_batch``
    (the runs' ``train.eval_sequences`` and ``train.eval_batch``).
    """

    def __init__(
        self,
        settings: PretrainConfig,
        model: ModelConfig,
        seed: int,
        data: TokenData,
        ckpt_dir: str | Path,
        *,
        eval_sequences: int,
        eval_batch: int,
    ):
        self.settings = settings
        self.seed = seed
        self.split = data.split(BASE_SPLIT)
        self.eval_seqs = evaluation_sample(data.split("validation"), eval_sequences)
        self.eval_batch = eval_batch
        self.seq_len = data.seq_len_tokens
        self.model = build_model(model, data.vocab_size, self.seq_len, seed)
        self.model.train()
        s = self.settings
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=s.lr, betas=s.betas, weight_decay=s.weight_decay
        )
        self.sampler = SubsetSampler(torch.arange(len(self.split)), seed=seed + SAMPLER_SEED_OFFSET)
        self.step = 0
        self.tokens = 0
        self.history: list[dict] = []
        self.ckpt_dir = Path(ckpt_dir)
        self.fingerprint = checkpoint.fingerprint(
            {
                "pretrain": asdict(s),
                "model": thaw(model),
                "seed": seed,
                "eval": [eval_sequences, self.eval_batch],
                "data": data.manifest.get("splits"),
            }
        )

    @classmethod
    def from_config(cls, config: Config, data: TokenData, ckpt_dir: str | Path) -> Pretraining:
        """The base model's training of ``config`` (which must have a ``pretrain`` section)."""
        if config.pretrain is None:
            raise ConfigError("pretrain: the section is missing (model.source is base)")
        return cls(
            config.pretrain,
            config.model,
            config.seed,
            data,
            ckpt_dir,
            eval_sequences=config.train.eval_sequences,
            eval_batch=config.train.eval_batch,
        )

    # ----------------------------------------------------------- state
    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "sampler": self.sampler.state_dict(),
            "step": self.step,
            "tokens": self.tokens,
            "history": json.dumps(self.history),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.sampler = SubsetSampler.from_state_dict(state["sampler"])
        self.step = state["step"]
        self.tokens = state["tokens"]
        self.history = json.loads(state["history"])

    def save(self) -> None:
        checkpoint.save(
            self.ckpt_dir,
            self.step,
            self.fingerprint,
            self.state_dict(),
            {"nodes": [], "rng": torch.get_rng_state()},
            rank=0,
            world_size=1,
            barrier=lambda: None,
        )

    def resume(self) -> bool:
        """Load the last checkpoint; a stale one (other settings or code) is set aside."""
        try:
            saved = checkpoint.load(self.ckpt_dir, self.fingerprint)
        except checkpoint.StaleCheckpointError as exc:
            log.warning("%s; moved to %s, starting over", exc, checkpoint.set_aside(self.ckpt_dir))
            return False
        if saved is None:
            return False
        self.load_state_dict(saved.shared)
        torch.set_rng_state(saved.local(0, lambda slot: False)["rng"])
        log.info("resuming the base model after step %d (%d tokens)", self.step, self.tokens)
        return True

    # ----------------------------------------------------------- loop
    def done(self) -> bool:
        return self.tokens >= self.settings.max_tokens

    def train_step(self) -> float:
        """One optimizer step; the batch's mean loss per predicted token."""
        s = self.settings
        left = math.ceil((s.max_tokens - self.tokens) / self.seq_len)
        seqs = self.split.get(self.sampler.take(min(s.batch_size, left)))
        lr = inner_lr(self.tokens, s.max_tokens, s.lr, s.warmup_fraction, s.min_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_sum, predicted = batch_loss(self.model, seqs)
        loss = loss_sum / predicted
        loss.backward()
        if s.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.grad_clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += seqs.numel()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise ValueError(
                f"the base model's loss is {value} at step {self.step}; lower pretrain.lr"
            )
        return value

    def evaluate(self, train_loss: float) -> dict:
        val = evaluate(self.model, self.eval_seqs, self.eval_batch)
        row = {
            "step": self.step,
            "tokens": self.tokens,
            "lr": self.optimizer.param_groups[0]["lr"],
            "train_loss": train_loss,
            "val_loss": val["loss"],
            "val_perplexity": val["perplexity"],
            "val_loss_stderr": val["loss_stderr"],
        }
        self.history.append(row)
        return row

    def run(self, progress: bool = True, live_dir: str | Path | None = None) -> list[dict]:
        """Train to ``pretrain.max_tokens``, resuming from the checkpoint folder.

        ``progress``: a bar on a terminal (else one line per evaluation);
        ``live_dir``: the folder of the live curves (None: none).
        """
        self.resume()
        s = self.settings
        started = time.perf_counter()
        shown = Progress("base", s.max_tokens, self.tokens, True, progress)
        curves = LiveCurves(live_dir, [(r["tokens"], eval_scalars(r)) for r in self.history])
        try:
            while not self.done():
                loss = self.train_step()
                last = self.done()
                if self.step % s.eval_every_steps == 0 or last:
                    row = self.evaluate(loss)
                    fields = {"step": str(self.step), "val_ppl": f"{row['val_perplexity']:.2f}"}
                    shown.report(self.tokens, fields, time.perf_counter() - started)
                    curves.add(self.tokens, eval_scalars(row))
                else:
                    shown.advance(self.tokens)
                if self.step % s.checkpoint_every_steps == 0 or last:
                    self.save()
        finally:
            shown.close()
            curves.close()
        return self.history


def eval_scalars(row: dict) -> dict[str, float]:
    """An evaluation's live curves."""
    return {
        "val/perplexity": row["val_perplexity"],
        "val/loss": row["val_loss"],
        "train/loss": row["train_loss"],
        "train/lr": row["lr"],
    }


def write_base(
    training: Pretraining,
    data: TokenData,
    out: str | Path,
    seconds: float,
    *,
    experiment: str,
    command: str,
    hub: HubMetadata,
) -> dict:
    """model/, metrics.jsonl and base.json into ``out`` (replaced atomically); base.json.

    ``experiment``, ``command`` (the command line that writes ``out``) and
    ``hub`` (:func:`adloco.model.hf_export.hub_metadata`) go into the model card.
    """
    final = training.history[-1]
    provenance = Provenance(
        experiment=experiment,
        what="the base model",
        about="Trained by `adloco pretrain`, plain AdamW on the base split of the tokenized "
        "data (documents the runs never train on); every run of the experiment starts from it.",
        tokens=training.tokens,
        val_perplexity=final["val_perplexity"],
        command=command,
        tags=("base-model",),
        hub=hub,
    )
    with atomic_dir(out, WRITER, "--out") as tmp:
        save_model_folder(
            tmp / MODEL_DIR, training.model, data.tokenizer_dir, training.seq_len, provenance
        )
        paths.metrics_file(tmp).write_text("".join(json.dumps(r) + "\n" for r in training.history))
        summary = {
            "val_perplexity": final["val_perplexity"],
            "val_loss": final["val_loss"],
            "val_loss_stderr": final["val_loss_stderr"],
            "eval_sequences": int(training.eval_seqs.size(0)),
            "tokens": training.tokens,
            "steps": training.step,
            "split": BASE_SPLIT,
            "split_sequences": len(training.split),
            "epochs": training.tokens / (len(training.split) * training.seq_len),
            "train_seconds": seconds,
            # What made the base, which every stage that starts from it checks
            # (adloco.model.base.check_made_for; the shape is in model/config.json).
            "seed": training.seed,
            "settings": {**asdict(training.settings), "betas": list(training.settings.betas)},
            "model_dir": MODEL_DIR,
            "model_sha256": model_digests(tmp / MODEL_DIR),
            # The data it was pretrained on (adloco.model.base.check_pretrained_on).
            DATA_KEY: data_digest(data.folder),
            # The CPU float paths and threads it was trained with (docs/numerics.md).
            "numerics": numerics.record(),
        }
        write_json_atomic(paths.base_summary_file(tmp), summary)
    return summary


@dataclass(frozen=True, kw_only=True)
class PretrainRequest:
    """What ``adloco pretrain`` is asked: its command line, typed (:mod:`adloco.stages.pretrain`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks). The paths are
    kept as given: base.json's command line quotes them.
    """

    config: str | Path  # the configuration YAML
    data: str | Path  # the tokenized data folder (with a base split)
    out: str | Path  # the base model's folder
    checkpoints: str | Path  # the checkpoint folder, kept when a job fails
    progress: bool = True  # a bar on a terminal (else one log line per evaluation)
    live: str | Path | None = None  # the folder of live curves (None: none)


def pretrain_base(request: PretrainRequest) -> None:
    """``adloco pretrain``: the base model of the request's configuration into its ``out``,
    resumable."""
    config_file, data_dir = request.config, request.data
    out, checkpoints = request.out, request.checkpoints
    config = load_config(config_file)
    source = config.model.source
    if source != "base":
        # dvc.yaml cannot leave a stage out by configuration: say so and stop.
        write_json_atomic(
            paths.base_summary_file(out),
            {"model_dir": None, "note": f"model.source is {source}: no base"},
        )
        log.info("model.source is %s: nothing to pretrain", source)
        return
    # Before any work: a --out holding a file of the user's is refused (kept), not
    # after every step is trained (atomic_dir checks it again before its swap).
    check_replaceable(out, WRITER, "--out")
    torch.use_deterministic_algorithms(True, warn_only=True)
    data = TokenData.open(data_dir)
    if BASE_SPLIT not in data.manifest["splits"]:
        raise ConfigError(
            f"{data_dir}: no base split; set data.base_fraction above 0 and tokenize again"
        )
    checkpoint.check_folder(checkpoints)
    training = Pretraining.from_config(config, data, checkpoints)
    start = time.perf_counter()
    training.run(progress=request.progress, live_dir=request.live)
    seconds = time.perf_counter() - start
    command = command_line(
        "pretrain",
        [("--config", config_file), ("--data", data_dir), ("--out", out),
         ("--checkpoints", checkpoints)],
    )  # fmt: skip
    summary = write_base(
        training, data, out, seconds, experiment=config.experiment, command=command,
        hub=hub_metadata(config, base=True),
    )  # fmt: skip
    checkpoint.mark_finished(checkpoints, {"out": str(out), "step": training.step})
    log.info(
        "base model: %d tokens in %d steps, validation perplexity %.2f",
        summary["tokens"],
        summary["steps"],
        summary["val_perplexity"],
    )
