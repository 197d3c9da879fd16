"""The model a stage starts from: the configured ``model``, or the verified base model.

With ``model.source: base`` every run of an experiment (and the variance
analysis) starts from the model ``adloco pretrain`` wrote into
``results/<experiment>/base/``. :func:`start_model` checks every file of that
model (but its model card, ``README.md``) against the sha256 ``base.json``
lists (:func:`verified_model_dir`), then that the base was made for this
configuration (:func:`check_made_for`: the ``pretrain`` settings and seed
``base.json`` records, the model shape and sequence length of its
``config.json``), and returns the ``model`` section that loads it (``source:
pretrained``, ``name`` its folder) with the checksums, which go into a run's
checkpoint fingerprint: a checkpoint says which base its run started from. Any
other source is returned unchanged, without checksums. Not a stage: the engine
and the stages read it; :mod:`adloco.pretrain` writes the folder it checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from adloco import paths
from adloco.config import Config, ConfigError, ModelConfig
from adloco.io import read_json_object, sha256_file

MODEL_DIR = "model"
# The model card of a saved model folder (adloco.hf_export): what the model is
# and how it was made, not part of what a stage starts from. Left out of the
# checksums, so that it can be edited (before publishing the folder, say)
# without refusing the base, and a card that quotes other paths (the command
# that wrote it) does not make the runs' checkpoints stale.
MODEL_CARD = "README.md"
# The model section's keys that fix the base's shape, as its config.json names them.
SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "tie_word_embeddings",
    "dtype",
)


@dataclasses.dataclass(frozen=True)
class StartModel:
    """The ``model`` section a stage builds its model from, and the base's checksums."""

    model: ModelConfig
    base_sha256: Mapping[str, str] | None = None
    """sha256 of every file of the base's model folder (None: not a base model)"""


def model_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file of a saved model folder, by relative path; not of its model card."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p != folder / MODEL_CARD)
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in files}


def verified_model_dir(base: str | Path) -> tuple[Path, dict]:
    """The base model's folder and ``base.json``, after checking every file's sha256.

    A missing, changed or extra file is an error naming it: no run starts from
    a base other than the one ``adloco pretrain`` wrote.
    """
    base = Path(base)
    summary_path = paths.base_summary_file(base)
    summary = read_json_object(
        summary_path,
        f"{summary_path}: no base model here; run adloco pretrain first",
        fix="run adloco pretrain again",
    )
    folder = base / summary["model_dir"]
    found = model_digests(folder) if folder.is_dir() else {}
    expected = summary["model_sha256"]
    for name in sorted(set(expected) | set(found)):
        if expected.get(name) != found.get(name):
            what = "missing" if name not in found else "changed" if name in expected else "extra"
            raise ValueError(
                f"{folder / name}: {what} since adloco pretrain wrote the base model "
                f"(checked against {summary_path}); run adloco pretrain again"
            )
    return folder, summary


def _recorded_settings(
    summary: Mapping, folder: Path, config: Config | None, model: ModelConfig
) -> Iterator[tuple[str, Any, Any, str]]:
    """(key, what the base records, what the config says, where) for each setting of the base."""
    missing = f"{folder / 'config.json'}: not found; run adloco pretrain again"
    shape = read_json_object(folder / "config.json", missing)
    shape.setdefault("dtype", shape.get("torch_dtype"))
    where = f"its {folder.name}/config.json"
    for key in SHAPE_KEYS:
        yield f"model.{key}", shape.get(key), getattr(model, key), where
    if config is None:
        return
    seq_len = config.data.seq_len_tokens
    yield "data.seq_len_tokens", shape.get("max_position_embeddings"), seq_len, where
    if "seed" in summary:  # bases written before base.json recorded it: not checked
        yield "seed", summary["seed"], config.seed, "its seed"
    wanted = dataclasses.asdict(config.pretrain) if config.pretrain else {}
    for key, value in (summary.get("settings") or {}).items():
        if key in wanted:
            mine = list(wanted[key]) if isinstance(wanted[key], tuple) else wanted[key]
            yield f"pretrain.{key}", value, mine, "its settings"


def check_made_for(
    base: Path, summary: Mapping, folder: Path, model: ModelConfig, config: Config | None
) -> None:
    """The base was pretrained under this configuration, or an error naming base.json and the key.

    The model shape (``model``) against the base's ``config.json`` (which
    base.json's checksums cover); with ``config``, its sequence length, seed
    and ``pretrain`` settings too. A base of another experiment or model would
    train, or fail deep in the model's loading.
    """
    for key, recorded, wanted, where in _recorded_settings(summary, folder, config, model):
        if recorded != wanted:
            raise ValueError(
                f"{paths.base_summary_file(base)} ({where}): the base was pretrained with "
                f"{key} {recorded!r}, the config says {wanted!r}: it was made for another "
                "experiment or model; run adloco pretrain with this config, or point --base "
                "at the base made with it"
            )


def start_model(
    model: ModelConfig, base: str | Path | None, config: Config | None = None
) -> StartModel:
    """The model a stage starts from.

    With ``model.source: base``, the verified base model of folder ``base``
    (as ``pretrained``, its checksums kept), made for ``model`` and for
    ``config`` (the stage's configuration; :func:`check_made_for`);
    otherwise ``model`` unchanged.
    """
    if model.source != "base":
        return StartModel(model)
    if base is None:
        raise ConfigError(
            "model.source is base: pass the base model's folder (--base "
            "results/<experiment>/base, written by adloco pretrain)"
        )
    folder, summary = verified_model_dir(base)
    check_made_for(Path(base), summary, folder, model, config)
    resolved = dataclasses.replace(model, source="pretrained", name=str(folder))
    return StartModel(resolved, dict(summary["model_sha256"]))
