"""Damaged checkpoints: never used silently, never run, one line naming the file.

A run of the engine on the tiny model writes its checkpoints (every round, the
previous complete round kept); each case damages them as a disk, a user or an
attacker would, then trains the same run again. An intact previous round is
resumed and gives the bit-identical result of an undamaged run; without one,
the run is refused, naming the file.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from pathlib import Path

import pytest
import torch
import yaml
from array_data import TINY_CLUSTER, TINY_MODEL, new_engine, tiny_curves

from adloco import cli
from adloco.engine import checkpoint
from adloco.engine.driver import Driver

ROUNDS = 3
CONFIG = {
    "experiment": "checkpoint-faults",
    "seed": 0,
    "data": {"dataset": "tiny", "source": "local", "seq_len_tokens": 16},
    "model": TINY_MODEL,
    "cluster": TINY_CLUSTER,
    "train": {
        "max_rounds": ROUNDS,
        "inner_steps": 2,
        "inner_lr": 0.01,
        "max_tokens": 10**6,
        "eval_sequences": 8,
        "eval_batch": 8,
    },
    "runs": {"r": {"method": "adloco", "initial_trainers": 2, "merge_frequency": 2}},
}


def checkpointed_run(make_config, array_data, ckpt: Path) -> Driver:
    """The engine of this file's run, checkpointing to ``ckpt``."""
    cfg, run = make_config(CONFIG["runs"]["r"], train={"max_rounds": ROUNDS})
    return new_engine(cfg, run, array_data, ckpt)


def outcome(engine: Driver) -> tuple[list[dict], dict]:
    rows = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in engine.run()]
    return rows, {t.id: [p.detach().clone() for p in t.params] for t in engine.trainers}


def same(a: tuple[list[dict], dict], b: tuple[list[dict], dict]) -> bool:
    return (
        a[0] == b[0]
        and a[1].keys() == b[1].keys()
        and all(torch.equal(p, q) for k in a[1] for p, q in zip(a[1][k], b[1][k], strict=True))
    )


@pytest.fixture
def trained(make_config, array_data, tmp_path):
    """A finished engine run's checkpoint folder (rounds 2 and 3 kept) and its outcome."""
    ckpt = tmp_path / "ckpt"
    straight = outcome(checkpointed_run(make_config, array_data, ckpt))
    assert sorted(p.name for p in ckpt.glob("round-*")) == ["round-000002", "round-000003"]
    return ckpt, straight


def _manifest(ckpt: Path) -> dict:
    return json.loads((ckpt / checkpoint.MANIFEST_NAME).read_text())


def _reseal(ckpt: Path, entry: dict | None = None) -> None:
    """Write the sha256 of the damaged files into the manifest, as an attacker would."""
    manifest = _manifest(ckpt)
    for part in (manifest, manifest["previous"]):
        if entry is not None and part["dir"] != entry["dir"]:
            continue
        for name in part["files"]:
            part["sha256"][name] = checkpoint.sha256_file(ckpt / part["dir"] / name)
    (ckpt / checkpoint.MANIFEST_NAME).write_text(json.dumps(manifest))


def flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def random_bytes(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


class Payload:
    """What an attacker's pickle would run on load: here, create a file."""

    marker: Path

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def malicious(path: Path) -> None:
    Payload.marker = path.with_name("PAYLOAD-RAN")
    torch.save({"round": 0, "x": Payload()}, path)


DAMAGE = {
    "bit flip": flip_bit,
    "truncated": truncate,
    "random bytes": random_bytes,
    "malicious pickle": malicious,
}
FILES = ("shared.pt", "rank-00000.pt")


# Every damage with the manifest as it was (the sha256 finds it), and the
# damages a file's structure shows with the manifest resealed to match (what
# is checked then is what the file holds; a resealed bit flip in a tensor is
# an edit no check can tell from a result).
LAST_ROUND_CASES = [(damage, name, False) for damage in DAMAGE for name in FILES] + [
    (damage, name, True) for damage in DAMAGE if damage != "bit flip" for name in FILES
]


@pytest.mark.reliability("checkpoints")
@pytest.mark.parametrize(
    ("damage", "name", "resealed"),
    LAST_ROUND_CASES,
    ids=[f"{d}-{n}-{'resealed' if r else 'sha256'}" for d, n, r in LAST_ROUND_CASES],
)
def test_a_damaged_last_round_resumes_from_the_previous_one(
    trained, make_config, array_data, caplog, damage, name, resealed
):
    ckpt, straight = trained
    last = ckpt / _manifest(ckpt)["dir"]
    DAMAGE[damage](last / name)
    if resealed:
        _reseal(ckpt, _manifest(ckpt))
    with caplog.at_level(logging.WARNING):
        again = outcome(checkpointed_run(make_config, array_data, ckpt))
    assert f"{last / name}: " in caplog.text
    assert f"resuming from the previous checkpoint, round {ROUNDS - 1}" in caplog.text
    assert same(again, straight)
    assert not (last / "PAYLOAD-RAN").exists()


def _damage_both_rounds(ckpt, manifest: dict, name: str, damage: str) -> None:
    """Damage file ``name`` of the last round and of the one before it."""
    for entry in (manifest, manifest["previous"]):
        DAMAGE[damage](ckpt / entry["dir"] / name)
    if damage != "bit flip":  # the sha256 finds a bit flip; the file's structure the rest
        _reseal(ckpt)


@pytest.mark.reliability("checkpoints")
@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_rounds_with_nothing_intact_are_refused_naming_the_file(
    trained, make_config, array_data, damage
):
    ckpt, _ = trained
    manifest = _manifest(ckpt)
    _damage_both_rounds(ckpt, manifest, "shared.pt", damage)
    with pytest.raises(checkpoint.CorruptCheckpointError) as refused:
        checkpointed_run(make_config, array_data, ckpt).run()
    message = str(refused.value)
    assert message.startswith(str(ckpt / manifest["dir"] / "shared.pt") + ": ")
    assert f"move {ckpt} away" in message and "\n" not in message
    assert "weights_only" not in message and "mmap" not in message
    assert not list(ckpt.rglob("PAYLOAD-RAN"))


@pytest.mark.reliability("checkpoints")
def test_an_edited_sha256_in_the_manifest_is_a_corrupt_round(trained, make_config, array_data):
    ckpt, straight = trained
    manifest = _manifest(ckpt)
    digest = manifest["sha256"]["shared.pt"]
    manifest["sha256"]["shared.pt"] = ("0" if digest[0] != "0" else "1") + digest[1:]
    (ckpt / checkpoint.MANIFEST_NAME).write_text(json.dumps(manifest))
    assert same(outcome(checkpointed_run(make_config, array_data, ckpt)), straight)


@pytest.mark.reliability("checkpoints")
def test_a_manifest_that_is_not_json_is_refused_naming_it(trained, make_config, array_data):
    ckpt, _ = trained
    (ckpt / checkpoint.MANIFEST_NAME).write_text('{"round": 4, "dir": ')
    with pytest.raises(checkpoint.CorruptCheckpointError) as caught:
        checkpointed_run(make_config, array_data, ckpt).run()
    message = str(caught.value)
    assert message.startswith(f"{ckpt / checkpoint.MANIFEST_NAME}: not valid JSON (")
    # What to do, and nothing of the user's folder touched.
    assert message.endswith(f"; move {ckpt} away (or delete it) to train this run from the start")
    assert (ckpt / checkpoint.MANIFEST_NAME).read_text() == '{"round": 4, "dir": '


@pytest.mark.reliability("checkpoints")
def test_a_checkpoint_of_the_earlier_format_is_set_aside(trained, make_config, array_data):
    ckpt, straight = trained
    manifest = _manifest(ckpt)
    manifest["format_version"] = 1
    (ckpt / checkpoint.MANIFEST_NAME).write_text(json.dumps(manifest))
    assert same(outcome(checkpointed_run(make_config, array_data, ckpt)), straight)
    assert (ckpt.with_name("ckpt.stale") / checkpoint.MANIFEST_NAME).is_file()


def test_every_file_of_a_round_has_its_sha256_beside_it(trained):
    ckpt, _ = trained
    manifest = _manifest(ckpt)
    for entry in (manifest, manifest["previous"]):
        assert entry["files"] == ["shared.pt", "rank-00000.pt"]
        for name in entry["files"]:
            path = ckpt / entry["dir"] / name
            line = path.with_name(name + ".sha256").read_text()
            # sha256sum's format: `sha256sum -c` checks it by hand.
            assert line == f"{checkpoint.sha256_file(path)}  {name}\n"
            assert entry["sha256"][name] == checkpoint.sha256_file(path)


# ------------------------------------------------------------------ adloco train
@pytest.fixture
def train_cli(tmp_path, tiny_tokenized, monkeypatch):
    """train() runs `adloco train` on the tiny data in this process; returns (code, stderr)."""
    from adloco import train_run

    monkeypatch.setattr(train_run, "step_time_curves", lambda cfg, _dir: tiny_curves(cfg))
    config = tmp_path / "config.yaml"
    cfg = {**CONFIG, "train": {**CONFIG["train"], "max_rounds": 2}}
    cfg["runs"] = {"r": {"method": "diloco"}}
    config.write_text(yaml.safe_dump(cfg))
    ckpt = tmp_path / "ckpt"
    args = ["train", "--config", str(config), "--run", "r", "--seed", "0"]
    args += ["--data", str(tiny_tokenized), "--calibration", str(tmp_path / "calibration")]
    args += ["--out", str(tmp_path / "out"), "--checkpoints", str(ckpt), "--no-progress"]

    def train(capsys) -> tuple[int, str]:
        deterministic = torch.are_deterministic_algorithms_enabled()
        threads = torch.get_num_threads()
        try:
            code = cli.main([*args, "--threads", "1"])
        finally:
            torch.use_deterministic_algorithms(deterministic)
            torch.set_num_threads(threads)
        return code, capsys.readouterr().err

    train.ckpt = ckpt
    return train


@pytest.mark.reliability("checkpoints")
@pytest.mark.parametrize("damage", DAMAGE)
def test_adloco_train_refuses_a_damaged_checkpoint_in_one_line(train_cli, capsys, damage):
    code, _ = train_cli(capsys)
    assert code == 0
    ckpt = train_cli.ckpt
    (ckpt / checkpoint.FINISHED_NAME).unlink()  # as if killed before its outputs
    manifest = _manifest(ckpt)
    _damage_both_rounds(ckpt, manifest, "rank-00000.pt", damage)
    code, err = train_cli(capsys)
    path = ckpt / manifest["dir"] / "rank-00000.pt"
    assert code == 1
    assert err.startswith(f"adloco train: error: {path}: "), err
    assert err.count("\n") == 1 and "Traceback" not in err
    # torch's advice to load with weights_only=False would run the payload.
    assert "weights_only" not in err and "mmap" not in err
    assert not list(ckpt.rglob("PAYLOAD-RAN"))


@pytest.mark.reliability("checkpoints")
def test_a_damaged_round_with_its_previous_folder_gone_is_refused(trained, make_config, array_data):
    ckpt, _ = trained
    manifest = _manifest(ckpt)
    flip_bit(ckpt / manifest["dir"] / "shared.pt")
    (ckpt / manifest["previous"]["dir"] / "shared.pt").unlink()
    with pytest.raises(checkpoint.CorruptCheckpointError, match="no intact earlier round"):
        checkpointed_run(make_config, array_data, ckpt).run()


# ------------------------------------------------------------------ one trainer per folder
HOLD = """
import sys
from adloco.engine import checkpoint_lock
held = checkpoint_lock.lock(sys.argv[1], sys.argv[2])
print("locked", flush=True)
sys.stdin.read()  # held until the test kills this process
"""


@pytest.mark.reliability("locks")
def test_a_held_lock_refuses_a_second_trainer_and_dies_with_its_holder(tmp_path):
    import signal
    import socket
    import subprocess
    import sys

    from adloco.engine import checkpoint_lock

    ckpt = tmp_path / "ckpt"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(ckpt), str(tmp_path / "out")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "locked\n"  # no sleep: the holder says when
        for _ in range(2):
            with pytest.raises(checkpoint_lock.FolderLockedError) as refused:
                checkpoint_lock.lock(ckpt)
            assert str(refused.value).startswith(
                f"--checkpoints {ckpt}: another `adloco train` (pid {holder.pid} on "
                f"{socket.gethostname()}, writing --out {tmp_path / 'out'}) is writing it; "
            )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # kill -9 leaves the file, but the kernel dropped the lock with the process.
    assert (ckpt / checkpoint_lock.LOCK_NAME).is_file()
    with checkpoint_lock.lock(ckpt, "mine") as mine:
        record = json.loads(mine.path.read_text())
        assert record["pid"] == os.getpid() and record["out"] == "mine"
        with pytest.raises(checkpoint_lock.FolderLockedError, match=f"pid {os.getpid()} "):
            checkpoint_lock.lock(ckpt)  # a second open file of this process is refused too
    checkpoint_lock.lock(ckpt).release()  # released on leaving `with`


@pytest.mark.reliability("locks")
def test_setting_a_stale_checkpoint_aside_keeps_the_folders_lock(trained):
    from adloco.engine import checkpoint_lock

    ckpt, _ = trained
    names = sorted(p.name for p in ckpt.iterdir())
    with checkpoint_lock.lock(ckpt):
        stale = checkpoint.set_aside(ckpt)
        # Everything but the lock file moved; the lock is still held on the folder's path.
        assert sorted(p.name for p in stale.iterdir()) == names
        assert sorted(p.name for p in ckpt.iterdir()) == [checkpoint_lock.LOCK_NAME]
        with pytest.raises(checkpoint_lock.FolderLockedError):
            checkpoint_lock.lock(ckpt)


def test_a_folders_identity_is_read_from_its_manifest_else_its_finished_mark(tmp_path):
    from adloco.engine import checkpoint_identity as identity

    mine = identity.identity("e", "r", 3)
    assert mine == {"experiment": "e", "run": "r", "seed": 3}
    assert identity.recorded(tmp_path) is None
    identity.check(tmp_path, mine)  # an empty folder, or one written before identities: taken
    (tmp_path / checkpoint.MANIFEST_NAME).write_text(json.dumps({"round": 2}))
    identity.check(tmp_path, mine)
    checkpoint.mark_finished(tmp_path, {"identity": identity.identity("e", "r", 4)})
    assert identity.recorded(tmp_path) == {"experiment": "e", "run": "r", "seed": 4}
    with pytest.raises(identity.ForeignCheckpointError, match="run r, seed 4, not of this"):
        identity.check(tmp_path, mine)
    # The manifest, when it records one, decides (it names the rounds the folder holds).
    (tmp_path / checkpoint.MANIFEST_NAME).write_text(json.dumps({"identity": mine}))
    identity.check(tmp_path, mine)
    with pytest.raises(identity.ForeignCheckpointError) as refused:
        identity.check(tmp_path, identity.identity("other", "r", 3), what="--where")
    assert str(refused.value) == (
        f"--where {tmp_path} holds the checkpoint of experiment e, run r, seed 3, not of this "
        f"command's experiment other, run r, seed 3: point --where at this run's own folder, or "
        f"move {tmp_path} away to train this run from the start (it was left as it is)"
    )
