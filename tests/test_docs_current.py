"""The docs speak of this repository and its current default: pages, paths, generated figures.

docs/calibration.md's "Measured figures" block is written by
``scripts/calibration-figures.py`` from a calibration file; its
machine-independent figures (the device, the model, the trial's steps) must
be the default configuration's.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from adloco.config import load_config
from adloco.formats.model_size import parameter_count

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
_SPEC = importlib.util.spec_from_file_location(
    "calibration_figures", ROOT / "scripts" / "calibration-figures.py"
)
calibration_figures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(calibration_figures)


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", *patterns], capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return [ROOT / p for p in out]


def test_every_docs_page_is_listed_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert pages and [p for p in pages if f"(docs/{p})" not in readme] == []


def test_every_docs_path_the_text_names_exists():
    named = set()
    for path in tracked("README.md", "docs/*.md", "config/*.yaml", "src/adloco/*.py"):
        named |= set(re.findall(r"\bdocs/[\w./-]+\.md\b", path.read_text()))
    assert named and sorted(p for p in named if not (ROOT / p).is_file()) == []


def test_no_text_cites_a_specification_outside_the_repository():
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in tracked("README.md", "docs/*.md", "config/*.yaml", "src/adloco/**.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bSPEC\b", line)
    ]
    assert found == []


def test_the_interpolated_clock_curve_by_hand():
    batches, seconds = [1, 64, 128], [0.4, 0.4, 0.8]
    f = calibration_figures.interpolate
    assert f(batches, seconds, 1) == 0.4 and f(batches, seconds, 64) == 0.4
    assert f(batches, seconds, 96) == pytest.approx(0.6)  # halfway from 64 to 128
    assert f(batches, seconds, 192) == pytest.approx(1.2)  # on along the last segment
    assert f([2, 4], [1.0, 2.0], 1) == 1.0  # flat before the first point


def test_the_block_from_a_hand_made_record(tmp_path):
    record = {
        "torch_version": "9.9", "method": "tracker", "device": "d", "memory_bytes": 2**30,
        "nodes_per_device": 2, "slot_sharing": "concurrent", "budget_bytes": 2**29,
        "margin": 0.9, "model_parameters": 1000, "vocab_size": 64, "seq_len_tokens": 8,
        "dtype": "float32", "steps_per_trial": 2, "raw_max_batch": 2, "max_batch": 1,
        "trials": [{"batch": 1, "fits": True, "peak_bytes": 1.5e6},
                   {"batch": 4, "fits": False, "peak_bytes": 6e6}],
        "step_time": {"model": "roofline"},
        "step_time_curve": {"batches": [1, 4], "fwd_bwd_s": [0.01, 0.04], "update_s": 0.0},
        "step_time_measured": {"batches": [1, 2], "fwd_bwd_s": [0.002, 0.003], "update_s": 0.0005},
    }  # fmt: skip
    path = tmp_path / "d.json"
    path.write_text(json.dumps(record))
    text = calibration_figures.block(path)
    assert "Device `d`: 1 GiB, 2 slots concurrent, 512 MiB per slot at margin 0.9" in text
    assert "2 trials (1 fits, 4 fails); peaks 1.5 MB at 1, 6.0 MB at 4." in text
    assert "| measured pass, ms (median) | 2.0 | 3.0 |" in text
    assert "| ms per sequence | 2.0 | 1.5 |" in text
    assert "| the clock's curve (roofline), ms | 10.0 | 20.0 |" in text  # 10 + 30 * (2-1)/3
    assert "takes 0.5 ms; the clock's curve charges 0.0 ms" in text


def test_the_docs_calibration_block_is_of_the_default_configuration():
    text = (ROOT / "docs" / "calibration.md").read_text()
    block = text[text.index(calibration_figures.BEGIN) : text.index(calibration_figures.END)]
    config = load_config(ROOT / "config" / "config.yaml")
    device = config.cluster.devices[0]
    vocab = config.data.tokenizer.vocab_size
    m = re.search(
        r"Device `(\S+)`: ([\d.]+) GiB, (\d+) slots (\w+), .*?model of ([\d,]+) parameters, "
        r"vocabulary ([\d,]+), (\d+) tokens, (\w+), (\d+) AdamW steps per trial",
        block,
    )
    assert m, block
    assert m.groups() == (
        device.name, f"{device.memory_gib:g}", str(config.cluster.nodes_per_device),
        config.cluster.slot_sharing, f"{parameter_count(config.model, vocab):,}", f"{vocab:,}",
        str(config.data.seq_len_tokens), config.model.dtype,
        str(config.calibration.steps_per_trial),
    )  # fmt: skip


# A measured time: a duration after "took", "takes", "timed", "measured", "ran in",
# or followed by "wall" or "of CPU". Durations that are settings (a timeout, a
# polling interval, a runtime request) have no such word and are not figures.
_DURATION = r"\d+(?:\.\d+)?\s(?:min(?:\s\d+\ss)?|s|ms|h)(?!\w)"
MEASURED = re.compile(
    rf"\b(?:took|takes|timed|measured|ran in|runs in)\b[^.;]*?(?<![\w.]){_DURATION}"
    rf"|(?<![\w.]){_DURATION}\s(?:wall|of wall|of CPU)\b"
)
# What names the run or command that wrote a figure: the command itself, the
# benchmark, test or script that measures it, the files of the run (a GPU check's
# folder, a device record), or README's table of measured figures with its commands.
SOURCE = re.compile(
    r"`(?:time |/usr/bin/time |make |snakemake |adloco |\.venv/bin/|python |scripts/|benchmarks/"
    r"|\.ci/run|pytest |dvc |torchrun )[^`]*`"
    r"|benchmarks/[\w./-]+|tests/[\w/]+\.py|scripts/[\w.-]+|docs/gpu-check/[\w./-]+"
    r"|config/devices/[\w.-]+\.json|#measured-figures"
)


def text_blocks(text: str) -> list[str]:
    """Paragraphs, table rows, fenced blocks and generated blocks, each one string."""
    blocks: list[str] = []
    lines: list[str] = []
    fence: list[str] | None = None
    generated: list[str] | None = None

    def flush() -> None:
        if lines:
            blocks.append(" ".join(lines))
            lines.clear()

    for line in text.splitlines():
        if generated is not None:  # <!-- name:begin --> ... <!-- name:end -->: one block
            generated.append(line)
            if re.search(r"<!-- [\w-]+:end -->", line):
                blocks.append(" ".join(generated))
                generated = None
        elif re.match(r"<!-- [\w-]+:begin -->", line):
            flush()
            generated = [line]
        elif line.startswith("```"):
            if fence is None:
                flush()
                fence = []
            else:
                blocks.append(" ".join(fence))
                fence = None
        elif fence is not None:
            fence.append(line)
        elif line.startswith("|"):
            flush()
            blocks.append(line)
        elif line.strip():
            lines.append(line)
        else:
            flush()
    flush()
    return blocks


def unnamed_figures(text: str) -> list[str]:
    """Measured times whose block, and the block before it, name no command or run."""
    blocks = text_blocks(text)
    found = []
    for i, block in enumerate(blocks):
        figure = MEASURED.search(block)
        named = SOURCE.search(block) or (i > 0 and SOURCE.search(blocks[i - 1]))
        if figure and not named:
            found.append(block[max(0, figure.start() - 60) : figure.end() + 20])
    return found


def test_the_figure_check_tells_a_named_figure_from_an_unnamed_one():
    unnamed = "The default run's report (44 runs) takes 7.0 s to write.\n"
    (found,) = unnamed_figures(unnamed)
    assert "report (44 runs) takes 7.0 s" in found
    named = unnamed.replace("write.", "write (`time adloco report … --out /tmp/report`).")
    assert unnamed_figures(named) == []
    # The command in a block just before it (a fenced command, then the figure).
    assert unnamed_figures("```\n$ .venv/bin/python benchmarks/bench_x.py\n```\n\n" + unnamed) == []
    # Settings are not figures; "wall" after a time is one.
    assert unnamed_figures("Jobs poll every 10 s; a job may ask 60 min.\n") == []
    assert len(unnamed_figures("`tokenize` 20 s wall.\n")) == 1
    # A generated block is one block: its first line names the script that wrote it.
    block = "<!-- x:begin -->\nWritten by `scripts/x.py`.\n\nIt takes 4.2 ms.\n<!-- x:end -->\n"
    assert unnamed_figures(block) == []


def test_every_measured_figure_in_the_docs_names_its_command_or_run():
    found = {
        str(path.relative_to(ROOT)): unnamed_figures(path.read_text())
        for path in tracked("README.md", "docs/*.md", "config/README.md")
    }
    assert {k: v for k, v in found.items() if v} == {}


def test_every_row_of_the_readmes_measured_figures_names_a_command_that_exists():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Measured figures", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| ---")]
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    assert len(rows) > 10 and rows[0].startswith("| what |")
    for row in rows[1:]:
        command = row.strip("| ").rsplit(" | ", 1)[1]
        assert command == "same" or re.fullmatch(r"`[^`]+`( .*)?", command), row
        for path in re.findall(r"(?:scripts|benchmarks)/[\w.-]+", command):
            assert (ROOT / path).is_file(), (path, row)
        for target in re.findall(r"`make ([\w-]+)", command):
            assert target in targets, (target, row)
