"""What a running engine shows: one log line per round and live curves, both equal to its
metrics rows; a bar on a terminal only; a resumed run drawing each round once; curves that
cannot be written leaving the run as it was."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import numpy as np
import pytest
import torch
import yaml
from array_data import FULL_STATE_RUN, make_engine, tiny_curves
from test_train_cli import CONFIG, read_rows

from adloco import cli, train_run
from adloco.engine.driver import rounds
from adloco.engine.loop import RoundLoop
from live_events import read_scalars

# The run ends at max_rounds or max_tokens, whichever first: its share counts against that one.
LINE = re.compile(
    r"r seed 0: round (\d+) of 4, tokens (\d+) of (\d+), (\d+)% \(of (rounds|tokens)\), "
    r"batch ([\d,]+), trainers (\d+), val ppl ([\d.]+|-), ([\d.]+) s"
)
RUN = {**FULL_STATE_RUN, "max_rounds": 4, "max_tokens": 1000}  # trainers merge, batches grow
SHORT = {"method": "diloco", "max_rounds": 2}


def f32(x: float) -> float:
    return float(np.float32(x))


def best_perplexity(rows: list[dict]) -> float:
    return min(r["val_perplexity"] for r in rows)


def progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "adloco.engine.progress"]


def test_one_line_per_round_holds_the_rows_values(array_data, make_config, tmp_path, caplog):
    cfg, run = make_config(RUN)
    with caplog.at_level(logging.INFO):
        rows = make_engine(cfg, run, array_data, tmp_path, progress=True).run()
    by_round = list(rounds(rows))
    assert len(by_round) >= 4 and len({len(r) for r in by_round}) > 1  # a merge happened
    lines = progress_lines(caplog)
    assert len(lines) == len(by_round)
    for line, group in zip(lines, by_round, strict=True):
        got = LINE.fullmatch(line).groups()
        tokens, round_ = group[-1]["tokens_total"], group[0]["round"]
        share, limit = max((100 * tokens / 1000, "tokens"), (100 * round_ / 4, "rounds"))
        assert got == (
            str(round_),
            str(tokens),
            "1000",
            f"{min(share, 100):.0f}",
            limit,
            ",".join(str(r["requested_batch"]) for r in group),
            str(len(group)),
            f"{best_perplexity(group):.2f}",
            f"{group[-1]['wall_time_s']:.1f}",
        )
    assert "\r" not in caplog.text


def test_the_live_curves_hold_one_value_per_round_equal_to_the_rows(
    array_data, make_config, tmp_path
):
    cfg, run = make_config(RUN)
    engine = make_engine(cfg, run, array_data, tmp_path, live_dir=tmp_path / "live")
    engine.run()
    rows = [json.loads(x) for x in engine.metrics_path.read_text().splitlines()]
    by_round = list(rounds(rows))
    steps = [g[-1]["tokens_total"] for g in by_round]
    expected = {
        "val/perplexity": [best_perplexity(g) for g in by_round],
        "val/loss": [min(g, key=lambda r: r["val_perplexity"])["val_loss"] for g in by_round],
        "train/loss": [sum(r["train_loss"] for r in g) / len(g) for g in by_round],
        "run/round": [g[0]["round"] for g in by_round],
        "run/trainers": [len(g) for g in by_round],
        "run/batch_sequences": [sum(r["requested_batch"] for r in g) for g in by_round],
        "run/sim_time_s": [g[-1]["sim_time_s"] for g in by_round],
    }
    scalars = read_scalars(tmp_path / "live")
    assert scalars == {
        tag: [(s, f32(v)) for s, v in zip(steps, values, strict=True)]
        for tag, values in expected.items()
    }


def test_a_resumed_run_draws_each_round_once(array_data, make_config, tmp_path, monkeypatch):
    # Checkpoints at rounds 2 and 4; the job dies in round 4, after round 3 was drawn.
    cfg, run = make_config({"max_rounds": 4, "checkpoint_every_rounds": 2})
    original = RoundLoop.run_round

    def dies_in_round_4(self):
        if self.state.round == 3:
            raise KeyboardInterrupt
        return original(self)

    def drawn(tag: str) -> list[tuple[int, float]]:
        return read_scalars(tmp_path / "live")[tag]

    monkeypatch.setattr(RoundLoop, "run_round", dies_in_round_4)
    with pytest.raises(KeyboardInterrupt):
        make_engine(cfg, run, array_data, tmp_path, live_dir=tmp_path / "live").run()
    assert [r for _, r in drawn("run/round")] == [1, 2, 3]
    killed = drawn("val/perplexity")
    monkeypatch.setattr(RoundLoop, "run_round", original)
    engine = make_engine(cfg, run, array_data, tmp_path, live_dir=tmp_path / "live")
    rows = engine.run()
    # Rounds 1 and 2 replayed from the checkpoint, 3 and 4 trained: each drawn once.
    by_round = list(rounds(rows))
    assert drawn("run/round") == [(g[-1]["tokens_total"], g[0]["round"]) for g in by_round]
    assert drawn("val/perplexity") == [
        (g[-1]["tokens_total"], f32(best_perplexity(g))) for g in by_round
    ]
    assert drawn("val/perplexity")[:3] == killed  # round 3 trained again to the same value
    assert rows == [json.loads(x) for x in engine.metrics_path.read_text().splitlines()]


def test_a_terminal_keeps_the_bar_and_gets_no_lines(
    array_data, make_config, tmp_path, monkeypatch, caplog
):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    cfg, run = make_config(SHORT)
    with caplog.at_level(logging.INFO):
        make_engine(cfg, run, array_data, tmp_path, progress=True).run()
    assert progress_lines(caplog) == []
    bar = terminal.getvalue()
    assert bar.count("\r") > 1 and "r seed 0" in bar and "val_ppl=" in bar


@pytest.mark.reliability("live curves")
def test_curves_that_cannot_be_written_leave_the_run_as_it_was(
    array_data, make_config, tmp_path, caplog
):
    cfg, run = make_config(SHORT)
    plain = make_engine(cfg, run, array_data, tmp_path / "plain").run()
    (tmp_path / "file").write_text("x")
    with caplog.at_level(logging.WARNING):
        rows = make_engine(
            cfg, run, array_data, tmp_path / "curves", live_dir=tmp_path / "file" / "live"
        ).run()
    strip = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]
    assert strip == [{k: v for k, v in r.items() if k != "wall_time_s"} for r in plain]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.name for r in warnings] == ["adloco.engine.live_curves"]


def test_train_seed_all_draws_each_seed_in_its_folder(tmp_path, tiny_tokenized, monkeypatch):
    # DVC's stage per run: --live names the run's folder, each seed drawn in seed<seed>/.
    monkeypatch.setattr(train_run, "step_time_curves", lambda cfg, _dir: tiny_curves(cfg))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({**CONFIG, "runs": {"r": {"method": "diloco", "seeds": [3, 5]}}})
    )
    args = ["train", "--config", config, "--run", "r", "--seed", "all", "--data", tiny_tokenized]
    args += ["--calibration", tmp_path / "calibration", "--out", tmp_path / "out"]
    args += ["--checkpoints", tmp_path / "ckpt", "--live", tmp_path / "live", "--threads", "1"]
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        assert cli.main([str(a) for a in args]) == 0
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert sorted(p.name for p in (tmp_path / "live").iterdir()) == ["seed3", "seed5"]
    for seed in (3, 5):
        by_round = list(rounds(read_rows(tmp_path / "out" / f"seed{seed}")))
        assert read_scalars(tmp_path / "live" / f"seed{seed}")["val/perplexity"] == [
            (g[-1]["tokens_total"], f32(best_perplexity(g))) for g in by_round
        ]
