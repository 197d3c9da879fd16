"""Whether the claims' verdicts move with the model's size: this report against another one.

Part of ``adloco report`` (``--compare-scale``). The default model sits far
below the sizes of the DiLoCo scaling-law papers, where the cost of averaging
is largest, so a verdict earned at one size says little about another until a
second experiment at another size (``config/scale-4x.yaml``) is set beside
it. Both sides are read as ``claims.json`` documents, this report's as it is
about to be written and the other's from its file, so the comparison is the
same whichever of the two reports asks for it: for each claim, its verdict
and its headline effects (median paired ratios) at each size, and whether the
verdict is the same; a claim not testable at either size is said to be not
tested at both, never to move. The parameter counts come from each document's
``model.parameters`` (:func:`model_parameters`); a report written before
claims.json held it says so instead of a number. A missing other report is
no error: the page says which file is missing and how to make it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adloco.config import Config
from adloco.formats.model_size import parameter_count
from adloco.report.analysis.verdict import NOT_TESTABLE, QUANTITY_WORDS, fmt_ratio


def model_parameters(config: Config, corpus: dict[str, Any]) -> int | None:
    """Parameters of the configured model over the corpus's vocabulary; None when unknown.

    A model loaded by name (``model.source: pretrained``) has a shape no
    configuration field gives, and a corpus without a vocabulary size (nor a
    BPE tokenizer trained to one) leaves the embedding's size open.
    """
    if config.model.source == "pretrained":
        return None
    tokenizer = config.data.tokenizer
    vocab = corpus.get("vocab_size", tokenizer.vocab_size if tokenizer.kind == "bpe" else None)
    return parameter_count(config.model, int(vocab)) if vocab else None


def _ratio_words(comparison: dict[str, Any]) -> str:
    """One headline comparison's effect: ``1.39× diloco's simulated time``."""
    what = QUANTITY_WORDS.get(comparison.get("quantity", ""), comparison.get("quantity", ""))
    other = comparison.get("baseline") or comparison.get("against")
    estimate = comparison.get("effect_estimate")
    if estimate is None:
        return f"no {what} to compare with {other}"
    value = float(estimate)  # "inf" when AdLoCo's median seed never gets there
    if value == 0:
        return f"{other} never gets there"
    if math.isinf(value):
        return f"AdLoCo never gets there, {other} does"
    return f"{fmt_ratio(value)}× {other}'s {what}"


@dataclass(frozen=True)
class AtSize:
    """One claim in one report: its verdict and its headline effects in words."""

    verdict: str
    effects: str  # the headline comparisons' ratios, or the claim's reason when it has none


def claims_at_size(document: dict[str, Any]) -> dict[int, AtSize]:
    """Claim number -> its verdict and headline effects, from a claims.json document."""
    out = {}
    for claim in document.get("claims") or []:
        heads = [c for c in claim.get("comparisons", []) if c.get("headline")]
        effects = ", ".join(_ratio_words(c) for c in heads) if heads else claim.get("reason", "")
        out[int(claim["number"])] = AtSize(str(claim["verdict"]), effects)
    return out


def parameters_of(document: dict[str, Any]) -> int | None:
    size = document.get("model")
    value = size.get("parameters") if isinstance(size, dict) else None
    return int(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class ScaleRow:
    """One claim at both sizes; ``there`` is None when the other report lacks the claim."""

    number: int
    here: AtSize
    there: AtSize | None

    @property
    def tested(self) -> bool:
        """Tested at both sizes: a claim not testable at one (no ablations) cannot move."""
        sides = (self.here, self.there)
        return all(a is not None and a.verdict != NOT_TESTABLE for a in sides)

    @property
    def same(self) -> bool:
        return self.tested and self.here.verdict == self.there.verdict


@dataclass(frozen=True)
class ScaleComparison:
    """This report's claims beside another report's, at another model size."""

    other: str  # the other report's claims.json, as given
    parameters_here: int | None
    parameters_there: int | None
    rows: tuple[ScaleRow, ...]
    missing: str = ""  # the other report is not there: which file, and how to make it

    def as_dict(self) -> dict[str, Any]:
        def side(a: AtSize | None) -> dict[str, str] | None:
            return {"verdict": a.verdict, "effects": a.effects} if a else None

        return {
            "other": self.other,
            "missing": self.missing or None,
            "parameters_here": self.parameters_here,
            "parameters_there": self.parameters_there,
            "claims": [
                {"number": r.number, "tested_at_both": r.tested, "same_verdict": r.same,
                 "here": side(r.here), "there": side(r.there)}
                for r in self.rows
            ],
        }  # fmt: skip


def how_to_make(path: Path) -> str:
    """The one line the page gives when the other report is missing."""
    folder = path.parent.as_posix()
    return (
        f"The scale comparison's other report, {path.as_posix()}, is missing: make it with "
        f"`snakemake --cores all --configfile <its configuration> {folder}/index.html`, "
        "then run this report again."
    )


def compare_scale(here: dict[str, Any], other: str | Path) -> ScaleComparison:
    """This report's claims document against the claims.json at ``other`` (or in that folder)."""
    path = Path(other)
    if path.suffix != ".json":  # a report's folder, there or not
        path = path / "claims.json"
    mine = claims_at_size(here)
    if not path.is_file():
        return ScaleComparison(str(path), parameters_of(here), None, (), how_to_make(path))
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        theirs = claims_at_size(document)
    except (ValueError, KeyError, TypeError) as e:  # not a claims.json adloco report wrote
        raise ValueError(f"--compare-scale {path}: not a report's claims.json ({e})") from None
    rows = tuple(ScaleRow(n, mine[n], theirs.get(n)) for n in sorted(mine))
    return ScaleComparison(str(path), parameters_of(here), parameters_of(document), rows)


def _size(parameters: int | None, here: bool) -> str:
    count = f"{parameters:,} parameters" if parameters is not None else "a size not recorded"
    return count + (" (this report)" if here else "")


def row_words(row: ScaleRow, scale: ScaleComparison) -> str:
    """``Claim 1, the same verdict at both sizes: …``, the smaller model first."""
    sides = [
        (scale.parameters_here, True, row.here),
        (scale.parameters_there, False, row.there),
    ]
    sides.sort(key=lambda side: math.inf if side[0] is None else side[0])
    words = "; ".join(
        f"{at.verdict} at {_size(n, here)} ({at.effects})"
        if at
        else f"not in the report at {_size(n, here)}"
        for n, here, at in sides
    )
    if not row.tested:
        head = "not tested at both sizes"
    else:
        head = "the same verdict at both sizes" if row.same else "the verdict moves with size"
    return f"Claim {row.number}, {head}: {words}."


def summary_words(scale: ScaleComparison) -> str:
    """The scale comparison's lead: which report, how many verdicts hold."""
    if scale.missing:
        return scale.missing
    same, tested = sum(r.same for r in scale.rows), sum(r.tested for r in scale.rows)
    unrecorded = (
        " (its claims.json does not record its model's size: run that report again)"
        if scale.parameters_there is None
        else ""
    )
    return (
        f"At another model size, {scale.other}{unrecorded}: {same} of the {tested} claims "
        "tested at both sizes keep their verdict."
    )
