"""Progress: a bar on a terminal, one line a step in a log; no library bars in a log file."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from adloco.data.tokenize import tokenize_corpus
from adloco.engine import progress
from adloco.engine.progress import Progress
from adloco.model.llama import build_model
from live_events import read_scalars

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "adloco.engine.progress"]


def test_off_a_terminal_each_report_is_one_line(caplog):
    shown = Progress("adloco seed 3", 1000, 0, shown=True, bar=True)  # stderr: no terminal
    with caplog.at_level(logging.INFO):
        shown.advance(100)  # between reports: no line
        shown.report(250, {"round": "1", "batch": "4,2", "val_ppl": "153.66"}, 1.26)
        shown.report(1000, {"round": "2", "batch": "6", "val_ppl": "-"}, 12.0)
        shown.close()
    assert shown.bar is None
    assert lines(caplog) == [
        "adloco seed 3: round 1, tokens 250 of 1000 (25%), batch 4,2, val ppl 153.66, 1.3 s",
        "adloco seed 3: round 2, tokens 1000 of 1000 (100%), batch 6, val ppl -, 12.0 s",
    ]


def test_a_process_that_does_not_write_shows_nothing(caplog, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    with caplog.at_level(logging.INFO):
        shown = Progress("r seed 0", 10, 0, shown=False, bar=True)
        shown.report(5, {"round": "1"}, 1.0)
        shown.close()
    assert shown.bar is None and lines(caplog) == [] and sys.stderr.getvalue() == ""


def test_on_a_terminal_the_bar_counts_tokens_and_no_progress_asks_for_lines(caplog, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    with caplog.at_level(logging.INFO):
        shown = Progress("base", 1000, 200, shown=True, bar=True)  # resumed at 200 tokens
        shown.report(600, {"step": "4", "val_ppl": "40.00"}, 2.0)
        assert shown.bar.n == 600
        shown.close()
        plain = Progress("base", 1000, 200, shown=True, bar=False)  # --no-progress
        plain.report(600, {"step": "4", "val_ppl": "40.00"}, 2.0)
    assert "\r" in sys.stderr.getvalue() and "val_ppl=40.00" in sys.stderr.getvalue()
    assert lines(caplog) == ["base: step 4, tokens 600 of 1000 (60%), val ppl 40.00, 2.0 s"]


@pytest.fixture
def library_bars():
    """transformers' bar switch, restored after the test."""
    was = hf_logging.is_progress_bar_enabled()
    yield
    (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def save_and_load(model, folder: Path) -> None:
    model.save_pretrained(folder)
    AutoModelForCausalLM.from_pretrained(folder)


def test_off_a_terminal_the_transformers_bars_are_off(
    tmp_path, tiny_model_cfg, capsys, library_bars, monkeypatch
):
    model = build_model(tiny_model_cfg, 64, 16, seed=0)
    hf_logging.enable_progress_bar()
    save_and_load(model, tmp_path / "a")
    assert "Writing model shards" in capsys.readouterr().err  # what a log file had
    monkeypatch.setattr(sys, "stderr", Terminal())
    progress.quiet_library_bars()  # on a terminal: kept
    assert hf_logging.is_progress_bar_enabled()
    monkeypatch.undo()
    progress.quiet_library_bars()
    save_and_load(model, tmp_path / "b")
    err = capsys.readouterr().err
    assert "Writing model shards" not in err and "Loading weights" not in err


@pytest.mark.slow
def test_a_pretraining_log_file_reads_one_line_per_evaluation(tmp_path, tiny_data_config):
    # As Snakemake runs it: its own process, stderr into a file.
    data = tmp_path / "data"
    tokenize_corpus(tiny_data_config(base_fraction=0.4), 0, data, progress=False)
    raw = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    raw["model"]["source"] = "base"
    raw["data"].update(base_fraction=0.4, seq_len_tokens=16)
    raw["pretrain"].update(max_tokens=4 * 8 * 16, eval_every_steps=2)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = ["pretrain", "--config", config, "--data", data, "--out", tmp_path / "base"]
    args += ["--checkpoints", tmp_path / "ckpt", "--live", tmp_path / "live", "--threads", "1"]
    adloco = Path(sys.executable).parent / "adloco"
    with open(tmp_path / "pretrain.log", "w") as log:
        subprocess.run([adloco, *map(str, args)], stderr=log, check=True, env=os.environ)
    text = (tmp_path / "pretrain.log").read_text()
    assert "\r" not in text and "Writing model shards" not in text
    metrics = (tmp_path / "base" / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in metrics]
    said = [
        line.split(" INFO adloco.engine.progress: ")[1]
        for line in text.splitlines()
        if "progress:" in line
    ]
    assert [r["step"] for r in rows] == [2, 4]
    assert [re.sub(r", [\d.]+ s$", "", line) for line in said] == [
        f"base: step {r['step']}, tokens {r['tokens']} of 512 ({100 * r['tokens'] / 512:.0f}%), "
        f"val ppl {r['val_perplexity']:.2f}"
        for r in rows
    ]
    assert read_scalars(tmp_path / "live")["val/perplexity"] == [
        (r["tokens"], float(np.float32(r["val_perplexity"]))) for r in rows
    ]


def test_a_run_counts_against_rounds_or_tokens_whichever_ends_it_first(caplog):
    # The test preset: max_rounds 3 ends the run long before its 100000 tokens. Its last
    # line read "tokens 1728 of 100000 (2%)"; it now says 100%, counted against rounds.
    shown = Progress("adloco seed 0", 100000, 0, shown=True, bar=True, max_rounds=3)
    with caplog.at_level(logging.INFO):
        for r, tokens in [(1, 576), (2, 1152), (3, 1728)]:
            shown.report(tokens, {"round": str(r), "val_ppl": "-"}, 1.0, rounds=r)
    said = lines(caplog)
    assert (
        said[0]
        == "adloco seed 0: round 1 of 3, tokens 576 of 100000, 33% (of rounds), val ppl -, 1.0 s"
    )
    assert said[-1].startswith(
        "adloco seed 0: round 3 of 3, tokens 1728 of 100000, 100% (of rounds)"
    )
    # A token-bound run (the default preset: max_rounds 1000) counts against tokens.
    caplog.clear()
    budget = Progress("adloco seed 0", 300000, 0, shown=True, bar=False, max_rounds=1000)
    with caplog.at_level(logging.INFO):
        budget.report(150000, {"round": "20"}, 2.0, rounds=20)
    assert lines(caplog) == [
        "adloco seed 0: round 20 of 1000, tokens 150000 of 300000, 50% (of tokens), 2.0 s"
    ]


def test_on_a_terminal_a_runs_bar_counts_percent_of_the_nearer_limit(monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    shown = Progress("r seed 0", 100000, 576, shown=True, bar=True, max_rounds=3, done_rounds=1)
    assert shown.bar.n == 33  # resumed after round 1 of 3
    shown.report(1728, {"round": "3"}, 1.0, rounds=3)
    assert shown.bar.n == 100
    shown.close()
