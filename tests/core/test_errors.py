"""One line for every fault users meet: a full disk and a read-only folder, stage by stage.

Each stage runs as ``adloco <stage>`` in this process on the tiny corpus. A
full disk is simulated two ways, without root: the process's file size limit
(``RLIMIT_FSIZE``, so that every writer, torch's and Pillow's C code
included, meets a real ``EFBIG`` from the operating system), and Python's
``open`` handing out files whose writes fail with ``ENOSPC`` (the errno of a
full disk). A read-only folder is ``chmod``'s where that binds, and otherwise
(as root, which permission bits do not stop) file creation under the folder
failing with ``EACCES``. Every case must end in one line,
``adloco <stage>: error: <what>, <which file>, <what to do>``, without a
traceback, and leave no partial output behind.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import json
import os
import resource
import signal
from pathlib import Path

import pytest
import torch
import yaml

from adloco import cli
from adloco.config import thaw
from adloco.core import errors
from adloco.formats.clock import StepTimeCurve
from disk_faults import full_disk

MODEL = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


def config_file(folder: Path, data: dict) -> Path:
    config = {
        "experiment": "errors",
        "seed": 0,
        "data": data,
        "model": MODEL,
        "cluster": {
            "nodes_per_device": 2,
            "devices": [{"name": "sim", "count": 2, "memory_gib": 1.0, "max_batch": 3}],
        },
        "calibration": {"timing_repeats": 5, "timing_warmup": 1, "steps_per_trial": 1},
        "variance": {"num_batches": 8, "batch_size": 2, "eval_sequences": 16},
        "train": {"max_rounds": 2, "inner_steps": 2, "max_tokens": 10**6, "eval_sequences": 8},
        "runs": {"r": {"method": "diloco"}},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def stage(tmp_path, tiny_c4_dir, tiny_tokenized, tiny_data_config, monkeypatch, capsys):
    """stage(name, out) runs `adloco <name>` writing to ``out``; returns (exit code, stderr)."""
    from adloco import train_run

    # The step-time curves would come from `adloco calibrate`.
    curves = {"sim": StepTimeCurve.roofline(0.01, 4, update_s=0.001)}
    monkeypatch.setattr(train_run, "step_time_curves", lambda cfg, _dir: curves)
    config = str(config_file(tmp_path, thaw(tiny_data_config())))
    data, calibration = str(tiny_tokenized), str(tmp_path / "calibration")

    def args(name: str, out: Path) -> list[str]:
        common = ["--config", config]
        return {
            "prepare-corpus": [*common, "--out", str(out)],
            "tokenize": [*common, "--raw", str(tiny_c4_dir), "--out", str(out)],
            "calibrate": [*common, "--data", data, "--device", "sim", "--out", str(out)],
            "variance": [*common, "--data", data, "--out", str(out), "--chunk-size", "2"],
            "train": [*common, "--run", "r", "--seed", "0", "--data", data]
            + ["--calibration", calibration, "--out", str(out), "--no-progress"]
            + ["--checkpoints", str(tmp_path / "ckpt"), "--threads", "1"],
            "report": [*common, "--runs", str(tmp_path / "runs"), "--calibration", calibration]
            + ["--variance", str(tmp_path / "variance"), "--out", str(out)],
        }[name]

    def run(name: str, out: Path, *extra: str) -> tuple[int, str]:
        threads = torch.get_num_threads()
        deterministic = torch.are_deterministic_algorithms_enabled()
        try:
            code = cli.main([name, *args(name, out), *extra])
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(deterministic)
        return code, capsys.readouterr().err

    run.ckpt = tmp_path / "ckpt"
    return run


def one_line(err: str, stage: str) -> str:
    """The message of an error line: exactly one line, no traceback."""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"adloco {stage}: error: "), err
    return err.removeprefix(f"adloco {stage}: error: ").strip()


def leftovers(folder: Path) -> list[str]:
    """Temporaries of atomic writes left anywhere under ``folder``."""
    return sorted(str(p) for p in folder.rglob(".*.tmp"))


# ------------------------------------------------------------------ a full disk
@contextlib.contextmanager
def file_size_limit(limit_bytes: int):
    """Writes past ``limit_bytes`` in any file fail with EFBIG, as from the OS (no root)."""
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the process is killed
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


# Stage, what its output is, the file size limit that stops it, and the file
# whose write fails with ENOSPC (a part of its name).
DISK_FULL = [
    ("prepare-corpus", "raw", 4096, "c4-train"),
    ("tokenize", "tokenized", 4096, ".bin"),
    ("calibrate", "calibration/sim.json", 64, "sim.json"),
    ("variance", "variance", 8192, "deviations.png"),
    ("train", "out", 8192, "shared.pt"),
]


@pytest.mark.reliability("disk-full")
@pytest.mark.parametrize("how", ["EFBIG", "ENOSPC"])
@pytest.mark.parametrize(
    ("name", "out", "limit", "fails"), DISK_FULL, ids=[c[0] for c in DISK_FULL]
)
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing_partial(
    stage, tmp_path, monkeypatch, how, name, out, limit, fails
):
    out = tmp_path / out
    if name == "prepare-corpus":  # the offline corpus, not the tiny one
        cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
        cfg["data"].update(source="offline-wiki", max_documents=50)
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    if how == "EFBIG":
        with file_size_limit(limit):
            code, err = stage(name, out)
    else:
        with full_disk(tmp_path, (fails,), monkeypatch):
            code, err = stage(name, out)
    message = one_line(err, name)
    assert code == 1
    assert message.startswith(f"no space left to write {tmp_path}"), message
    if how == "ENOSPC":
        assert fails in message.split(" (")[0], message
    assert "run the same command again" in message
    assert not leftovers(tmp_path)
    if name in ("prepare-corpus", "tokenize", "calibrate"):
        assert not out.exists()  # written atomically: all of it, or nothing
    if name == "variance":
        assert not (out / "deviations.png").exists() and not (out / "variance.json").exists()
    if name == "train":
        assert not list(stage.ckpt.glob("round-*"))  # no partial round
        assert not (out / "summary.json").exists()


@pytest.mark.reliability("disk-full")
def test_a_full_disk_while_the_final_model_is_written_is_one_line_and_leaves_no_out(
    stage, tmp_path, monkeypatch
):
    # The file size limit only once the run has trained and checkpointed: metrics.jsonl
    # fits under it, the model's safetensors (written by Rust code) does not.
    from adloco import train_run

    write_outputs = train_run.write_outputs

    def on_a_full_disk(engine, *args, **kwargs):
        limit = engine.metrics_path.stat().st_size + 1024
        with file_size_limit(limit):
            return write_outputs(engine, *args, **kwargs)

    monkeypatch.setattr(train_run, "write_outputs", on_a_full_disk)
    out = tmp_path / "out"
    code, err = stage("train", out)
    message = one_line(err, "train")
    assert code == 1
    assert message.startswith(f"no space left to write {out / 'final'} (File too large)"), message
    assert "run the same command again (nothing partial was kept)" in message
    assert not os.path.lexists(out) and not leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_the_message_of_a_full_disk_names_the_output_not_its_temporary(tmp_path):
    from adloco.core.io import atomic_dir, atomic_path

    target = tmp_path / "data"
    with pytest.raises(OSError) as failed, atomic_dir(target, "adloco tokenize") as tmp:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "train-00000.bin"))
    assert failed.value.filename == str(target / "train-00000.bin")
    with pytest.raises(OSError) as failed, atomic_path(tmp_path / "a.json"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert failed.value.filename == str(tmp_path / "a.json")
    message = errors.describe(failed.value)
    assert message.startswith(f"no space left to write {tmp_path / 'a.json'} (No space left")


@pytest.mark.heavy
@pytest.mark.reliability("read-only")
def test_a_run_folder_turned_read_only_before_its_outputs_is_one_line_and_the_command_ends_it(
    stage, tmp_path, monkeypatch, bind_mount
):
    # --out on a mount remounted read-only after training, as the outputs are written:
    # one line, nothing written, the checkpoint not marked finished; writable again,
    # the same command writes the outputs from the last checkpoint, without training.
    from adloco import train_run

    where, remount = bind_mount
    write_outputs = train_run.write_outputs

    def read_only_first(*args, **kwargs):
        remount(read_only=True)
        return write_outputs(*args, **kwargs)

    monkeypatch.setattr(train_run, "write_outputs", read_only_first)
    out = where / "out"
    code, err = stage("train", out)
    message = one_line(err, "train")
    assert code == 1
    assert message.startswith(str(out)), message
    assert message.endswith(": Read-only file system; make it writable, or choose another folder")
    assert not os.path.lexists(out) and list(where.iterdir()) == []
    assert not (stage.ckpt / "finished.json").exists()

    remount(read_only=False)
    monkeypatch.setattr(train_run, "write_outputs", write_outputs)
    trained = []
    from adloco.engine.loop import RoundLoop

    run_round = RoundLoop.run_round
    monkeypatch.setattr(RoundLoop, "run_round", lambda self: trained.append(1) or run_round(self))
    code, err = stage("train", out)
    assert code == 0, err
    assert trained == []  # every round came from the checkpoint
    assert (stage.ckpt / "finished.json").exists()
    monkeypatch.setattr(RoundLoop, "run_round", run_round)
    code, _ = stage("train", tmp_path / "reference")  # an uninterrupted run, trained again
    assert code == 0

    def rows(folder: Path) -> list[dict]:
        found = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in found]

    assert rows(out) == rows(tmp_path / "reference")
    assert (out / "summary.json").is_file() and (out / "final").is_dir()


# ------------------------------------------------------------------ a read-only folder
@contextlib.contextmanager
def read_only(folder: Path, monkeypatch):
    """``folder`` cannot be written: by its permissions, or, as root, by failing creation."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return

    def denied(path) -> OSError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

    def inside(path) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(f"{folder}/")

    real = {"os.open": os.open, "os.mkdir": os.mkdir, "open": builtins.open}

    def fake_os_open(path, flags, *args, **kwargs):
        if inside(path) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise denied(path)
        return real["os.open"](path, flags, *args, **kwargs)

    def fake_mkdir(path, *args, **kwargs):
        if inside(path):
            raise denied(path)
        return real["os.mkdir"](path, *args, **kwargs)

    def fake_open(file, mode="r", *args, **kwargs):
        if inside(file) and any(c in mode for c in "wax+"):
            raise denied(file)
        return real["open"](file, mode, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", fake_os_open)
        patch.setattr(os, "mkdir", fake_mkdir)
        patch.setattr(builtins, "open", fake_open)
        patch.setattr(io, "open", fake_open)
        yield


# Stage, the folder made read-only, where the stage writes under it, the argument named.
READ_ONLY = [
    ("prepare-corpus", "ro", "ro/raw", "--out"),
    ("tokenize", "ro", "ro/tokenized", "--out"),
    ("calibrate", "ro", "ro/sim.json", "--out"),
    ("variance", "ro", "ro", "--out"),
    ("train", "ro", "ro", "--out"),
    ("train", "ckpt", "out", "--checkpoints"),
    ("report", "ro", "ro", "--out"),
]


@pytest.mark.reliability("read-only")
@pytest.mark.parametrize(
    ("name", "locked", "out", "argument"), READ_ONLY, ids=[f"{c[0]}{c[3]}" for c in READ_ONLY]
)
def test_a_read_only_output_is_refused_before_any_work(
    stage, tmp_path, monkeypatch, name, locked, out, argument
):
    with read_only(tmp_path / locked, monkeypatch):
        code, err = stage(name, tmp_path / out)
    message = one_line(err, name)
    assert code == 1
    assert message.startswith(f"{argument} "), message
    assert f"{tmp_path / locked}: cannot write there (Permission denied)" in message
    assert "make it writable or choose another folder" in message
    # Before the first step: nothing trained, nothing left.
    assert not (stage.ckpt / "metrics.jsonl").exists()
    assert not leftovers(tmp_path)


# ------------------------------------------------------------------ a damaged input
@pytest.mark.reliability("messages")
def test_a_truncated_base_json_is_named_with_what_to_do(tmp_path, capsys):
    # The test preset starts every run from its base; base.json cut at byte 100, as a
    # copy interrupted part-way would leave it.
    summary = {"model_dir": "model", "model_sha256": {"model.safetensors": "0" * 64}, "seed": 0}
    base = tmp_path / "base"
    base.mkdir()
    (base / "base.json").write_text(json.dumps(summary, indent=2)[:100])
    preset = Path(__file__).parents[2] / "config" / "test.yaml"
    args = ["train", "--config", str(preset), "--run", "diloco", "--seed", "0"]
    args += ["--data", str(tmp_path / "data"), "--calibration", str(tmp_path / "calibration")]
    args += ["--base", str(base), "--out", str(tmp_path / "out")]
    args += ["--checkpoints", str(tmp_path / "ckpt")]
    assert cli.main(args) == 1
    message = one_line(capsys.readouterr().err, "train")
    assert message.startswith(f"{base / 'base.json'}: not valid JSON ("), message
    assert message.endswith("); run adloco pretrain again"), message
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()
