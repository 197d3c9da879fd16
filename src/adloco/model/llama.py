"""Model factory, causal-LM loss and evaluation.

The default configuration builds a small Llama-architecture model from a
config with a seeded random init; the paper configuration loads MicroLlama with
``from_pretrained`` (hub id or a local folder of the same layout). The loss is
computed here rather than by Hugging Face's ``labels=`` path so that the single
shift and the padding mask are explicit and tested.
"""

from __future__ import annotations

import math
import pickle

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from adloco.config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# keeeeenw/MicroLlama's architecture (the paper's model, 300M parameters at the
# Llama-2 32k vocabulary): ``model`` fields for random-init runs of its shape.
MICROLLAMA_ARCHITECTURE = {
    "hidden_size": 1024,
    "intermediate_size": 5632,
    "num_hidden_layers": 12,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}


def llama_config(model: ModelConfig, vocab_size: int, seq_len_tokens: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=model.hidden_size,
        intermediate_size=model.intermediate_size,
        num_hidden_layers=model.num_hidden_layers,
        num_attention_heads=model.num_attention_heads,
        num_key_value_heads=model.num_key_value_heads,
        max_position_embeddings=seq_len_tokens,
        tie_word_embeddings=model.tie_word_embeddings,
        attention_dropout=0.0,
    )


def load_pretrained(name: str, dtype: torch.dtype) -> torch.nn.Module:
    """``from_pretrained`` (never remote code), a model that does not load said in one line.

    Weights that do not fit the config (an edited ``config.json``) or a pickle
    that torch's safe loader refuses are a broken input, not a crash.
    """
    try:
        return AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    except (RuntimeError, pickle.UnpicklingError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"{name}: the model does not load ({type(exc).__name__}: {first[:200]}); if it is "
            "this project's base model, run adloco pretrain again"
        ) from exc


def build_model(
    model: ModelConfig, vocab_size: int, seq_len_tokens: int, seed: int
) -> torch.nn.Module:
    """A causal LM per ``model``: seeded random init or ``from_pretrained``.

    ``source: base`` builds the base model's architecture with a seeded init,
    as calibration measures it and pretraining starts it; a stage that starts
    from the base's weights resolves them first
    (:func:`adloco.model.base.start_model` turns the section into a
    verified ``pretrained`` one).
    """
    dtype = DTYPES[model.dtype]
    if model.source == "pretrained":
        # Never trust_remote_code: the architecture must be one transformers ships.
        loaded = load_pretrained(model.name, dtype)
        if loaded.config.vocab_size < vocab_size:
            raise ValueError(
                f"model {model.name} has vocabulary {loaded.config.vocab_size}, "
                f"the tokenized data needs {vocab_size}"
            )
        return loaded
    config = llama_config(model, vocab_size, seq_len_tokens)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        built = LlamaForCausalLM(config)
    return built.to(dtype)


def causal_lm_loss(
    logits: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token cross-entropy and the number of predicted tokens.

    Position t predicts token t+1: one shift, done here. A target that is
    padding (``attention_mask == 0``) is not counted; neither is a prediction
    made from a padded position.
    """
    targets = input_ids[:, 1:]
    if attention_mask is not None:
        valid = attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()
        targets = targets.masked_fill(~valid, -100)
    # The shift moves the targets, not the logits: the last position predicts
    # nothing (-100), so the logits stay one contiguous view instead of a copy
    # of batch x length x vocabulary values per pass.
    targets = F.pad(targets, (0, 1), value=-100)
    loss_sum = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),
        targets.reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )
    n_tokens = (targets != -100).sum()
    return loss_sum, n_tokens


def batch_loss(
    model: torch.nn.Module, input_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss and predicted-token count of a batch of packed sequences."""
    logits = model(input_ids=input_ids, use_cache=False).logits
    return causal_lm_loss(logits, input_ids)


@torch.no_grad()
def evaluate(model: torch.nn.Module, sequences: torch.Tensor, batch_size: int) -> dict[str, float]:
    """Mean loss per predicted token over ``sequences``, its perplexity and standard error.

    ``loss_stderr`` is the standard error of the mean loss over the sample of
    sequences (std of the per-sequence mean losses / sqrt(sequences)): how much
    the figure would move on another sample of the same size, to set beside
    the spread over seeds.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    per_sequence = []
    counts = []
    for start in range(0, sequences.size(0), batch_size):
        chunk = sequences[start : start + batch_size].to(device)
        logits = model(input_ids=chunk, use_cache=False).logits
        # As in causal_lm_loss: the targets shift, the logits stay one contiguous
        # view; the last position's loss (ignored, 0) is left out of the sums.
        targets = F.pad(chunk[:, 1:], (0, 1), value=-100)
        token_loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="none"
        )
        per_sequence.append(token_loss.view(chunk.size(0), -1)[:, :-1].double().sum(1).cpu())
        counts.append(torch.full((chunk.size(0),), chunk.size(1) - 1, dtype=torch.float64))
    model.train(was_training)
    sums, n = torch.cat(per_sequence), torch.cat(counts)
    count = int(n.sum())
    mean = float(sums.sum() / max(count, 1))
    means = sums / n
    stderr = float(means.std() / math.sqrt(means.numel())) if means.numel() > 1 else math.nan
    return {
        "loss": mean,
        "perplexity": math.exp(min(mean, 700.0)),
        "tokens": count,
        "loss_stderr": stderr,
    }


def evaluation_sample(split, sequences: int) -> torch.Tensor:
    """The validation sequences every evaluation of an experiment uses: ``sequences``
    evenly spaced over the split (all of them when it has fewer)."""
    n = len(split)
    picked = torch.linspace(0, n - 1, min(sequences, n)).round().long().unique()
    return split.get(picked)


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
