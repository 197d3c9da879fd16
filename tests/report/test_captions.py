"""Snakemake report captions: every caption the workflow names exists and renders cleanly.

Snakemake renders a caption with Jinja and then docutils (``publish_parts``);
a reStructuredText warning there would break ``snakemake --report``.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
from docutils.core import publish_parts

WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"
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
