"""``adloco variance``: the analysis on the experiment's model and tokenized data.

On one model (the seeded initial model, the verified base model with
``model.source: base``, or a saved one) and a fixed sample of
``variance.eval_sequences`` training sequences, runs
:func:`adloco.variance.analysis.analyse_gradient_variance` with the cluster's
node slots and statistics groups for the scalar-vs-pooled comparison, and
writes the folder (:func:`adloco.variance.outputs.write_outputs`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from adloco.config import ModelConfig, load_config
from adloco.core.io import check_replaceable
from adloco.data.reader import TokenData
from adloco.model.base import start_model
from adloco.model.llama import build_model, load_pretrained
from adloco.variance.analysis import analyse_gradient_variance
from adloco.variance.outputs import WRITER, write_outputs

# The stage's logger, as before the package: log lines read "adloco.variance".
log = logging.getLogger(__package__)


def sample_indices(eval_sequences: int, train_size: int, seed: int, data: str) -> np.ndarray:
    """The fixed sample: ``eval_sequences`` distinct train indices, sorted, drawn with ``seed``."""
    if eval_sequences > train_size:
        raise ValueError(
            f"variance.eval_sequences is {eval_sequences}, the train split of {data} has "
            f"{train_size}"
        )
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(train_size, size=eval_sequences, replace=False))


def load_model(
    model_dir: str | None, model: ModelConfig, vocab_size: int, seq_len_tokens: int, seed: int
):
    """The saved model in ``model_dir``, or the seeded initial model of ``model``."""
    if model_dir is None:
        return build_model(model, vocab_size, seq_len_tokens, seed)
    if not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: not a saved model folder (no config.json)")
    # float32: gradient statistics are sums of many small squares.
    loaded = load_pretrained(model_dir, torch.float32)
    if loaded.config.vocab_size < vocab_size:
        raise ValueError(
            f"{model_dir}: vocabulary {loaded.config.vocab_size}, the data needs {vocab_size}"
        )
    return loaded


def log_figures(summary: dict) -> None:
    """The headline figures and the scalar-vs-pooled std ratios (or why skipped)."""
    log.info(
        "tr Σ %.4g, ‖∇F‖² %.4g, B_simple %.4g, norm-test batch %.4g",
        summary["trace_cov"],
        summary["grad_sqnorm"],
        summary["b_simple"] or float("nan"),
        summary["norm_test_batch"] or float("nan"),
    )
    ratio = summary["scalar_vs_pooled"].get("std_ratio")
    if ratio:
        log.info(
            "stats_reduce scalars vs vector, std ratio: tr Σ̂ %.3g, norm-test batch %.3g",
            ratio["trace_cov"] or float("nan"),
            ratio["norm_test_batch"] or float("nan"),
        )
    else:
        log.info("stats_reduce comparison skipped: %s", summary["scalar_vs_pooled"]["skipped"])


@dataclass(frozen=True, kw_only=True)
class VarianceRequest:
    """What ``adloco variance`` is asked: its command line, typed (:mod:`adloco.stages.variance`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks).
    """

    config: str | Path  # the configuration YAML
    data: str | Path  # the tokenized data folder
    out: str | Path  # the folder written
    # A saved model folder instead (default: the base model in `base` with
    # model.source: base, else the seeded initial model).
    model: str | None = None
    base: str | Path | None = None  # the base model folder (model.source: base)
    torch_device: str | None = None  # default: cuda if available, else cpu
    # Sequences per forward/backward pass and per vmap chunk (memory only).
    chunk_size: int = 8


def analyse(request: VarianceRequest) -> None:
    """``adloco variance``: the analysis of the request's start model, written to its ``out``."""
    if request.chunk_size < 1:
        raise ValueError(f"--chunk-size must be >= 1, got {request.chunk_size}")
    config = load_config(request.config)
    # Before any work: a --out holding a file of the user's is refused (kept), not
    # after the gradients are computed (write_outputs checks it again before its swap).
    check_replaceable(request.out, WRITER, "--out")
    settings = config.variance
    data_dir, model_dir = request.data, request.model
    data = TokenData.open(data_dir)
    train = data.split("train")
    indices = sample_indices(settings.eval_sequences, len(train), config.seed, str(data_dir))
    device = torch.device(request.torch_device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if model_dir is None and config.model.source == "base":
        model_dir = start_model(config.model, request.base, config, data_dir).model.name
    model = load_model(model_dir, config.model, data.vocab_size, data.seq_len_tokens, config.seed)
    # The comparison of stats_reduce modes: one trainer on every slot of the
    # cluster, one statistics block per slot (stats_steps x stats_microbatches groups).
    analysis = analyse_gradient_variance(
        model.to(device),
        train.get(indices).to(device),
        batch_size=settings.batch_size,
        num_batches=settings.num_batches,
        eta=settings.eta,
        seed=config.seed,
        chunk_size=request.chunk_size,
        nodes=config.cluster.slots(),
        groups_per_node=config.train.stats_steps * config.train.stats_microbatches,
    )
    analysis.summary.update(
        model=model_dir or f"initial model ({config.model.source}, seed {config.seed})",
        data=str(data_dir),
        seq_len_tokens=data.seq_len_tokens,
        vocab_size=data.vocab_size,
        torch_device=str(device),
        torch_version=torch.__version__,
    )
    write_outputs(analysis, request.out)
    log_figures(analysis.summary)
