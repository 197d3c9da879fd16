"""Whether the verdicts move with the model's size (analysis/scale.py), on hand-made claims."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from markupsafe import escape

from adloco import cli
from adloco.config import load_config
from adloco.report.analysis.scale import compare_scale, model_parameters, row_words, summary_words
from adloco.report.page.first import scale_block


def head(against: str, quantity: str, estimate) -> dict:
    """A headline comparison as claims.json writes it (the fields the comparison reads)."""
    return {"against": against, "baseline": against, "quantity": quantity,
            "effect_estimate": estimate, "headline": True}  # fmt: skip


def claims(parameters: int | None, verdicts: list[str], ratios: list[float]) -> dict:
    """A claims.json document: claims 1 (time) and 2 (communications) against diloco, claim 3
    without ablations (no headline comparison: its reason stands for its effect)."""
    docs = [
        {"number": n, "verdict": v, "reason": "why",
         "comparisons": [head("diloco", q, r), {**head("ddp", q, 9.0), "headline": False}]}
        for n, q, v, r in zip((1, 2), ("sim_time_s", "communications"), verdicts, ratios,
                              strict=True)
    ]  # fmt: skip
    docs.append({"number": 3, "verdict": "not testable", "reason": "no ablation runs",
                 "comparisons": []})  # fmt: skip
    return {"model": {"parameters": parameters}, "claims": docs}


def write(path, document: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def test_the_same_verdicts_at_both_sizes_name_both_counts_and_ratios_smaller_first(tmp_path):
    here = claims(1_721_664, ["not supported", "not supported"], [1.25, 4.5])
    other = write(tmp_path / "default" / "claims.json",
                  claims(418_272, ["not supported", "not supported"], [1.39, 5.02]))  # fmt: skip
    scale = compare_scale(here, other.parent)  # the folder names its claims.json
    assert [r.same for r in scale.rows] == [True, True, False]
    assert summary_words(scale) == (
        f"At another model size, {other}: 2 of the 2 claims tested at both sizes keep their "
        "verdict."
    )
    assert row_words(scale.rows[0], scale) == (
        "Claim 1, the same verdict at both sizes: not supported at 418,272 parameters "
        "(1.39× diloco's simulated time); not supported at 1,721,664 parameters (this report) "
        "(1.25× diloco's simulated time)."
    )
    assert row_words(scale.rows[2], scale) == (
        "Claim 3, not tested at both sizes: not testable at 418,272 parameters "
        "(no ablation runs); not testable at 1,721,664 parameters (this report) "
        "(no ablation runs)."
    )
    block = scale_block(SimpleNamespace(scale=scale))
    assert block.count("<li>") == 3 and "2 of the 2 claims tested at both" in block
    assert "(1.25× diloco&#39;s simulated time)" in block  # escaped as page text
    record = scale.as_dict()
    assert (record["parameters_here"], record["parameters_there"]) == (1_721_664, 418_272)
    assert record["claims"][1]["there"] == {
        "verdict": "not supported", "effects": "5.02× diloco's communications",
    }  # fmt: skip


def test_a_verdict_that_moves_is_said_and_counted(tmp_path):
    here = claims(418_272, ["not supported", "not supported"], [1.39, 5.02])
    other = write(tmp_path / "claims.json",
                  claims(1_721_664, ["supported", "not supported"], [0.8, "inf"]))  # fmt: skip
    scale = compare_scale(here, other)
    assert [r.same for r in scale.rows] == [False, True, False]
    assert summary_words(scale).endswith(
        ": 1 of the 2 claims tested at both sizes keep their verdict."
    )
    # The smaller model, this report's, comes first.
    assert row_words(scale.rows[0], scale) == (
        "Claim 1, the verdict moves with size: not supported at 418,272 parameters "
        "(this report) (1.39× diloco's simulated time); supported at 1,721,664 parameters "
        "(0.8× diloco's simulated time)."
    )
    assert "AdLoCo never gets there, diloco does" in row_words(scale.rows[1], scale)
    # A claim tested at one size only (no ablations at the other) is not said to move.
    other_doc = json.loads(other.read_text())
    other_doc["claims"][2] = {
        "number": 3,
        "verdict": "not supported",
        "reason": "",
        "comparisons": [head("adloco-no-merge", "sim_time_s", 1.06)],
    }
    scale = compare_scale(here, write(other, other_doc))
    assert (scale.rows[2].tested, scale.rows[2].same) == (False, False)
    assert row_words(scale.rows[2], scale) == (
        "Claim 3, not tested at both sizes: not testable at 418,272 parameters (this report) "
        "(no ablation runs); not supported at 1,721,664 parameters "
        "(1.06× adloco-no-merge's simulated time)."
    )


def test_a_missing_other_report_is_one_line_saying_how_to_make_it(tmp_path):
    folder = tmp_path / "results" / "scale-4x" / "report"
    scale = compare_scale(claims(418_272, ["a", "b"], [1.0, 1.0]), folder)
    line = (
        f"The scale comparison's other report, {folder}/claims.json, is missing: make it with "
        f"`snakemake --cores all --configfile <its configuration> {folder}/index.html`, "
        "then run this report again."
    )
    assert scale.rows == () and summary_words(scale) == line
    assert scale_block(SimpleNamespace(scale=scale)) == f"<p class='note'>{escape(line)}</p>"
    assert scale_block(SimpleNamespace(scale=None)) == ""  # not asked for: nothing shown


def test_an_older_report_without_its_size_and_a_file_that_is_no_claims_json(tmp_path):
    older = claims(None, ["not supported", "not supported"], [1.39, 5.02])
    scale = compare_scale(claims(1_721_664, ["not supported", "supported"], [1.2, 0.9]),
                          write(tmp_path / "claims.json", older))  # fmt: skip
    assert "does not record its model's size" in summary_words(scale)
    assert row_words(scale.rows[1], scale).startswith(
        "Claim 2, the verdict moves with size: supported at 1,721,664 parameters (this report)"
    )
    assert row_words(scale.rows[1], scale).endswith(
        "; not supported at a size not recorded (5.02× diloco's communications)."
    )
    with pytest.raises(ValueError, match="not a report's claims.json"):
        compare_scale(older, write(tmp_path / "bad" / "claims.json", {"claims": [{"no": 1}]}))


def test_the_parameter_count_of_the_default_and_the_4x_preset_by_hand():
    # Per layer: q and o (h x h), k and v (h x h, as many key/value heads as query heads),
    # the gated MLP (3 x h x intermediate), two norms (2h); then the final norm and the tied
    # embedding (2,048 x h).
    def by_hand(h, inter, layers):
        return layers * (4 * h * h + 3 * h * inter + 2 * h) + h + 2048 * h

    default = load_config("config/config.yaml")
    scaled = load_config("config/scale-4x.yaml")
    assert model_parameters(default, {}) == by_hand(96, 256, 2) == 418_272
    assert model_parameters(scaled, {"vocab_size": 2048}) == by_hand(192, 512, 3) == 1_721_664
    assert model_parameters(scaled, {"vocab_size": 1024}) == by_hand(192, 512, 3) - 1024 * 192


@pytest.mark.heavy
def test_adloco_report_compare_scale_puts_it_in_claims_json_and_on_the_first_screen(
    engine_fixture, tmp_path
):
    f = engine_fixture
    other = write(tmp_path / "other" / "claims.json",
                  claims(10_000_000, ["supported", "supported"], [0.5, 0.25]))  # fmt: skip
    out = tmp_path / "report"
    argv = ["report", "--config", str(f / "config.yaml"), "--runs", str(f / "runs"),
            "--calibration", str(f / "calibration"), "--variance", str(f / "variance"),
            "--out", str(out)]  # fmt: skip
    assert cli.main([*argv, "--compare-scale", str(other.parent)]) == 0
    doc = json.loads((out / "claims.json").read_text())
    vocab = load_config(f / "config.yaml").data.tokenizer.vocab_size
    # One layer of width 16 (2 heads of 8), an MLP of 32, a tied embedding: counted by hand.
    parameters = (4 * 16 * 16 + 3 * 16 * 32 + 2 * 16) + 16 + vocab * 16
    assert doc["model"] == {"parameters": parameters}
    scale = doc["scale"]
    assert (scale["parameters_here"], scale["parameters_there"]) == (parameters, 10_000_000)
    assert [c["number"] for c in scale["claims"]] == [1, 2, 3]
    assert [c["there"]["verdict"] for c in scale["claims"]] == [
        "supported", "supported", "not testable",
    ]  # fmt: skip
    assert [c["same_verdict"] for c in scale["claims"]] == [
        "not testable" not in (c["verdict"], s["there"]["verdict"])
        and c["verdict"] == s["there"]["verdict"]
        for c, s in zip(doc["claims"], scale["claims"], strict=True)
    ]
    page = (out / "index.html").read_text()
    assert f"{parameters:,} parameters (this report)" in page
    assert "10,000,000 parameters (0.5× diloco&#39;s simulated time)" in page
    # Without the option the report holds no comparison.
    assert cli.main([*argv[:-1], str(tmp_path / "plain")]) == 0
    assert "scale" not in json.loads((tmp_path / "plain" / "claims.json").read_text())
