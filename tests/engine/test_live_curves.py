"""Live curves: TensorBoard scalars on disk at every step, a restart replaying instead of
appending, and no fault of theirs stopping a job."""

from __future__ import annotations

import errno
import importlib
import logging
import sys

import numpy as np
import pytest

from adloco.engine import live_curves
from adloco.engine.live_curves import LiveCurves
from live_events import read_scalars


def f32(x: float) -> float:
    """A value as TensorBoard keeps it (``simple_value`` is a float32)."""
    return float(np.float32(x))


def test_each_step_is_on_disk_when_add_returns(tmp_path):
    curves = LiveCurves(tmp_path / "live")
    curves.add(100, {"val/perplexity": 153.66217667, "run/round": 1})
    curves.add(250, {"val/perplexity": None, "run/round": 2})  # not measured: left out
    # Read before close: a researcher's TensorBoard sees the rounds as they end.
    assert read_scalars(tmp_path / "live") == {
        "val/perplexity": [(100, f32(153.66217667))],
        "run/round": [(100, 1.0), (250, 2.0)],
    }
    curves.close()
    assert read_scalars(tmp_path / "live")["run/round"] == [(100, 1.0), (250, 2.0)]


def test_a_restart_replays_the_rows_it_holds_instead_of_appending(tmp_path):
    # A job killed after step 300 resumes from its checkpoint of step 200: the
    # new file holds 100 and 200 once (replayed), then the redone 300.
    folder = tmp_path / "live"
    first = LiveCurves(folder)
    for step in (100, 200, 300):
        first.add(step, {"x": step / 10})
    first.close()
    # Another writer's event file and a user's note: not adloco's, kept.
    theirs = folder / "events.out.tfevents.1700000000.host"
    theirs.write_bytes(b"theirs")
    (folder / "notes.txt").write_text("mine")
    again = LiveCurves(folder, [(100, {"x": 10.0}), (200, {"x": 20.0})])
    again.add(300, {"x": 31.0})
    again.close()
    assert read_scalars(folder, "*.adloco") == {"x": [(100, 10.0), (200, 20.0), (300, 31.0)]}
    assert theirs.read_bytes() == b"theirs" and (folder / "notes.txt").read_text() == "mine"


@pytest.mark.reliability("live curves")
def test_a_start_keeps_earlier_event_files_of_adlocos_whole(tmp_path):
    # Issue 45: a start deleted the folder's earlier event file of adloco's
    # (another job given the same --live, a run started over). Now each start
    # moves them, byte for byte, into earlier/ (TensorBoard's run of its own).
    folder = tmp_path / "live"
    written = []
    for value in (1.0, 2.0, 3.0):  # three jobs, one after another, in one folder
        curves = LiveCurves(folder, [(100, {"x": value})])
        curves.close()
        (path,) = folder.glob(live_curves.FILE_GLOB)
        written.append((path.name, path.read_bytes()))
    assert read_scalars(folder, "*.adloco") == {"x": [(100, 3.0)]}  # the last job's alone
    kept = sorted((folder / live_curves.EARLIER).iterdir())
    assert sorted(p.read_bytes() for p in kept) == sorted(b for _, b in written[:2])
    # A name met twice (the same second and host) gets a counter, never replaces one.
    assert {p.name.removesuffix(".1") for p in kept} <= {n for n, _ in written}
    values = sorted(read_scalars(folder / live_curves.EARLIER, p.name)["x"][0][1] for p in kept)
    assert values == [1.0, 2.0]


@pytest.mark.reliability("live curves")
def test_a_start_that_cannot_keep_the_earlier_file_warns_and_keeps_it(tmp_path, caplog):
    folder = tmp_path / "live"
    LiveCurves(folder, [(100, {"x": 1.0})]).close()
    (earlier,) = folder.glob(live_curves.FILE_GLOB)
    before = earlier.read_bytes()
    (folder / live_curves.EARLIER).write_text("a file of the user's where earlier/ would go")
    with caplog.at_level(logging.WARNING):
        curves = LiveCurves(folder, [(100, {"x": 2.0})])
    assert not curves.active
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"no live curves in {folder}: cannot keep its earlier event files in {folder}/earlier "
        f"(File exists), so none was written over; move {folder}/earlier away, or leave out "
        "--live; training goes on without them"
    ]
    assert earlier.read_bytes() == before
    assert (folder / live_curves.EARLIER).read_text().startswith("a file of the user's")


def test_tensorboard_reads_the_file(tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    curves = LiveCurves(tmp_path, [(10, {"val/perplexity": 40.5})])
    curves.add(20, {"val/perplexity": 30.25})
    curves.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    scalars = acc.Scalars("val/perplexity")
    assert [(s.step, s.value) for s in scalars] == [(10, 40.5), (20, 30.25)]


def test_no_folder_no_curves(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        curves = LiveCurves(None)
        curves.add(1, {"x": 1.0})
        curves.close()
    assert not curves.active and caplog.records == []


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture
def without_the_writer(monkeypatch):
    """adloco.engine.live_curves imported where tensorboardX is not installed (reloaded after)."""
    for name in [m for m in sys.modules if m.split(".")[0] == "tensorboardX"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    yield importlib.reload(live_curves)
    monkeypatch.undo()
    importlib.reload(live_curves)


@pytest.mark.reliability("live curves")
def test_a_missing_writer_package_warns_once_at_the_start(tmp_path, caplog, without_the_writer):
    assert without_the_writer.WRITER_ERROR.startswith("ModuleNotFoundError: ")
    with caplog.at_level(logging.WARNING):
        curves = without_the_writer.LiveCurves(tmp_path / "live", [(1, {"x": 1.0})])
        curves.add(2, {"x": 2.0})
        curves.close()
    (message,) = warnings_of(caplog)
    assert message.startswith(f"no live curves in {tmp_path / 'live'}: the writer package ")
    assert "install it (pip install tensorboardX), or leave out --live" in message
    assert not curves.active and not (tmp_path / "live").exists()


@pytest.mark.reliability("live curves")
def test_a_folder_that_cannot_be_written_warns_once_at_the_start(tmp_path, caplog):
    # A real error from the system, as root too: the folder's parent is a file.
    (tmp_path / "file").write_text("x")
    folder = tmp_path / "file" / "live"
    with caplog.at_level(logging.WARNING):
        curves = LiveCurves(folder)
        curves.add(1, {"x": 1.0})
        curves.close()
    (message,) = warnings_of(caplog)
    assert message == (
        f"no live curves in {folder}: cannot write there (Not a directory); make it "
        "writable, or leave out --live; training goes on without them"
    )
    assert not curves.active


@pytest.mark.reliability("live curves")
def test_a_write_that_fails_later_warns_once_and_stops_the_curves(tmp_path, caplog, monkeypatch):
    curves = LiveCurves(tmp_path)
    curves.add(1, {"x": 1.0})

    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(curves._writer, "flush", full_disk)
    with caplog.at_level(logging.WARNING):
        for step in (2, 3, 4):
            curves.add(step, {"x": float(step)})
        curves.close()
    (message,) = warnings_of(caplog)
    assert message == (
        f"no live curves in {tmp_path}: a write failed at step 2 (No space left on device); "
        "free space or make it writable, or leave out --live; training goes on without them"
    )
    assert not curves.active
    assert read_scalars(tmp_path)["x"][0] == (1, 1.0)
