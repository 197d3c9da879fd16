"""The sections of the corpus, the model and the measurements: one frozen dataclass each.

``data`` (with ``data.tokenizer``), ``model``, ``pretrain``, ``calibration`` and
``variance``, each field declared once with :func:`~adloco.config.fields.setting`
(its schema, default and description); :mod:`adloco.config.types` gathers them
into :class:`~adloco.config.types.Config`.
"""

from __future__ import annotations

import dataclasses

from adloco.config.fields import BETAS, POSITIVE_INT, REQUIRED, setting


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """``data.tokenizer``."""

    kind: str = setting(
        "bpe", "tokenizer family", type="string", enum=["bpe", "mistral-v1", "pretrained"]
    )
    name: str | None = setting(
        None, "hub id or folder for kind pretrained", type=["string", "null"]
    )
    vocab_size: int = setting(
        4096, "BPE vocabulary size", type="integer", minimum=256, maximum=65535
    )


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """``data``: the corpus, its splits and its tokenization."""

    dataset: str = setting(
        REQUIRED,
        "corpus name, folder under data/tokenized",
        type="string",
        pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    source: str = setting(
        REQUIRED,
        "where the C4-format records come from",
        type="string",
        enum=["offline-wiki", "local", "hub"],
    )
    raw_dir: str = setting("data/raw", "folder of C4-format json.gz files", type="string")
    hub_path: str = setting("allenai/c4", "hub data set", type="string")
    hub_name: str = setting("en", "hub data set configuration", type="string")
    max_documents: int | None = setting(
        None, "cap on documents", type=["integer", "null"], minimum=1
    )
    validation_fraction: float = setting(
        0.05, "held-out share of documents", type="number", exclusiveMinimum=0, exclusiveMaximum=1
    )
    base_fraction: float = setting(
        0.0,
        (
            "share of the other documents set apart as the base split, which the base model "
            "pretrains on (adloco pretrain); the runs train on the rest (0: no base split)"
        ),
        type="number",
        minimum=0,
        exclusiveMaximum=1,
    )
    seq_len_tokens: int = setting(128, "tokens per packed sequence", type="integer", minimum=8)
    num_proc: int = setting(1, "tokenization processes", type="integer", minimum=1)
    on_bad_record: str = setting(
        "error",
        (
            "a raw record that is not UTF-8, not JSON or has no text, or a truncated gzip "
            "file (local sources): error stops tokenization naming the file and line; skip "
            "skips it and counts it in the manifest"
        ),
        type="string",
        enum=["error", "skip"],
    )
    tokenizer: TokenizerConfig = setting({})


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """``model``: a Llama built from these sizes, a pretrained name, or the base."""

    source: str = setting(
        "config",
        (
            "config: seeded random init from the fields below; pretrained: "
            "from_pretrained(name); base: the experiment's base model, pretrained by adloco "
            "pretrain (the fields below give its architecture)"
        ),
        type="string",
        enum=["config", "pretrained", "base"],
    )
    name: str | None = setting(
        None, "hub id or folder for source pretrained", type=["string", "null"]
    )
    hidden_size: int = setting(128, "model width", type="integer", minimum=8)
    intermediate_size: int = setting(344, "MLP width", type="integer", minimum=8)
    num_hidden_layers: int = setting(2, "transformer blocks", type="integer", minimum=1)
    num_attention_heads: int = setting(4, "query heads", type="integer", minimum=1)
    num_key_value_heads: int = setting(4, "key/value heads", type="integer", minimum=1)
    tie_word_embeddings: bool = setting(True, "share embedding and LM head", type="boolean")
    dtype: str = setting(
        "float32", "parameter dtype", type="string", enum=["float32", "bfloat16", "float16"]
    )


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """``pretrain``: the base model's own loop (plain AdamW, cosine schedule)."""

    max_tokens: int = setting(1000000, "tokens the base model trains on", **POSITIVE_INT)
    batch_size: int = setting(16, "sequences per optimizer step", **POSITIVE_INT)
    lr: float = setting(0.003, "peak learning rate", type="number", exclusiveMinimum=0)
    min_lr_ratio: float = setting(
        0.1, "cosine floor as a share of lr", type="number", minimum=0, maximum=1
    )
    warmup_fraction: float = setting(
        0.05, "share of max_tokens in linear warmup", type="number", minimum=0, maximum=1
    )
    weight_decay: float = setting(0.1, "AdamW weight decay", type="number", minimum=0)
    betas: tuple[float, float] = setting([0.9, 0.95], "AdamW betas", **BETAS)
    grad_clip_norm: float | None = setting(
        1.0, "gradient clipping norm (null: off)", type=["number", "null"], exclusiveMinimum=0
    )
    eval_every_steps: int = setting(
        100, "steps between evaluations on the runs' validation sample", **POSITIVE_INT
    )
    checkpoint_every_steps: int = setting(100, "steps between checkpoints", **POSITIVE_INT)


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
    """``calibration``: the max-batch search and the step timing."""

    margin: float = setting(
        0.9, "share of the largest fitting batch kept", type="number", exclusiveMinimum=0, maximum=1
    )
    steps_per_trial: int = setting(2, "optimizer steps per trial", type="integer", minimum=1)
    max_batch_limit: int = setting(4096, "upper bound of the search", type="integer", minimum=1)
    dtype: str = setting(
        "float32", "trial dtype", type="string", enum=["float32", "bfloat16", "float16"]
    )
    timing_repeats: int = setting(
        5,
        ("timed repetitions per micro-batch size and of the update; their median is the curve"),
        type="integer",
        minimum=5,
    )
    timing_warmup: int = setting(
        2,
        "untimed repetitions before them (lazy state, kernels, allocator)",
        type="integer",
        minimum=1,
    )


@dataclasses.dataclass(frozen=True)
class VarianceConfig:
    """``variance``: the gradient-variance analysis of the start model."""

    num_batches: int = setting(64, "batch gradients compared", type="integer", minimum=2)
    batch_size: int = setting(8, "sequences per batch gradient", type="integer", minimum=1)
    eval_sequences: int = setting(
        256, "sequences of the full-gradient sample", type="integer", minimum=2
    )
    eta: float = setting(
        0.8, "norm test eta, in (0, 1)", type="number", exclusiveMinimum=0, exclusiveMaximum=1
    )
