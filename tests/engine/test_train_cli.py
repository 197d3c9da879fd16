"""`adloco train` on real tokenized data: a new job never resumes a finished run's checkpoint,
and a checkpoint of other code is not resumed either."""

from __future__ import annotations

import json
import logging
import shutil

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


def run_train(config, data, calibration, seed: str, out, ckpt) -> None:
    """`adloco train` of run r in this process, torch's determinism flag restored after."""
    args = ["train", "--config", str(config), "--run", "r", "--seed", seed]
    args += ["--data", str(data), "--calibration", str(calibration)]
    args += ["--out", str(out), "--checkpoints", str(ckpt), "--no-progress", "--threads", "1"]
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        assert cli.main(args) == 0
    finally:
        torch.use_deterministic_algorithms(deterministic)


def read_rows(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def without_wall_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]


@pytest.fixture
def curves_from_config(monkeypatch):
    """The devices' step-time curves, which would come from `adloco calibrate`."""
    from adloco.engine import run as run_module

    monkeypatch.setattr(run_module, "step_time_curves", lambda cfg, _dir: tiny_curves(cfg))


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
    assert caplog.text.count("after round 2") == 2 and "starting over" not in caplog.text


@pytest.mark.reliability("configs")
def test_an_out_folder_holding_a_users_file_is_refused_before_training(
    train, tmp_path, monkeypatch, capsys
):
    from adloco.engine import run as run_module

    monkeypatch.setattr(run_module, "make_engine", lambda *a, **k: pytest.fail("trained"))
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
