"""The check's configurations, derived from the shipped ones at one of three sizes.

Two experiments, each written as a YAML file the ``adloco`` stages read:

- ``default``: ``config/config.yaml`` (its model, data and train section, its
  adloco and diloco runs), random init instead of the base, on the check's
  device: a CUDA device of the default's memory, or the default's simulated CPU
  device;
- ``paper-shape``: ``config/paper.yaml`` (its train section and runs: 4 slots of
  batch 1, the norm test, merging, switch mode) with MicroLlama's architecture
  at random init (no hub), the Llama-2 32k SentencePiece vocabulary that
  MicroLlama uses (``mistral-v1``, shipped by a PyPI package) and 512-token
  sequences of the default's offline corpus, on one CUDA device of the paper's
  80 GB.

Sizes: ``full`` is the above; ``toy`` shrinks the paper-shape model, its
vocabulary (the preset's BPE) and its sequences so that every step runs on a
CPU in minutes; ``quick`` shrinks everything to the test preset, for the
suite's test of the script (seconds a step).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adloco.config.yaml_file import dump_yaml, read_yaml
from adloco.model.llama import MICROLLAMA_ARCHITECTURE

ROOT = Path(__file__).resolve().parents[2]
SIZES = ("quick", "toy", "full")
LLAMA2_VOCAB = 32000  # the mistral-v1 tokenizer's vocabulary, MicroLlama's
# MicroLlama's tokenizer at size full; below, the preset's small BPE: on a CPU
# the 32k-vocabulary head alone takes about a second a pass of 64 tokens.
PAPER_TOKENIZER = {"kind": "mistral-v1", "name": None}

TOY_MODEL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class Size:
    """What one size sets in the two experiments."""

    default_preset: str  # the shipped file the default experiment starts from
    paper_model: dict[str, Any]
    paper_seq_len: int
    paper_documents: int | None  # documents of the offline corpus tokenized for paper-shape
    rounds: int  # outer rounds of every training step
    inner_steps: int  # H of every training step
    eval_sequences: int


# Below full, a shorter search and fewer untimed passes (CPU trials are slow).
SMALL_CALIBRATION = {"steps_per_trial": 1, "max_batch_limit": 32, "timing_warmup": 1}

SIZE = {
    "quick": Size(
        "test.yaml", {**TOY_MODEL, "hidden_size": 32, "num_hidden_layers": 1}, 32, 300, 2, 2, 8
    ),
    "toy": Size("config.yaml", TOY_MODEL, 64, 2000, 2, 3, 8),
    "full": Size("config.yaml", MICROLLAMA_ARCHITECTURE, 512, None, 4, 10, 32),
}


def _load(name: str) -> dict[str, Any]:
    return read_yaml(ROOT / "config" / name)


def _device(kind: str, name: str, memory_gib: float, template: dict[str, Any]) -> dict[str, Any]:
    """One device entry: the template's fields, on ``kind``, calibrated (never configured)."""
    device = {**copy.deepcopy(template), "name": name, "kind": kind, "count": 1}
    device.update(memory_gib=memory_gib, max_batch=None, gpu_model=None)
    if kind == "cuda":
        # On a GPU the clock is the curve calibrate times there.
        device["step_time"] = {**device["step_time"], "model": "measured", "scale": 1.0}
    return device


def _train(base: dict[str, Any], size: Size, on_cuda: bool) -> dict[str, Any]:
    train = {**base, "max_rounds": size.rounds, "inner_steps": size.inner_steps}
    train.update(
        max_tokens=10**9,  # rounds decide
        warmup_fraction=0.0,  # of 10**9 tokens: the lr would stay near 0 for the few rounds
        eval_every_rounds=1,
        eval_sequences=size.eval_sequences,
        eval_batch=size.eval_sequences,
        checkpoint_every_rounds=10
        ** 6,  # no checkpoint but the last: 4 x 4.8 GB a round at paper shape
        autocast_dtype="bfloat16" if on_cuda else None,
    )
    return train


def _report(base: dict[str, Any]) -> dict[str, Any]:
    report = {k: v for k, v in base.items() if k not in ("targets", "tuning", "tuning_groups")}
    report["targets"] = {"relative_to": "derived", "derived_levels": 2, "derived_runs": None}
    return report


def default_config(size_name: str, device: str) -> dict[str, Any]:
    """The default experiment (or, at ``quick``, the test preset) on ``device``."""
    size = SIZE[size_name]
    base = _load(size.default_preset)
    on_cuda = device == "cuda"
    template = base["cluster"]["devices"][0]
    config = {
        "experiment": "gpu-check-default",
        "seed": 0,
        "seeds": [0],
        "data": base["data"],
        "model": {**base["model"], "source": "config"},
        "cluster": {
            **base["cluster"],
            "processes_per_machine": 1,
            "devices": [_device(device, f"{device}-default", template["memory_gib"], template)],
        },
        "calibration": {**base["calibration"], "dtype": "bfloat16" if on_cuda else "float32"},
        "train": _train(base["train"], size, on_cuda),
        "runs": {
            name: {k: v for k, v in base["runs"][name].items() if k != "seeds"}
            for name in ("adloco", "diloco")
        },
        "report": _report(base["report"]),
    }
    return config


def paper_shape_config(size_name: str, device: str) -> dict[str, Any]:
    """The paper's runs at MicroLlama's shape (random init), on ``device``."""
    size = SIZE[size_name]
    paper = _load("paper.yaml")
    default = _load(size.default_preset)
    on_cuda = device == "cuda"
    data = {
        **default["data"],
        "dataset": f"gpu-check-{size.paper_seq_len}",
        "seq_len_tokens": size.paper_seq_len,
        "max_documents": size.paper_documents,
        "base_fraction": 0.0,
        "tokenizer": PAPER_TOKENIZER if size_name == "full" else default["data"]["tokenizer"],
    }
    template = paper["cluster"]["devices"][0]
    # The paper's one 80 GB A100; at toy sizes a simulated device that fits a few sequences.
    memory_gib = template["memory_gib"] if size_name == "full" else 1.0
    return {
        "experiment": "gpu-check-paper-shape",
        "seed": 0,
        "seeds": [0],
        "data": data,
        "model": {"source": "config", "name": None, "dtype": "float32", **size.paper_model},
        "cluster": {
            **paper["cluster"],
            "devices": [_device(device, f"{device}-paper-shape", memory_gib, template)],
        },
        "calibration": {
            **paper["calibration"],
            **(SMALL_CALIBRATION if size_name != "full" else {}),
            "dtype": "bfloat16" if on_cuda else "float32",
        },
        "train": {
            **_train(paper["train"], size, on_cuda),
            "inner_lr": 3e-4,  # random init: a step that moves the loss within a few rounds
            "merge_frequency": 2,  # a merge inside the few rounds
        },
        "runs": {
            **{name: paper["runs"][name] for name in ("adloco", "diloco")},
            # DiLoCo's one trainer of 4 slots as one stack: vectorized at the paper's shape.
            "diloco-vectorized": {**paper["runs"]["diloco"], "slot_execution": "vectorized"},
        },
        "report": _report(paper["report"]),
    }


def write(config: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_yaml(config, sort_keys=False))
    return path
