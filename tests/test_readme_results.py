"""scripts/readme-results.py writes the README's results block from a report, by hand-made files."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from adloco.config import load_config
from adloco.core.paths import report_dir

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts/readme-results.py")
readme_results = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(readme_results)

HEADER = "run,seed,method,final_val_perplexity,messages_total,communications,sim_time_s"
SUMMARY = f"""{HEADER},optimizer_steps
adloco,0,adloco,180.0,12,29,45.0,105
adloco,1,adloco,179.0,14,30,47.5,110
adloco,2,adloco,181.0,13,29,46.0,108
ddp,0,ddp,142.0,147,147,90.8,147
"""


def claims(verdict_under_first: str = "inconclusive") -> dict:
    comparison = {
        "headline": True,
        "against": "diloco",
        "verdict": "inconclusive",
        "under_alternative_rules": {
            "reached": {"value": "first", "verdict": verdict_under_first},
            "pairing": {"value": "none", "verdict": "inconclusive"},
        },
    }
    return {
        "base": {"val_perplexity": 182.4},
        "gain_shares": {
            "shares": {"adloco": 0.054, "ddp": 1.0},
            "note": None,
            "climbs": {"adloco": 0.99, "ddp": 1.0084},
        },  # fmt: skip
        "workers_map": {
            "global_batch": 16,
            "points": [
                {"run": "diloco", "workers": 4, "local_batch": 4, "share": 0.11},
                {"run": "diloco-w1", "workers": 1, "local_batch": 16, "share": 0.96},
            ],
            "b_simple": 51.4,
            "adloco_batches": {"min": 4.0, "median": 8.0, "max": 21.0},
        },
        "reference_perplexity": {"unigram": 637.0, "bigram": 78.0},
        "targets": [181.4, 180.5],
        "target_perplexity": 180.5,
        "target_source": "base",
        "target_levels": {"181.4": 0.995, "180.5": 0.99},
        "rules": {"reached": "stays", "between": "interpolated"},
        "claims": [
            {
                "number": 1,
                "statement": "AdLoCo reaches the target in less simulated time than DiLoCo",
                "verdict": "inconclusive",
                "reason": "adloco needs 0.98x diloco's time (p = 0.2)",
                "comparisons": [comparison],
            }
        ],
    }


@pytest.fixture
def report(tmp_path: Path) -> Path:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "summary.csv").write_text(SUMMARY)
    (folder / "claims.json").write_text(json.dumps(claims()))
    return folder


def test_the_block_gives_medians_ranges_targets_and_verdicts(report):
    text = readme_results.block(report)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    # adloco: median 180.0 of (180, 179, 181); 180 / 182.4 = 0.987; network messages median
    # 13 of (12, 14, 13), trainer rounds 29.
    assert rows[2] == (
        "| adloco | adloco | 3 | 180.0 (179.0–181.0) | 0.987 | 0.990 | 5% | 13 (12–14) "
        "| 29 (29–30) | 46.0 (45.0–47.5) | 108 (105–110) |"
    )
    assert rows[3] == ("| ddp | ddp | 1 | 142.0 | 0.779 | 1.008 | 100% | 147 | 147 | 90.8 | 147 |")
    assert "the main one 0.99 × base (180.5)" in text
    assert "interpolated in log-perplexity" in text
    assert (
        "1. AdLoCo reaches the target in less simulated time than DiLoCo — **inconclusive**: "
        "adloco needs 0.98x diloco's time (p = 0.2)" in text
    )
    assert "Under another rule" not in text  # no rule changes the verdict here
    assert (
        "ddp's global batch of 16 split as workers × local batch keeps 1 × 16 96%, 4 × 4 11%; "
        "the base's noise scale B_simple is 51 sequences; AdLoCo's local batches run 4–21 "
        "(median 8)." in text
    )
    assert "fresh clone's own report" in text
    # No run beside the report: its numerics are not known.
    assert "The runs' numerics modes (docs/numerics.md): none recorded;" in text


def test_the_block_says_which_numerics_mode_computed_the_runs(report):
    def runs(*records):
        for i, record in enumerate(records):
            folder = report.parent / "runs" / "adloco" / f"seed{i}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "summary.json").write_text(json.dumps({"numerics": record}))

    runs({"mode": "pinned"}, {"mode": "portable", "mkl_branch": "GenuineIntel-AVX512"})
    text = readme_results.block(report)
    assert "computed in the `portable` numerics mode" in text  # pinned: its old name
    assert "to the bit with `ADLOCO_NUMERICS=portable`" in text
    runs(*[{"mode": "fast", "mkl_branch": "AuthenticAMD-AUTO-avx2"}] * 2)
    text = readme_results.block(report)
    assert "the default `fast` numerics mode on MKL branch `AuthenticAMD-AUTO-avx2`" in text
    assert "on another CPU the verdicts are meant to be the same and the last digits differ" in text
    runs({"mode": "fast", "mkl_branch": "GenuineIntel-AVX512"})
    text = readme_results.block(report)
    assert (
        "numerics modes (docs/numerics.md): fast (AuthenticAMD-AUTO-avx2), "
        "fast (GenuineIntel-AVX512);" in text
    )


def test_a_rule_that_changes_a_headline_verdict_is_named(report):
    (report / "claims.json").write_text(json.dumps(claims(verdict_under_first="supported")))
    text = readme_results.block(report)
    assert "Under another rule: reached: first makes it supported against diloco." in text


def test_a_new_verdict_and_the_power_warnings_are_quoted(report):
    doc = claims(verdict_under_first="no meaningful difference")
    warning = (
        "Claim 1, AdLoCo against diloco (simulated time to 180.5), 3 paired seeds: the "
        "smallest possible p is 0.125, above the level 0.05"
    )
    doc["claims"][0]["warnings"] = [warning]
    (report / "claims.json").write_text(json.dumps(doc))
    text = readme_results.block(report)
    assert "reached: first makes it no meaningful difference against diloco." in text
    assert f"\n   Power: {warning}\n" in text


def test_the_readme_block_is_replaced_and_checked(report, tmp_path):
    readme = tmp_path / "README.md"
    begin, end = readme_results.BEGIN, readme_results.END
    readme.write_text(f"# title\n\nbefore\n{begin}\nold numbers\n{end}\nafter\n")
    assert readme_results.main([str(report), "--readme", str(readme), "--check"]) == 1
    assert readme_results.main([str(report), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# title\n\nbefore\n" + begin) and text.endswith(end + "\nafter\n")
    assert "old numbers" not in text and "| adloco | adloco | 3 |" in text
    assert readme_results.main([str(report), "--readme", str(readme), "--check"]) == 0


@pytest.mark.reliability("messages")
@pytest.mark.parametrize("text", ["no markers\n", "{begin}\n{begin}\n{end}\n"])
def test_a_readme_without_its_markers_is_one_line_and_kept(report, tmp_path, capsys, text):
    readme = tmp_path / "README.md"
    text = text.format(begin=readme_results.BEGIN, end=readme_results.END)
    readme.write_text(text)
    for check in ([], ["--check"]):
        assert readme_results.main([str(report), "--readme", str(readme), *check]) == 1
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"readme-results: error: {readme}: holds "), line
        assert f"needs exactly one {readme_results.BEGIN} and one {readme_results.END}" in line
        assert line.endswith(
            "put the two marker lines where the block goes, or give the right file"
        )
        assert readme.read_text() == text


@pytest.mark.reliability("ownership")
def test_a_readme_link_stays_a_link_and_its_file_is_updated(report, tmp_path):
    begin, end = readme_results.BEGIN, readme_results.END
    (tmp_path / "docs").mkdir()
    real = tmp_path / "docs/README.md"
    real.write_text(f"# title\n{begin}\nold numbers\n{end}\nafter\n")
    real.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to("docs/README.md")
    assert readme_results.main([str(report), "--readme", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "docs/README.md"
    assert "old numbers" not in real.read_text() and real.read_text().endswith(end + "\nafter\n")
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs", "link.md", "report"]
    assert [p.name for p in (tmp_path / "docs").iterdir()] == ["README.md"]


def test_the_project_readme_has_one_results_block():
    text = (ROOT / "README.md").read_text()
    assert text.count(readme_results.BEGIN) == 1 and text.count(readme_results.END) == 1
    assert text.index(readme_results.BEGIN) < text.index(readme_results.END)


def test_in_short_gives_the_answer_its_power_and_the_device(report):
    doc = claims()
    doc["claims"][0]["comparisons"][0]["power"] = {
        "pairs": 8,
        "smallest_effect": 0.1,
        "superiority": 0.9812,
        "equivalence": 0.9567,
        "sd_log_ratio": 0.0601,
        "goal": 0.8,
    }

    def low(against, rests, headline=False, target=180.5, superiority=0.5):
        return {"against": against, "claim_rests_on": rests, "headline": headline,
                "quantity": "communications", "target_perplexity": target,
                "power": {"superiority": superiority, "goal": 0.8}, "verdict": "supported",
                "under_alternative_rules": {}}  # fmt: skip

    # Claim 2 rests on two comparisons below the goal; beside them two other baselines at
    # its headline's target are below it too (context); one at another target, the ddp
    # anchor and one at 90 % are not counted.
    comparisons = [
        low("diloco", True, headline=True), low("diloco", True), low("localsgd", False),
        low("best baseline", False), low("localsgd", False, target=181.4),
        low("ddp anchor", False), low("diloco-w1", False, superiority=0.9),
    ]  # fmt: skip
    doc["claims"].append(
        {"number": 2, "statement": "fewer communications", "verdict": "not supported",
         "reason": "r", "comparisons": comparisons, "warnings": ["w1", "w2", "w3"]}
    )  # fmt: skip
    doc["claim_1_context"] = "The clock: an H100."
    (report / "claims.json").write_text(json.dumps(doc))
    text = readme_results.block(report)
    assert (
        "- The answer: claim 1 (in time) **inconclusive**, claim 2 (in network messages) "
        "**not supported**.\n"
    ) in text
    assert (
        "- Its power: at 8 paired seeds, claim 1's test against diloco detects a true ratio of "
        "1/1.1 (the smallest effect of interest, 10%) with 98% power and shows no meaningful "
        "difference at a ratio of 1 with 96% (per-seed log-ratio SD 0.06); 2 comparison(s) a "
        "claim rests on fall short of the 80% goal (the warnings below); 2 comparison(s) with "
        "other baselines, context beside the verdicts, are below it too.\n"
    ) in text
    assert "- The device: The clock: an H100.\n" in text
    # Without power or context: the answer alone.
    (report / "claims.json").write_text(json.dumps(claims()))
    text = readme_results.block(report)
    assert "- The answer: claim 1 (in time) **inconclusive**.\n" in text
    assert "Its power" not in text and "The device" not in text


def test_the_workers_line_names_the_maps_effective_lr(report):
    doc = claims()
    doc["workers_map"]["effective_lr"] = 0.00075
    (report / "claims.json").write_text(json.dumps(doc))
    text = readme_results.block(report)
    assert "1 × 16 96%, 4 × 4 11%, all at an effective peak inner lr of 0.00075;" in text


def _without_verdict(doc: dict) -> None:
    del doc["claims"][0]["verdict"]


def _claims_as_text(doc: dict) -> None:
    doc["claims"] = "supported"


# (case, what is done to the report folder, the message after "<file>: ")
BAD_REPORTS = [
    ("no claims.json", lambda f: (f / "claims.json").unlink(), "claims.json", "not found"),
    ("not JSON", lambda f: (f / "claims.json").write_text('{"claims": ['), "claims.json",
     "not valid JSON ("),
    ("a list", lambda f: (f / "claims.json").write_text("[]"), "claims.json",
     "expected a JSON object"),
    ("no verdict", _without_verdict, "claims.json", "no key 'verdict', which the block quotes"),
    ("claims as text", _claims_as_text, "claims.json",
     "a value of another type than adloco report writes ("),
    ("no summary.csv", lambda f: (f / "summary.csv").unlink(), "summary.csv", "not found"),
    ("no seed column", lambda f: (f / "summary.csv").write_text(
        SUMMARY.replace(",seed,", ",seeds,")), "summary.csv", "no column 'seed'"),
    ("a seed of text", lambda f: (f / "summary.csv").write_text(
        SUMMARY.replace("adloco,1,", "adloco,one,")), "summary.csv", "line 3: invalid literal"),
]  # fmt: skip


@pytest.mark.reliability("messages")
@pytest.mark.parametrize(
    "case, damage, name, message", BAD_REPORTS, ids=[c[0] for c in BAD_REPORTS]
)
def test_a_report_it_cannot_read_is_one_line_naming_the_file_and_the_fix(
    report, tmp_path, capsys, case, damage, name, message
):
    readme = tmp_path / "README.md"
    text = f"# title\n{readme_results.BEGIN}\nold numbers\n{readme_results.END}\n"
    readme.write_text(text)
    if case in ("no verdict", "claims as text"):
        doc = claims()
        damage(doc)
        (report / "claims.json").write_text(json.dumps(doc))
    else:
        damage(report)
    for check in ([], ["--check"]):
        assert readme_results.main([str(report), "--readme", str(readme), *check]) == 1
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"readme-results: error: {report / name}: {message}"), line
        assert line.endswith(f"write the report again (adloco report --out {report})"), line
        assert readme.read_text() == text


def test_the_words_on_the_numbers_are_headed_by_the_commands_that_make_them():
    # The README points to docs/results.md right after its block; the page opens with
    # the commands that make the numbers it reads: the default run, then this script
    # on the report folder that run writes.
    readme = (ROOT / "README.md").read_text()
    after = readme.split(readme_results.END, 1)[1].split("\n## ", 1)[0]
    assert "[docs/results.md](docs/results.md)" in after
    page = (ROOT / "docs/results.md").read_text()
    head, first_section = page.split("\n## ", 2)[:2]
    assert first_section.startswith("The default run\n")
    block = head.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    experiment = load_config(ROOT / "config/config.yaml").experiment
    report = report_dir(experiment).as_posix()
    assert commands == ["make run", f"python scripts/readme-results.py {report}"]
    assert (ROOT / "scripts/readme-results.py").is_file()
