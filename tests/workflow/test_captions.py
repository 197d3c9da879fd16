"""Snakemake report captions: every caption the workflow names exists and renders cleanly.

Snakemake renders a caption with Jinja and then docutils (``publish_parts``);
a reStructuredText warning there would break ``snakemake --report``.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import jinja2
import pytest
from docutils.core import publish_parts

WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"
SRC = WORKFLOW.parent / "src" / "adloco"
CAPTIONS = sorted((WORKFLOW / "report").glob("*.rst"))


def test_the_captions_exist():
    assert {p.name for p in CAPTIONS} >= {
        "workflow.rst",
        "calibration.rst",
        "variance.rst",
        "perplexity.rst",
        "summary.rst",
    }


def test_every_caption_named_by_the_workflow_exists():
    named = set()
    for path in [WORKFLOW / "Snakefile", *(WORKFLOW / "rules").glob("*.smk")]:
        if path.is_file():
            named |= {m for m in re.findall(r"report/([\w.-]+\.rst)", path.read_text())}
    if not named:
        pytest.skip("the workflow names no captions yet")
    assert named <= {p.name for p in CAPTIONS}


@pytest.mark.parametrize("caption", CAPTIONS, ids=lambda p: p.name)
def test_caption_renders_without_warnings(caption):
    text = (
        jinja2.Environment(undefined=jinja2.StrictUndefined)
        .from_string(caption.read_text())
        .render(snakemake=None, categories={}, files={})
    )
    # halt_level 2: a docutils warning raises instead of printing.
    body = publish_parts(
        text, writer="html", settings_overrides={"halt_level": 2, "report_level": 2}
    )["html_body"]
    assert "placeholder" not in body.lower()
    assert len(body) > 200


def caption_text() -> dict[str, str]:
    return {p.name: p.read_text() for p in CAPTIONS}


def test_the_pipeline_caption_names_every_stage_the_workflow_runs():
    # Every rule's `adloco <stage>` command, pretraining included, is in workflow.rst.
    rules = "".join(p.read_text() for p in (WORKFLOW / "rules").glob("*.smk"))
    commands = set(re.findall(r'"(?:\{params\.launcher\})?adloco ([a-z-]+) ', rules))
    assert {"prepare-corpus", "tokenize", "pretrain", "calibrate", "variance", "train",
            "report"} <= commands  # fmt: skip
    pipeline = caption_text()["workflow.rst"]
    for command in commands:
        assert f"``adloco {command}``" in pipeline, command


def test_every_path_in_a_caption_is_one_the_pipeline_writes():
    # The layout of adloco.core.paths, with <experiment>, <dataset>, <run>, <seed>, <device>.
    from adloco.core import paths

    e, d = "<experiment>", "<dataset>"
    layout = [
        paths.calibration_file(e, "<device>"),
        paths.variance_dir(e),
        paths.run_dir(e, "<run>", "<seed>"),
        paths.base_dir(e),
        paths.report_dir(e),
        paths.report_figures_dir(e),
        paths.tokenized_dir(d),
        paths.RAW / d,
    ]
    known = {p.as_posix() for p in layout}
    found = {
        (name, path.rstrip("/."))
        for name, text in caption_text().items()
        for path in re.findall(r"\b(?:results|data|logs)/[\w<>/.-]*", text)
    }
    assert found, "no path in the captions"
    for name, path in found:
        # A folder of the layout, or a file in one.
        where = path if path in known else str(PurePosixPath(path).parent)
        assert where in known, f"{name}: {path} is not a path the pipeline writes"
    # The page where the report writes it (a former caption said results/report/index.html).
    assert ("workflow.rst", "results/<experiment>/report/index.html") in found


def test_a_caption_names_only_sections_the_page_has():
    # A section named in a caption ('section "X"') is a heading of the report's page: in its
    # templates, or in the modules for the few headings written there.
    report = SRC / "report"
    pieces = [*report.rglob("*.py"), *(report / "page" / "templates").glob("*.html")]
    source = "".join(p.read_text(encoding="utf-8") for p in pieces)
    headings = set(re.findall(r"<h2 id='\w+'>([^<]+)</h2>", source))
    assert "Calibration" in headings
    for name, text in caption_text().items():
        for title in re.findall(r'section "([^"]+)"', " ".join(text.split())):
            assert title in headings, f"{name} names a section the page does not have: {title}"


def test_the_figures_caption_names_every_figure_the_report_writes():
    from adloco.report import FIGURE_NAMES, TABLES

    figures = caption_text()["perplexity.rst"]
    for name in FIGURE_NAMES:
        assert f"``{name}``" in figures, name
    tables = caption_text()["summary.rst"]
    # curves.csv is captioned with the curves it tabulates.
    for name in (*TABLES, "index.html", "claims.json"):
        assert f"``{name}``" in (figures if name == "curves.csv" else tables), name
