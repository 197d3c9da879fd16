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
and the stages read it; :mod:`adloco.model.pretrain` writes the folder it checks.

The base also knows its data: ``base.json`` records the sha256 of the
tokenized data's ``manifest.json`` it was pretrained on (:data:`DATA_KEY`),
and every stage that starts from it (and ``adloco report``, which quotes its
perplexity) checks it against the ``--data`` it is given
(:func:`check_pretrained_on`). The manifest holds every shard's and tokenizer
file's sha256 and the data settings, so one checksum tells apart another
tokenizer of the same vocabulary size and sequence length, which the model's
shape cannot. ``base.json`` is read through :func:`read_summary`: a
hand-edited one (not JSON, a key missing or of another type) is one line
naming the file and the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from adloco.config import Config, ConfigError, ModelConfig
from adloco.core import paths
from adloco.core.io import read_json_object, sha256_file

MODEL_DIR = "model"
# The model card of a saved model folder (adloco.model.hf_export): what the model is
# and how it was made, not part of what a stage starts from. Left out of the
# checksums, so that it can be edited (before publishing the folder, say)
# without refusing the base, and a card that quotes other paths (the command
# that wrote it) does not make the runs' checkpoints stale.
MODEL_CARD = "README.md"
# base.json's record of the data the base was pretrained on: the sha256 of the
# tokenized data folder's manifest.json (adloco.data.manifest).
DATA_KEY = "data_manifest_sha256"
# What to do with a base.json that cannot be used: adloco pretrain writes it.
PRETRAIN_AGAIN = "run adloco pretrain again"
# The keys of base.json the stages read, and the JSON type adloco pretrain writes each
# as (seed, settings and DATA_KEY: absent from bases written before base.json held them).
SUMMARY_TYPES: dict[str, type] = {
    "model_dir": str,
    "model_sha256": dict,
    "seed": int,
    "settings": dict,
    DATA_KEY: str,
}
REQUIRED_KEYS = ("model_dir", "model_sha256")
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


def data_digest(data: str | Path) -> str:
    """sha256 of the tokenized data folder's ``manifest.json``, which base.json records."""
    return sha256_file(paths.manifest_file(data))


def json_type(value: Any) -> str:
    """The JSON type of ``value``, in words."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "a boolean"
    names = {dict: "an object", list: "a list", str: "text", int: "an integer", float: "a number"}
    return next((names[t] for t in names if isinstance(value, t)), type(value).__name__)


def read_summary(base: str | Path) -> dict:
    """``base.json`` of the folder ``base``, with the keys the stages read of the types written.

    A file that is not JSON, lacks ``model_dir`` or ``model_sha256``, or holds
    a key of another type (a checksum that is not text, ``seed`` as text) is
    one line naming the file and the key: it was edited by hand or cut
    part-way, and ``adloco pretrain`` writes it again.
    """
    path = paths.base_summary_file(base)
    summary = read_json_object(
        path, f"{path}: no base model here; run adloco pretrain first", fix=PRETRAIN_AGAIN
    )
    if "model_dir" in summary and summary["model_dir"] is None:
        raise ValueError(
            f"{path}: records no base model (model_dir is null: the config it was written "
            "with has a model.source other than base); run adloco pretrain with this config"
        )
    for key in REQUIRED_KEYS:
        if key not in summary:
            raise ValueError(f"{path}: has no key {key!r}; {PRETRAIN_AGAIN}")
    for key, wanted in SUMMARY_TYPES.items():
        value = summary.get(key)
        if key in summary and (not isinstance(value, wanted) or isinstance(value, bool)):
            raise ValueError(
                f"{path}: {key} is {json_type(value)}, adloco pretrain writes "
                f"{json_type(wanted())}; {PRETRAIN_AGAIN}"
            )
    # Read before any file of it: a model_dir outside the base folder (/etc, ../..)
    # was walked and hashed whole before the checksums refused it.
    model_dir = Path(summary["model_dir"])
    inside = Path(base).resolve() / model_dir
    if (
        model_dir.is_absolute()
        or ".." in model_dir.parts
        or not summary["model_dir"].strip()
        or not inside.resolve().is_relative_to(Path(base).resolve())
    ):
        raise ValueError(
            f"{path}: model_dir {summary['model_dir']!r} is not a folder inside {base} "
            f"(adloco pretrain writes {MODEL_DIR!r}); {PRETRAIN_AGAIN}"
        )
    for name, digest in summary["model_sha256"].items():
        if not isinstance(digest, str):
            raise ValueError(
                f"{path}: model_sha256[{name!r}] is {json_type(digest)}, adloco pretrain "
                f"writes a sha256 as text; {PRETRAIN_AGAIN}"
            )
    return summary


def verified_model_dir(base: str | Path) -> tuple[Path, dict]:
    """The base model's folder and ``base.json``, after checking every file's sha256.

    A missing, changed or extra file is an error naming it: no run starts from
    a base other than the one ``adloco pretrain`` wrote.
    """
    base = Path(base)
    summary_path = paths.base_summary_file(base)
    summary = read_summary(base)
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


def check_pretrained_on(base: str | Path, summary: Mapping, data: str | Path) -> None:
    """The base was pretrained on the tokenized data ``data``, or one line saying what to do.

    ``summary``'s :data:`DATA_KEY` against the sha256 of ``data``'s
    ``manifest.json``. A base.json without the key (written before base.json
    recorded its data) cannot be checked: pretrain again. A ``data`` without a
    manifest is left to the stage's reader, whose message names it.
    """
    manifest = paths.manifest_file(data)
    if not manifest.is_file():
        return
    path = paths.base_summary_file(base)
    recorded = summary.get(DATA_KEY)
    if recorded is None:
        raise ValueError(
            f"{path}: has no {DATA_KEY} (written before base.json recorded the data it was "
            f"pretrained on), so whether --data {data} is that data cannot be checked; "
            f"{PRETRAIN_AGAIN} on this data"
        )
    if not isinstance(recorded, str):
        raise ValueError(
            f"{path}: {DATA_KEY} is {json_type(recorded)}, adloco pretrain writes a sha256 as "
            f"text; {PRETRAIN_AGAIN}"
        )
    # A manifest that does not read as JSON is damaged data, not other data.
    read_json_object(
        manifest,
        fix=f"the tokenized data --data {data} is damaged; run adloco tokenize again, which "
        "writes it whole",
    )
    found = data_digest(data)
    if recorded != found:
        raise ValueError(
            f"{path}: the base was pretrained on data with {DATA_KEY} {recorded!r}, --data "
            f"{data} has {found!r} (the sha256 of its manifest.json): it was pretrained on "
            "other data (another tokenizer or corpus); run adloco pretrain again on this data, "
            "or point --base and --data at a base and the data it was pretrained on"
        )


def start_model(
    model: ModelConfig,
    base: str | Path | None,
    config: Config | None = None,
    data: str | Path | None = None,
) -> StartModel:
    """The model a stage starts from.

    With ``model.source: base``, the verified base model of folder ``base``
    (as ``pretrained``, its checksums kept), made for ``model`` and for
    ``config`` (the stage's configuration; :func:`check_made_for`) and
    pretrained on the tokenized data folder ``data`` (the stage's ``--data``;
    :func:`check_pretrained_on`); otherwise ``model`` unchanged.
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
    if data is not None:
        check_pretrained_on(base, summary, data)
    resolved = dataclasses.replace(model, source="pretrained", name=str(folder))
    return StartModel(resolved, dict(summary["model_sha256"]))
