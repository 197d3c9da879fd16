"""Kill a training process with SIGKILL at given moments, resume it, compare (test_kills).

Usage: ``kill_worker.py CONFIG ROOT MOMENT...``, each moment ``<point>@<round>``.
The worker imports torch and the engine once, then forks a fresh process for
every run: one uninterrupted run, and per moment a run that SIGKILLs itself
at that moment followed by a run that resumes from what the kill left. It
prints one JSON object: per moment, whether the kill happened there and
whether the resumed run's metrics rows (but wall time) and final weights are
bit-identical to the uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

import torch
from array_data import ArrayData, new_engine

from adloco.config import Config, load_config
from adloco.engine import checkpoint
from adloco.engine.driver import Driver
from adloco.engine.loop import RoundLoop

POINTS = (
    "round-start",  # nothing of the round done
    "mid-round",  # between two trainers' inner steps
    "before-rows",  # the round trained, its metrics rows not written
    "before-checkpoint",  # rows written, no checkpoint of the round
    "mid-shared-file",  # part of shared.pt written (its temporary)
    "after-shared-file",  # shared.pt and its sha256 complete, no rank file
    "after-rank-file",  # every file of the round complete, the manifest not replaced
    "after-manifest",  # the manifest names the round, older rounds not yet deleted
)
MID_FILE_BYTES = 2048


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str, round_: int) -> None:
    """Patch the engine and the checkpoint module so that this process dies at ``point``."""
    state = {"round": 0, "trains": 0, "writing_shared": False, "written": 0}

    def wrap(owner, name, before=None, after=None):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if before is not None:
                before(*args, **kwargs)
            result = original(*args, **kwargs)
            if after is not None:
                after(*args, **kwargs)
            return result

        setattr(owner, name, wrapper)

    def on_round(engine):
        state["round"], state["trains"] = engine.state.round + 1, 0
        if point == "round-start" and state["round"] == round_:
            die()

    def on_train(engine, *args, **kwargs):
        state["trains"] += 1
        if point == "mid-round" and state["round"] == round_ and state["trains"] == 2:
            die()

    def at(expected):
        def check(*args, **kwargs):
            if point == expected and state["round"] == round_:
                die()

        return check

    def saving(path, obj):
        state["writing_shared"] = path.name == checkpoint.SHARED_NAME and state["round"] == round_
        state["written"] = 0

    def saved(path, obj):
        if state["round"] != round_:
            return
        if point == "after-shared-file" and path.name == checkpoint.SHARED_NAME:
            die()
        if point == "after-rank-file" and path.name == checkpoint.rank_file_name(0):
            die()

    def writing(writer, data):
        if point == "mid-shared-file" and state["writing_shared"]:
            state["written"] += len(data)
            if state["written"] > MID_FILE_BYTES:
                writer.flush()
                die()

    def manifest_written(path, obj):
        if point == "after-manifest" and state["round"] == round_:
            if Path(path).name == checkpoint.MANIFEST_NAME:
                die()

    wrap(RoundLoop, "run_round", before=on_round)
    wrap(RoundLoop, "train", before=on_train)
    wrap(RoundLoop, "record", before=at("before-rows"))
    wrap(Driver, "save_checkpoint", before=at("before-checkpoint"))
    wrap(checkpoint, "_save_tensor_file", before=saving, after=saved)
    wrap(checkpoint._HashingWriter, "write", before=writing)
    wrap(checkpoint, "write_json_atomic", after=manifest_written)


def train(cfg: Config, ckpt: Path, kill: tuple[str, int] | None = None) -> None:
    if kill is not None:
        install(*kill)
    engine = new_engine(cfg, cfg.run("r"), ArrayData(), ckpt, batches={"sim": 3})
    load = Driver.load_checkpoint

    def load_and_note(self) -> bool:
        # The round it resumed after (0: started over), for the test to check.
        loaded = load(self)
        (ckpt / "resumed_from.json").write_text(json.dumps(self.round if loaded else 0))
        return loaded

    Driver.load_checkpoint = load_and_note  # in this child process only
    engine.run()
    torch.save({t.id: t.params for t in engine.trainers}, ckpt / "final.pt")


def forked(*args) -> int:
    """Run ``train(*args)`` in a fresh child; its wait status."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            train(*args)
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    return os.waitpid(pid, 0)[1]


def outcome(ckpt: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_time_s")
    return rows, torch.load(ckpt / "final.pt", weights_only=True)


def identical(a: tuple[list[dict], dict], b: tuple[list[dict], dict]) -> bool:
    if a[0] != b[0] or a[1].keys() != b[1].keys():
        return False
    return all(torch.equal(p, q) for k in a[1] for p, q in zip(a[1][k], b[1][k], strict=True))


def main() -> None:
    config, root, *moments = sys.argv[1:]
    torch.set_num_threads(1)
    cfg = load_config(config)
    root = Path(root)
    assert forked(cfg, root / "straight") == 0
    straight = outcome(root / "straight")
    report = {}
    for moment in moments:
        point, round_ = moment.split("@")
        assert point in POINTS, point
        ckpt = root / moment
        status = forked(cfg, ckpt, (point, int(round_)))
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        resumed = forked(cfg, ckpt)
        report[moment] = {
            "killed": killed,
            "resumed_after_round": json.loads((ckpt / "resumed_from.json").read_text()),
            "identical": resumed == 0 and identical(outcome(ckpt), straight),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
