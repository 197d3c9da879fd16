"""Reference levels a perplexity is judged against: token statistics and the base model.

Part of ``adloco report``. A target perplexity means something only where a
model must learn more than token frequencies to reach it. The tokenize stage
writes the validation split's reference perplexities into the data folder's
``manifest.json`` (``reference_perplexity``: uniform over the vocabulary, and
unigram and bigram models counted on the train split); a target at or above
the unigram level is *not testable* (:func:`untestable_reason`). Data
tokenized before that key existed has none: the page says the references are
unavailable, and every verdict says the rule could not be applied.

The base model (``adloco pretrain``: ``results/<experiment>/base/base.json``
and its ``metrics.jsonl``) is where every run starts; its validation
perplexity is a line on the perplexity plots and the unit of targets fixed as
fractions of it (:mod:`adloco.report.analysis.targets`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adloco.core.io import read_json_object
from adloco.core.paths import base_summary_file, manifest_file, metrics_file
from adloco.formats.metrics import is_number
from adloco.model.base import check_pretrained_on
from adloco.report.inputs.results import read_json_lines

# The reference levels, from the highest perplexity to the lowest.
REFERENCE_LEVELS = ("uniform", "unigram", "bigram")


@dataclass(frozen=True)
class References:
    """The validation split's reference perplexities, or why there are none."""

    levels: dict[str, float]  # uniform, unigram, bigram: those the manifest gives
    details: dict[str, Any]  # split, counts_from, predicted_tokens, smoothing
    note: str  # why there are none (empty when there are)
    corpus: dict[str, Any] = field(default_factory=dict)  # dataset, vocab_size, train_tokens, ...

    @property
    def unigram(self) -> float | None:
        return self.levels.get("unigram")

    @classmethod
    def unavailable(cls, why: str) -> References:
        return cls({}, {}, why)


def load_references(data_dir: Path | None) -> References:
    """``reference_perplexity`` of the tokenized data folder's manifest.json."""
    if data_dir is None:
        return References.unavailable("no tokenized data folder given (adloco report --data)")
    path = manifest_file(data_dir)
    manifest = read_json_object(path, f"{path}: manifest not found (tokenize the data first)")
    corpus = corpus_facts(manifest)
    section = manifest.get("reference_perplexity")
    if section is None:
        return References(
            {},
            {},
            f"{path} has no reference_perplexity (data tokenized before the references were "
            "computed; tokenize again)",
            corpus,
        )
    if not isinstance(section, dict):
        raise ValueError(f"{path}: reference_perplexity must be an object")
    levels = {}
    for name in REFERENCE_LEVELS:
        value = section.get(name)
        if value is None:
            continue
        if not is_number(value) or value <= 0:
            raise ValueError(f"{path}: reference_perplexity.{name} must be a positive number")
        levels[name] = float(value)
    details = {k: v for k, v in section.items() if k not in REFERENCE_LEVELS}
    if "unigram" not in levels:
        note = f"{path}: reference_perplexity has no unigram level"
        return References(levels, details, note, corpus)
    return References(levels, details, "", corpus)


def corpus_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the report's first screen says of the data: name, sequence, vocabulary, train tokens."""
    splits = manifest.get("splits")
    train_split = splits.get("train") if isinstance(splits, dict) else None
    facts = {
        "dataset": manifest.get("dataset"),
        "seq_len_tokens": manifest.get("seq_len_tokens"),
        "vocab_size": manifest.get("vocab_size"),
        "train_tokens": train_split.get("tokens") if isinstance(train_split, dict) else None,
    }
    return {k: v for k, v in facts.items() if v is not None}


def untestable_reason(target: float, references: References) -> str:
    """Why ``target`` cannot test a claim (at or above the unigram level), else ""."""
    unigram = references.unigram
    if unigram is None or target < unigram:
        return ""
    return (
        f"the target {target:.4g} is at or above the validation unigram perplexity "
        f"{unigram:.4g}: a model reaches it by learning token frequencies alone, so "
        "reaching it sooner says nothing about training a language model"
    )


def unchecked_caveat(references: References) -> str:
    """What a verdict must add when the unigram rule could not be applied, else ""."""
    if references.unigram is not None:
        return ""
    return f"the unigram rule could not be applied: {references.note}"


@dataclass(frozen=True)
class Base:
    """The base model every run starts from (``adloco pretrain``)."""

    folder: Path
    val_perplexity: float
    fields: dict[str, Any]  # base.json as written
    curve: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl rows


def load_base(base_dir: Path | None, data_dir: Path | None = None) -> Base | None:
    """base.json (required in a given folder) and metrics.jsonl (shown when present).

    With ``data_dir`` (the report's ``--data``), the base must have been
    pretrained on that data (:func:`adloco.model.base.check_pretrained_on`):
    the page would quote another base's perplexity beside this data's levels.
    """
    if base_dir is None:
        return None
    folder = Path(base_dir)
    path = base_summary_file(folder)
    fields = read_json_object(path, f"{path}: base model not found (run `adloco pretrain`)")
    if "model_dir" in fields and fields["model_dir"] is None:
        return None  # adloco pretrain's record that this experiment has no base (dvc.yaml)
    if data_dir is not None:
        check_pretrained_on(folder, fields, data_dir)
    ppl = fields.get("val_perplexity")
    if not is_number(ppl) or not ppl > 0:
        raise ValueError(f"{path}: val_perplexity must be a positive number, got {ppl!r}")
    metrics = metrics_file(folder)
    rows = read_json_lines(metrics) if metrics.is_file() else []
    curve = [row for _, row in rows if isinstance(row, dict)]
    return Base(folder, float(ppl), fields, curve)
