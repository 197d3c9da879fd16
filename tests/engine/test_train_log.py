"""What a training job's log says (issue 47, items 2 and 3).

Each phase of `adloco train` (load, train, evaluate, export, checkpoint) logs
one line as it starts, progress counts against what really ends the run, and
a job of a whole run (`--seed all`, the default `snakemake.train_jobs: run`)
killed in its tail, after a seed's checkpoint was marked finished, is run again
as a user would: Snakemake has removed the job's outputs, the same command
restores the finished seed from its checkpoint without training it and says so.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import yaml
from test_train_cli import (
    CONFIG,
    curves_from_config,  # noqa: F401 (a fixture)
    main,
    read_rows,
    train_args,
)

from adloco.engine import checkpoint

# The devices' step-time curves, which would come from `adloco calibrate`.
pytestmark = pytest.mark.usefixtures("curves_from_config")


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("adloco")]


def test_each_phase_of_a_job_logs_one_line_as_it_starts(tmp_path, tiny_tokenized, caplog):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))  # max_rounds 2 ends it, long before 10**6 tokens
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    args = train_args(config, tiny_tokenized, tmp_path / "calibration", "0", out, ckpt)
    with caplog.at_level(logging.INFO):
        assert main(args) == 0
    said = messages(caplog)
    phases = [m.split(": ")[1] for m in said if m.startswith(("r: ", "r seed 0: ")) and ": " in m]
    assert [p for p in phases if not p.startswith(("round ", "final val"))] == [
        "load", "load", "train", "checkpoint", "checkpoint", "evaluate", "export", "checkpoint",
        "done",
    ]  # fmt: skip
    assert said[0].startswith(f"r: load: the configuration {config}, ")
    assert (
        f"r seed 0: train: from round 0; the run ends at 2 rounds or {10**6} tokens, "
        "whichever comes first"
    ) in said
    assert f"r seed 0: checkpoint: round 2 to {ckpt}" in said
    assert f"r seed 0: checkpoint: marking {ckpt} finished" in said
    export = f"r seed 0: export: trainer 0's model, the tokenizer and a model card to {out}/final"
    assert any(m.startswith(export) for m in said)
    # The last round's progress line counts against the rounds that ended it.
    rounds = [m for m in said if m.startswith("r seed 0: round ")]
    tokens = read_rows(out)[-1]["tokens_total"]
    last = f"r seed 0: round 2 of 2, tokens {tokens} of {10**6}, 100% (of rounds)"
    assert rounds[-1].startswith(last)
    assert said[-1] == "r: done: 1 seed(s) written"


def test_a_job_killed_in_its_tail_restores_the_finished_seed_without_training(
    tmp_path, tiny_tokenized, caplog, monkeypatch
):
    config = tmp_path / "config.yaml"
    runs = {"r": {"method": "diloco", "seeds": [3, 5]}}
    config.write_text(yaml.safe_dump({**CONFIG, "seeds": [0], "runs": runs}))
    out, ckpt = tmp_path / "runs" / "r", tmp_path / "checkpoints" / "r"
    args = train_args(config, tiny_tokenized, tmp_path / "calibration", "all", out, ckpt)
    mark = checkpoint.mark_finished

    def killed_after_the_first_mark(directory, info=None):
        written = mark(directory, info)
        raise KeyboardInterrupt  # the job dies in seed 3's tail: its outputs and mark written
        return written

    with monkeypatch.context() as patch:
        patch.setattr(checkpoint, "mark_finished", killed_after_the_first_mark)
        assert main(args) == 130
    assert (ckpt / "seed3" / checkpoint.FINISHED_NAME).is_file()
    assert not (ckpt / "seed5" / checkpoint.MANIFEST_NAME).exists()  # seed 5 not started
    first = read_rows(out / "seed3")
    # Snakemake: "Removing output files of failed job train_r since they might be corrupted".
    for seed in (3, 5):
        for name in ("metrics.jsonl", "summary.json"):
            (out / f"seed{seed}" / name).unlink(missing_ok=True)
        shutil.rmtree(out / f"seed{seed}" / "final", ignore_errors=True)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert main(args) == 0  # the same command again
    said = messages(caplog)
    assert (
        f"r seed 3: finished earlier (round 2, {ckpt / 'seed3' / checkpoint.FINISHED_NAME}): "
        "restored from that checkpoint, not trained again; its outputs are written again"
    ) in said
    # Seed 3: no round trained, no checkpoint saved; seed 5 trained from round 0.
    assert not [m for m in said if m.startswith(("r seed 3: round ", "r seed 3: train:"))]
    assert not [m for m in said if m.startswith("r seed 3: checkpoint: round")]
    assert (
        "r seed 5: train: from round 0; the run ends at 2 rounds or 1000000 tokens, "
        "whichever comes first"
    ) in said
    # Its rows are the first job's, wall times included: restored, not recomputed.
    assert read_rows(out / "seed3") == first
    assert json.loads((out / "seed3" / "summary.json").read_text())["seed"] == 3
    assert (out / "seed3" / "final" / "config.json").is_file()
    assert (out / "seed5" / "summary.json").is_file()
