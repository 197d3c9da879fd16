"""Reference perplexities of the tokenized data and the base model, read for the report."""

from __future__ import annotations

import math

import pytest

from adloco.report.inputs.references import References, load_base, load_references


@pytest.mark.heavy
def test_missing_references_are_said_and_every_verdict_says_so(workspace):
    workspace.two_seed_runs()
    refs = load_references(workspace.manifest())  # a manifest from before the references
    assert refs.levels == {} and "no reference_perplexity" in refs.note
    assert load_references(None).note.startswith("no tokenized data folder")
    _, _, ladder, _ = workspace.load([60], references=refs)
    assert ladder.untestable == {} and "could not be applied" in ladder.caveat
    claims = workspace.claims([60], references=refs)
    assert "the unigram rule could not be applied" in claims[1].headline[0].reason


def test_malformed_references_and_base_name_the_file(workspace):
    folder = workspace.manifest(unigram=-3.0)
    with pytest.raises(ValueError, match="reference_perplexity.unigram must be a positive"):
        load_references(folder)
    base = workspace.base(50.0)
    (base / "base.json").write_text('{"val_perplexity": "x"}')
    with pytest.raises(ValueError, match="base.json: val_perplexity must be a positive number"):
        load_base(base)
    with pytest.raises(FileNotFoundError, match="run `adloco pretrain`"):
        load_base(workspace.root / "nowhere")


def test_base_curve_is_read(workspace):
    base = load_base(workspace.base(42.0, curve=[{"step": 1, "val_perplexity": 80.0}]))
    assert base.val_perplexity == 42.0 and base.curve == [{"step": 1, "val_perplexity": 80.0}]
    assert math.isclose(base.fields["val_loss"], math.log(42.0))
    assert References.unavailable("x").unigram is None
