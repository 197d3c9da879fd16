"""A folder made read-only while a run writes to it: one line, nothing lost, the run resumes.

The checkpoint folder (which holds ``metrics.jsonl`` too) sits on a bind mount
that is remounted read-only between two rounds, as a disk or a network share
turning read-only under a running job would be: the kernel then refuses every
write with ``EROFS``, whatever the permission bits (root too). It needs root
and a kernel that lets this container mount; elsewhere it is skipped, saying
why (tests/core/test_errors.py's read-only cases, with chmod, run everywhere).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from array_data import make_engine

from adloco.core.errors import describe
from adloco.engine.loop import RoundLoop

RUN = {"max_rounds": 4, "checkpoint_every_rounds": 1}


def rows(path: Path) -> list[dict]:
    found = [json.loads(line) for line in path.read_text().splitlines()]
    for row in found:
        row.pop("wall_time_s")
    return found


@pytest.mark.reliability("read-only")
def test_a_folder_turned_read_only_between_rounds_loses_nothing_and_the_run_resumes(
    array_data, make_config, tmp_path, bind_mount, monkeypatch
):
    where, remount = bind_mount
    cfg, run = make_config(RUN)
    reference = make_engine(cfg, run, array_data, tmp_path / "reference")
    reference.run()
    expected = rows(reference.metrics_path)
    assert {r["round"] for r in expected} == {1, 2, 3, 4}

    original = RoundLoop.run_round

    def read_only_after_round_2(self):
        if self.state.round == 2:  # rounds 1 and 2 written and checkpointed
            remount(read_only=True)
        return original(self)

    monkeypatch.setattr(RoundLoop, "run_round", read_only_after_round_2)
    engine = make_engine(cfg, run, array_data, where)
    with pytest.raises(OSError) as failed:
        engine.run()
    assert failed.value.errno == errno.EROFS
    # What `adloco train` prints for it (adloco.cli.main): one line naming the file and the fix.
    message = describe(failed.value)
    assert "\n" not in message and message.startswith(str(where)), message
    assert message.endswith(": Read-only file system; make it writable, or choose another folder")
    ckpt = where / "ckpt"
    # Nothing lost: the rows of rounds 1 and 2, whole, and round 2's checkpoint.
    assert rows(engine.metrics_path) == [r for r in expected if r["round"] <= 2]
    assert (ckpt / "round-000002").is_dir()
    with pytest.raises(OSError) as refused:  # the folder is read-only for root too
        (ckpt / "probe").write_text("x")
    assert refused.value.errno == errno.EROFS

    remount(read_only=False)
    trained = []

    def counted(self):
        trained.append(self.state.round + 1)
        return original(self)

    monkeypatch.setattr(RoundLoop, "run_round", counted)
    again = make_engine(cfg, run, array_data, where)
    again.run()
    # Resumed after round 2 (rounds 3 and 4 trained, not started over): every round
    # once, equal to the uninterrupted run's, and nothing set aside as stale.
    assert trained == [3, 4]
    assert rows(again.metrics_path) == expected
    assert not list(where.glob("*.stale"))
