"""What a newcomer meets at the root: the licence, the citation, the workflow catalog's files.

LICENSE and CITATION.cff against pyproject.toml and the paper; the Snakemake
workflow catalog's conventions (``.snakemake-workflow-catalog.yml``,
``config/README.md``) against the files they name; the report's pipeline
caption against the configuration's ``snakemake.train_jobs``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ARXIV_ID = "2508.18182"
PAPER_TITLE = (
    "AdLoCo: adaptive batching significantly improves communications efficiency and "
    "convergence for Large Language Models"
)
# The paper's authors, in its order (arXiv 2508.18182's abstract page).
PAPER_FAMILY_NAMES = [
    "Kutuzov", "Baderko", "Kulibaba", "Dzhalilov", "Bobrov", "Mashtaler", "Gasnikov",
]  # fmt: skip


def pyproject_license() -> str:
    """pyproject.toml's ``license``, an SPDX identifier."""
    text = (ROOT / "pyproject.toml").read_text()
    (found,) = re.findall(r'^license = "([^"]+)"', text, flags=re.MULTILINE)
    return found


def readme_section(title: str) -> str:
    """The README's ``## <title>`` section, up to the next one."""
    text = (ROOT / "README.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


# ------------------------------------------------------------ licence and citation


def test_the_licence_file_is_the_mit_licence_pyproject_declares():
    text = (ROOT / "LICENSE").read_text()
    assert pyproject_license() == "MIT"
    assert text.splitlines()[0] == "MIT License"
    assert "Copyright (c) 2026 the adloco authors" in text
    # The licence's grant and its disclaimer, as the MIT text words them.
    flat = " ".join(text.split())
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy" in flat
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in flat


def test_the_citation_file_is_cff_1_2_0_and_names_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["message"].strip() and cff["title"].startswith("adloco")
    assert cff["license"] == pyproject_license()
    assert cff["authors"] == [{"name": "the adloco authors"}]
    (paper,) = [r for r in cff["references"] if ARXIV_ID in r["url"]]
    assert " ".join(paper["title"].split()) == PAPER_TITLE
    assert [a["family-names"] for a in paper["authors"]] == PAPER_FAMILY_NAMES
    assert all(a["given-names"] for a in paper["authors"])
    assert paper["type"] == "article" and paper["year"] == 2025
    ids = {i["type"]: i["value"] for i in paper["identifiers"]}
    assert ids == {
        "other": f"arXiv:{ARXIV_ID}",
        "doi": f"10.48550/arXiv.{ARXIV_ID}",
        "url": f"https://arxiv.org/abs/{ARXIV_ID}",
    }


def test_the_readme_links_the_paper_first_and_the_licence_and_citation_last():
    text = (ROOT / "README.md").read_text()
    first = text.split("\n\n")[1]  # after the title
    assert f"[arXiv {ARXIV_ID}](https://arxiv.org/abs/{ARXIV_ID})" in first
    licence = readme_section("Licence")
    for name in ("LICENSE", "CITATION.cff"):
        assert f"[{name}]({name})" in licence and (ROOT / name).is_file()


# ------------------------------------------------------------ the workflow catalog


def test_the_catalog_file_has_the_catalogs_usage_block_and_names_files_that_exist():
    text = (ROOT / ".snakemake-workflow-catalog.yml").read_text()
    usage = yaml.safe_load(text)["usage"]
    assert set(usage) == {"mandatory-flags", "software-stack-deployment"}
    flags = usage["mandatory-flags"]
    assert set(flags) == {"desc", "flags"} and flags["flags"] == "--configfile config/config.yaml"
    stack = usage["software-stack-deployment"]
    assert stack == {"conda": True, "apptainer": False, "apptainer+conda": False, "report": True}
    named = set(re.findall(r"\b(?:config|workflow)/[\w./-]*\w", text))
    assert {"config/config.yaml", "config/README.md", "workflow/Snakefile"} <= named
    for path in named:
        assert (ROOT / path).exists(), path
    # What the catalog requires beside it, and what the stack block claims.
    snakefile = (ROOT / "workflow/Snakefile").read_text()
    assert re.search(r"^report: ", snakefile, flags=re.MULTILINE)  # snakemake --report
    rules = sorted((ROOT / "workflow/rules").glob("*.smk"))
    assert rules and any(re.search(r"^\s+conda:$", r.read_text(), re.MULTILINE) for r in rules)
    assert "container:" not in snakefile + "".join(r.read_text() for r in rules)


def test_the_configuration_readme_names_every_preset_and_section():
    text = (ROOT / "config/README.md").read_text()
    presets = sorted((ROOT / "config").glob("*.yaml"))
    assert len(presets) >= 2
    for preset in presets:
        assert f"| `{preset.name}` |" in text, preset.name
    assert "--configfile config/test.yaml" in text
    assert "`src/adloco/schemas/config.schema.yaml`" in text
    schema = yaml.safe_load((ROOT / "src/adloco/schemas/config.schema.yaml").read_text())
    rows = re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)? \|", text, flags=re.MULTILINE)
    listed = {key for row in rows for key in row if key} - {p.name for p in presets}
    assert listed == set(schema["properties"])


def test_the_pipeline_caption_says_the_default_configurations_training_jobs():
    caption = " ".join((ROOT / "workflow/report/workflow.rst").read_text().split())
    default = yaml.safe_load((ROOT / "config/config.yaml").read_text())["snakemake"]["train_jobs"]
    other = {"run": "seed", "seed": "run"}[default]
    assert f"``snakemake.train_jobs: {default}`` (``config/config.yaml``'s choice)" in caption
    assert f"``train_jobs: {other}``" in caption
    assert "one job per run, ``train_<run>``" in caption
    assert "the rule ``train`` has one job per run and seed" in caption
