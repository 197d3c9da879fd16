"""`adloco train` on real tokenized data: a new job never resumes a finished run's checkpoint,
and a checkpoint of other code is not resumed either; another run's checkpoint folder, a
folder another trainer holds and a --live folder among the outputs are refused before training."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch
import yaml
from array_data import TINY_CLUSTER, TINY_MODEL, tiny_curves

import adloco
from adloco import cli
from adloco.engine import checkpoint

CONFIG = {
    "experiment": "train-cli",
    "seed": 0,
    "data": {"dataset": "tiny", "source": "local", "seq_len_tokens": 16},
    "model": TINY_MODEL,
    "cluster": TINY_CLUSTER,
    "train": {
        "max_rounds": 2,
        "inner_steps": 2,
        "inner_lr": 0.01,
        "max_tokens": 10**6,
        "eval_sequences": 8,
        "eval_batch": 8,
    },
    "runs": {"r": {"method": "diloco"}},
}


def train_args(config, data, calibration, seed: str, out, ckpt, run: str = "r") -> list[str]:
    args = ["train", "--config", str(config), "--run", run, "--seed", seed]
    args += ["--data", str(data), "--calibration", str(calibration)]
    return args + ["--out", str(out), "--checkpoints", str(ckpt), "--no-progress", "--threads", "1"]


def main(args: list[str]) -> int:
    """`adloco <args>` in this process, torch's determinism flag restored after."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        return cli.main(args)
    finally:
        torch.use_deterministic_algorithms(deterministic)


def run_train(config, data, calibration, seed: str, out, ckpt) -> None:
    """`adloco train` of run r in this process; it must succeed."""
    assert main(train_args(config, data, calibration, seed, out, ckpt)) == 0


def read_rows(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def without_wall_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]


@pytest.fixture
def curves_from_config(monkeypatch):
    """The devices' step-time curves, which would come from `adloco calibrate`."""
    from adloco import train_run

    monkeypatch.setattr(train_run, "step_time_curves", lambda cfg, _dir: tiny_curves(cfg))


@pytest.fixture
def train(tmp_path, tiny_tokenized, curves_from_config):
    """train() runs `adloco train` in this process on the tiny data; returns its metric rows."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def train() -> list[dict]:
        run_train(config, tiny_tokenized, tmp_path / "calibration", "0", out, ckpt)
        return without_wall_time(read_rows(out))

    train.ckpt = ckpt
    return train


def test_a_new_job_trains_again_instead_of_resuming_a_finished_run(train, caplog):
    # `snakemake --forcerun train` (docs/workflow.md: how to pick up code
    # changes) starts a new job on the finished run's checkpoint folder.
    first = train()
    assert (train.ckpt / checkpoint.FINISHED_NAME).is_file()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = train()
    text = caplog.text
    assert "resuming" not in text
    assert "finished" in text and "starting over" in text
    stale = train.ckpt.with_name(train.ckpt.name + ".stale")
    assert (stale / checkpoint.FINISHED_NAME).is_file()
    # It really trained: every round again, the same numbers (one seed, one code).
    assert second == first
    assert (train.ckpt / checkpoint.FINISHED_NAME).is_file()


@pytest.mark.reliability("checkpoints")
def test_a_checkpoint_folder_holding_a_users_file_is_refused_before_training(train, capsys):
    # The repro: three runs on --checkpoints mywork/h, where h holds thesis.tex;
    # each is refused before it trains, and thesis.tex stays where it was.
    train.ckpt.mkdir()
    (train.ckpt / "thesis.tex").write_text("x")
    for _ in range(3):
        with pytest.raises(AssertionError):
            train()
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"adloco train: error: --checkpoints {train.ckpt}: holds 1 file")
        assert "thesis.tex" in err[-1]
    assert (train.ckpt / "thesis.tex").read_text() == "x"
    assert sorted(p.name for p in train.ckpt.iterdir()) == ["thesis.tex"]
    assert not train.ckpt.with_name(train.ckpt.name + ".stale").exists()


@pytest.mark.reliability("checkpoints")
def test_a_users_folder_named_like_the_stale_checkpoint_is_never_deleted(train, capsys):
    first = train()
    # A finished run is set aside when trained again: its place, <ckpt>.stale, is a
    # user's folder here.
    stale = train.ckpt.with_name(train.ckpt.name + ".stale")
    stale.mkdir()
    (stale / "mine.txt").write_text("keep")
    with pytest.raises(AssertionError):
        train()
    err = capsys.readouterr().err
    assert f"the stale checkpoint's place {stale}: holds 1 file" in err and "mine.txt" in err
    assert (stale / "mine.txt").read_text() == "keep"
    assert (train.ckpt / checkpoint.FINISHED_NAME).is_file()  # the run's own folder untouched
    # A stale folder that holds a checkpoint alone is replaced, as before.
    (stale / "mine.txt").unlink()
    assert train() == first and (stale / checkpoint.FINISHED_NAME).is_file()


def test_a_killed_job_still_resumes(train, caplog):
    # Without the finished mark (a kill before the outputs were written), the
    # next job resumes the last round as before.
    train()
    (train.ckpt / checkpoint.FINISHED_NAME).unlink()
    with caplog.at_level(logging.INFO):
        train()
    assert "resuming" in caplog.text


def test_the_fingerprint_covers_the_package_version_and_source(monkeypatch, tmp_path):
    settings = {"run": {"inner_lr": 0.01}, "seed": 0}
    base = checkpoint.fingerprint(settings)
    assert checkpoint.fingerprint(settings) == base
    monkeypatch.setattr(adloco, "__version__", "99.0")
    assert checkpoint.fingerprint(settings) != base
    monkeypatch.undo()
    monkeypatch.setattr(checkpoint, "source_digest", lambda: "other code")
    assert checkpoint.fingerprint(settings) != base


def test_the_source_digest_follows_every_source_file(tmp_path):
    package = tmp_path / "pkg"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine" / "loop.py").write_text("x = 1\n")
    (package / "schemas").mkdir()
    (package / "schemas" / "config.schema.yaml").write_text("type: object\n")
    first = checkpoint.source_digest(package)
    (package / "engine" / "__pycache__").mkdir()
    (package / "engine" / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"\0")
    assert checkpoint.source_digest(package) == first  # compiled files do not count
    (package / "engine" / "loop.py").write_text("x = 2\n")
    assert checkpoint.source_digest(package) != first
    (package / "engine" / "loop.py").write_text("x = 1\n")
    (package / "schemas" / "config.schema.yaml").write_text("type: array\n")
    assert checkpoint.source_digest(package) != first
    assert checkpoint.source_digest() == checkpoint.source_digest()  # the installed package


def _cli_args(config, data, tmp_path, *extra):
    args = ["train", "--config", str(config), "--run", "m", "--seed", "0", "--data", str(data)]
    args += ["--calibration", str(tmp_path / "calibration"), "--out", str(tmp_path / "out")]
    return [*args, "--checkpoints", str(tmp_path / "ckpt"), "--no-progress", *extra]


def test_a_diverged_run_ends_with_one_error_line(
    tmp_path, tiny_tokenized, curves_from_config, capsys
):
    cfg = {**CONFIG, "runs": {"m": {"method": "diloco", "inner_lr": 1.0e6, "grad_clip_norm": None}}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        assert cli.main(_cli_args(config, tiny_tokenized, tmp_path)) == 1
    finally:
        torch.use_deterministic_algorithms(deterministic)
    err = capsys.readouterr().err
    assert "adloco train: error: m seed 0 diverged: trainer 0: non-finite" in err
    assert "Traceback" not in err


def test_a_subset_smaller_than_a_batch_is_refused_before_training(tmp_path, tiny_tokenized, capsys):
    # Known only from the data (the train split's size), so checked when the job opens it.
    cfg = {**CONFIG, "runs": {"r": {"method": "diloco", "subset_fraction": 0.001}}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    args = ["train", "--config", str(config), "--run", "r", "--seed", "0"]
    args += ["--data", str(tiny_tokenized), "--calibration", str(tmp_path / "calibration")]
    args += ["--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ckpt")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("adloco train: error: runs.r.subset_fraction: 0.001 of the ")
    assert "Traceback" not in err
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "out").exists()


def test_seed_all_trains_each_seed_of_the_run_and_rewrites_finished_ones(
    tmp_path, tiny_tokenized, curves_from_config, caplog
):
    # DVC's stage per run: `--seed all` trains the run's own seeds into
    # seed<seed>/; DVC empties the run folder before re-running a killed stage,
    # and the finished seeds come back from their checkpoints without training.
    config = tmp_path / "config.yaml"
    runs = {"r": {"method": "diloco", "seeds": [3, 5]}}
    config.write_text(yaml.safe_dump({**CONFIG, "seeds": [0], "runs": runs}))
    calibration = tmp_path / "calibration"

    def outputs(folder) -> tuple[list[dict], dict]:
        return read_rows(folder), json.loads((folder / "summary.json").read_text())

    out, ckpt = tmp_path / "runs" / "r", tmp_path / "checkpoints" / "r"
    run_train(config, tiny_tokenized, calibration, "all", out, ckpt)
    assert sorted(p.name for p in out.iterdir()) == ["seed3", "seed5"]
    first = {seed: outputs(out / f"seed{seed}") for seed in (3, 5)}
    for seed in (3, 5):
        rows, summary = first[seed]
        assert summary["seed"] == seed and {r["round"] for r in rows} == {1, 2}
        # The same numbers as the job of that seed alone (wall time aside).
        alone = tmp_path / "one" / str(seed)
        run_train(config, tiny_tokenized, calibration, str(seed), alone / "out", alone / "ckpt")
        assert without_wall_time(rows) == without_wall_time(read_rows(alone / "out"))
    assert first[3][0] != first[5][0]
    shutil.rmtree(out)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run_train(config, tiny_tokenized, calibration, "all", out, ckpt)
    # Restored, not trained: the logged wall times are those of the first job.
    assert {seed: outputs(out / f"seed{seed}") for seed in (3, 5)} == first
    assert caplog.text.count("finished earlier (round 2, ") == 2
    assert "starting over" not in caplog.text
    assert "not trained again" in caplog.text and " train: from round" not in caplog.text


@pytest.mark.reliability("configs")
def test_an_out_folder_holding_a_users_file_is_refused_before_training(
    train, tmp_path, monkeypatch, capsys
):
    from adloco import train_run

    monkeypatch.setattr(train_run, "build_engine", lambda *a, **k: pytest.fail("trained"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(AssertionError):
        train()
    assert (
        f"--out {out}: holds 1 file(s) adloco did not write (notes.txt)" in capsys.readouterr().err
    )
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.reliability("configs")
def test_checkpoints_inside_the_out_folder_are_refused_before_training(
    tmp_path, tiny_tokenized, curves_from_config, capsys
):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "out"
    with pytest.raises(AssertionError):
        run_train(config, tiny_tokenized, tmp_path / "calibration", "0", out, out / "ckpt")
    err = capsys.readouterr().err
    assert f"--checkpoints {out / 'ckpt'} is inside --out {out}" in err
    assert not out.exists()


@pytest.mark.reliability("disk-full")
def test_a_failure_while_the_model_is_saved_leaves_the_previous_outputs_whole(
    train, tmp_path, monkeypatch
):
    first = train()
    out = tmp_path / "out"
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    import errno

    from transformers import PreTrainedModel

    def full_disk(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full_disk)
    with pytest.raises(AssertionError):
        train()
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before and first
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def snapshot(folder) -> dict:
    """Every file under ``folder`` with its bytes."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def two_runs(tmp_path, tiny_tokenized, curves_from_config):
    """A config of runs r and q, 3 rounds, a checkpoint each round; ``args(...)`` for either."""
    config = tmp_path / "config.yaml"
    runs = {"r": {"method": "diloco"}, "q": {"method": "diloco", "inner_lr": 0.02}}
    config.write_text(
        yaml.safe_dump({**CONFIG, "train": {**CONFIG["train"], "max_rounds": 3}, "runs": runs})
    )

    def args(run: str, seed: str, out, ckpt) -> list[str]:
        return train_args(config, tiny_tokenized, tmp_path / "calibration", seed, out, ckpt, run)

    return args


def interrupt_after_round(monkeypatch, last: int) -> None:
    """Ctrl-C right after round ``last``'s checkpoint is saved (an unfinished run)."""
    save = checkpoint.save

    def save_then_stop(directory, round_, *args, **kwargs):
        saved = save(directory, round_, *args, **kwargs)
        if round_ == last:
            raise KeyboardInterrupt
        return saved

    monkeypatch.setattr(checkpoint, "save", save_then_stop)


@pytest.mark.reliability("checkpoints")
@pytest.mark.parametrize("other", [("q", "0"), ("r", "1")], ids=["another run", "another seed"])
def test_a_mistyped_checkpoints_folder_is_refused_and_its_run_still_resumes(
    two_runs, tmp_path, monkeypatch, capsys, caplog, other
):
    ckpt = tmp_path / "checkpoints" / "r" / "seed0"
    with monkeypatch.context() as patch:
        interrupt_after_round(patch, 2)
        assert main(two_runs("r", "0", tmp_path / "out-r", ckpt)) == 130
    assert json.loads((ckpt / checkpoint.MANIFEST_NAME).read_text())["round"] == 2
    assert not (ckpt / checkpoint.FINISHED_NAME).exists()  # unfinished: it would resume
    before = snapshot(ckpt)
    run, seed = other
    # Another run's (or seed's) command given r's folder, twice: refused, nothing touched.
    for _ in range(2):
        assert main(two_runs(run, seed, tmp_path / "out-other", ckpt)) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == (
            f"adloco train: error: --checkpoints {ckpt} holds the checkpoint of experiment "
            f"train-cli, run r, seed 0, not of this command's experiment train-cli, run {run}, "
            f"seed {seed}: point --checkpoints at this run's own folder, or move {ckpt} away to "
            "train this run from the start (it was left as it is)"
        )
    assert snapshot(ckpt) == before
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["seed0"]  # no seed0.stale
    assert not (tmp_path / "out-other").exists()
    # The right command resumes after round 2 and ends where an uninterrupted run does.
    with caplog.at_level(logging.INFO):
        assert main(two_runs("r", "0", tmp_path / "out-r", ckpt)) == 0
    assert "resuming r seed 0 after round 2" in caplog.text
    assert main(two_runs("r", "0", tmp_path / "straight", tmp_path / "straight-ckpt")) == 0
    resumed = without_wall_time(read_rows(tmp_path / "out-r"))
    assert resumed == without_wall_time(read_rows(tmp_path / "straight"))
    assert [r["round"] for r in resumed][-1] == 3


@pytest.mark.reliability("checkpoints")
def test_a_finished_run_of_another_identity_is_refused_not_set_aside(two_runs, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    assert main(two_runs("q", "0", tmp_path / "out-q", ckpt)) == 0
    before = snapshot(ckpt)
    assert json.loads((ckpt / checkpoint.FINISHED_NAME).read_text())["identity"] == {
        "experiment": "train-cli", "run": "q", "seed": 0
    }  # fmt: skip
    assert main(two_runs("r", "0", tmp_path / "out-r", ckpt)) == 1
    assert "holds the checkpoint of experiment train-cli, run q, seed 0" in capsys.readouterr().err
    assert snapshot(ckpt) == before and not tmp_path.joinpath("ckpt.stale").exists()


@pytest.mark.heavy
@pytest.mark.reliability("locks")
def test_a_second_trainer_on_the_same_folders_fails_at_once(two_runs, tmp_path, monkeypatch):
    # While the first trainer is between rounds 1 and 2 (it holds the lock), a real second
    # `adloco train` process on the same folders: it must fail at once, and the first ends
    # with its rows whole and in order.
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    args = two_runs("r", "0", out, ckpt)
    second = {}
    save = checkpoint.save

    def save_then_start_another(directory, round_, *a, **k):
        saved = save(directory, round_, *a, **k)
        if round_ == 1:
            proc = subprocess.run(
                [sys.executable, "-m", "adloco", *args], capture_output=True, text=True, timeout=600
            )
            second.update(rc=proc.returncode, err=proc.stderr, rows=read_rows(ckpt))
        return saved

    with monkeypatch.context() as patch:
        patch.setattr(checkpoint, "save", save_then_start_another)
        assert main(args) == 0
    assert second["rc"] == 1, second["err"]
    assert second["err"].strip().splitlines()[-1] == (
        f"adloco train: error: --checkpoints {ckpt}: another `adloco train` (pid {os.getpid()} "
        f"on {socket.gethostname()}, writing --out {out}) is writing it; let it finish or stop "
        "it before training into this folder (two trainers on one folder would mix their rounds)"
    )
    assert "Traceback" not in second["err"]
    assert {r["round"] for r in second["rows"]} == {1}  # the second wrote no row
    rows = read_rows(out)
    assert read_rows(ckpt) == rows
    keys = [(r["round"], r["trainer"]) for r in rows]
    assert keys == sorted(set(keys)) and keys[-1][0] == 3  # ordered, each row once
    assert main(two_runs("r", "0", tmp_path / "straight", tmp_path / "straight-ckpt")) == 0
    assert without_wall_time(rows) == without_wall_time(read_rows(tmp_path / "straight"))
    # The lock went with the first process: the same command now runs (a finished run, again).
    assert main(args) == 0


@pytest.mark.reliability("live curves")
@pytest.mark.parametrize(
    "live, clash",
    [
        ("out/live", "--live {live} is inside --out {out}"),
        ("ckpt/live", "--live {live} is inside --checkpoints {ckpt}"),
        ("out", "--live {live} is --out {out}"),
        (".", "--out {out} is inside --live {live}"),
    ],
    ids=["in --out", "in --checkpoints", "is --out", "holds --out"],
)
def test_live_curves_among_the_outputs_are_refused_before_any_step(
    two_runs, tmp_path, monkeypatch, capsys, live, clash
):
    out, ckpt, live = tmp_path / "out", tmp_path / "ckpt", tmp_path / live
    from adloco import train_run

    monkeypatch.setattr(train_run, "build_engine", lambda *a, **k: pytest.fail("trained"))
    assert main([*two_runs("r", "0", out, ckpt), "--live", str(live)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("adloco train: error: " + clash.format(live=live, out=out, ckpt=ckpt))
    assert "give --live a folder of its own (logs/<experiment>/live/<run>/seed<seed>)" in err
    assert not out.exists() and not ckpt.exists()  # nothing trained: no metrics rows
