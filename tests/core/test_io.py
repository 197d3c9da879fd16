"""Atomic outputs: what a killed writer left beside an output is removed by the next writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from adloco.core.io import (
    OWNED_LIST,
    ForeignFolderError,
    atomic_dir,
    atomic_path,
    check_replaceable,
    is_own_temporary,
    write_text_atomic,
)

WRITER = "adloco test"


def _killed_writer(target, kind: str) -> None:
    """A process that starts an atomic write of ``target`` and is killed half-way."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from adloco.core.io import atomic_dir, atomic_path
        if {kind!r} == "dir":
            helper = atomic_dir({str(target)!r}, {WRITER!r})
        else:
            helper = atomic_path({str(target)!r})
        with helper as tmp:
            if {kind!r} == "dir":
                (tmp / "shard.bin").write_bytes(b"half")
            else:
                tmp.write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], check=False)
    assert result.returncode == -9


def test_a_killed_folder_write_is_cleaned_by_the_next_one(tmp_path):
    target = tmp_path / "tiny"
    _killed_writer(target, "dir")
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and is_own_temporary("tiny", left[0])
    # Folders of similar names, the user's, are not touched: another name, and
    # the very shape of a temporary without adloco's mark in it.
    (tmp_path / ".tiny-2.abcdefgh.tmp").mkdir()
    (tmp_path / ".tiny.abcdefgh.tmp").mkdir()
    (tmp_path / ".tiny.abcdefgh.tmp" / "mine").write_bytes(b"mine")
    with atomic_dir(target, WRITER) as tmp:
        (tmp / "shard.bin").write_bytes(b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".tiny-2.abcdefgh.tmp",
        ".tiny.abcdefgh.tmp",
        "tiny",
    ]
    assert (tmp_path / ".tiny.abcdefgh.tmp" / "mine").read_bytes() == b"mine"
    assert (target / "shard.bin").read_bytes() == b"whole"


def test_a_killed_file_write_is_cleaned_by_the_next_one(tmp_path):
    target = tmp_path / "summary.json"
    _killed_writer(target, "file")
    (left,) = tmp_path.glob(".summary.json.*.tmp")
    assert is_own_temporary("summary.json", left.name)
    (tmp_path / ".summary.json.x.tmp.keep").write_text("not ours")
    (tmp_path / ".summary.json.abcdefgh.tmp").write_text("not ours either")
    write_text_atomic(target, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".summary.json.abcdefgh.tmp",
        ".summary.json.x.tmp.keep",
        "summary.json",
    ]


def test_an_old_copy_left_by_a_killed_swap_is_removed(tmp_path):
    target = tmp_path / "final"
    with atomic_dir(target, WRITER) as tmp:
        (tmp / "model.bin").write_bytes(b"old")
    # A swap killed between its two renames: the old folder moved aside, the new not in.
    code = textwrap.dedent(
        f"""
        import os, signal
        from adloco.core.io import atomic_dir
        rename = os.replace
        def replace(src, dst):
            rename(src, dst)
            if str(src) == {str(target)!r}:
                os.kill(os.getpid(), signal.SIGKILL)
        os.replace = replace
        with atomic_dir({str(target)!r}, {WRITER!r}) as tmp:
            (tmp / "model.bin").write_bytes(b"new")
        """
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == -9
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 2 and all(is_own_temporary("final", name) for name in left)
    with atomic_dir(target, WRITER) as tmp:
        (tmp / "model.bin").write_bytes(b"1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_a_failed_write_leaves_the_old_output_and_no_temporary(tmp_path, kind):
    target = tmp_path / "out"
    write_text_atomic(target, "old") if kind == "file" else target.mkdir()
    helper = atomic_path(target) if kind == "file" else atomic_dir(target, WRITER)
    with pytest.raises(RuntimeError), helper:
        raise RuntimeError("stage failed")
    assert os.listdir(tmp_path) == ["out"]


# ------------------------------------------------------------------ what a folder may hold
def test_a_folder_is_replaced_only_when_adloco_wrote_all_of_it(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target, WRITER) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.bin").write_bytes(b"a")
    listed = json.loads((target / OWNED_LIST).read_text())
    assert listed == {"written_by": WRITER, "files": {"sub/a.bin": {"size_bytes": 1}}}
    (target / ".snakemake_timestamp").write_text("")  # Snakemake's, for a directory output
    with atomic_dir(target, WRITER) as tmp:
        (tmp / "b.bin").write_bytes(b"bb")
    assert sorted(p.name for p in target.iterdir()) == [OWNED_LIST, "b.bin"]
    assert json.loads((target / OWNED_LIST).read_text())["files"] == {"b.bin": {"size_bytes": 2}}
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ForeignFolderError, match=r"--out .*/out: holds 1 file\(s\) .*notes.txt"):
        with atomic_dir(target, WRITER, "--out") as tmp:
            pytest.fail("the work must not start")
    assert (target / "notes.txt").read_text() == "mine"
    with pytest.raises(ForeignFolderError, match="not a folder"):
        check_replaceable(target / "b.bin", WRITER)


def test_the_tools_bookkeeping_is_recognised_at_any_depth(tmp_path):
    # Snakemake stamps a directory output inside its parent output folder: the
    # report's figures/.snakemake_timestamp.
    report = tmp_path / "report"
    with atomic_dir(report, WRITER) as tmp:
        (tmp / "figures").mkdir()
        (tmp / "figures" / "curves.png").write_bytes(b"png")
    (report / "figures" / ".snakemake_timestamp").write_text("")
    check_replaceable(report, WRITER)
    (report / "figures" / "snakemake_timestamp.txt").write_text("not the tool's")
    with pytest.raises(ForeignFolderError, match="snakemake_timestamp.txt"):
        check_replaceable(report, WRITER)
    # A folder holding the tools' bookkeeping alone holds nothing to lose.
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".snakemake_timestamp").write_text("")
    check_replaceable(tmp_path / "empty", WRITER)


def test_a_checkpoint_folder_is_checked_by_its_names(tmp_path):
    from adloco.core.io import check_only_named

    # The one folder written file by file, never as a whole, so no manifest lists it.
    folder = tmp_path / "checkpoints"
    (folder / "round-000001").mkdir(parents=True)
    for name in ("checkpoint.json", "round-000001/shared.pt", ".snakemake_timestamp"):
        (folder / name).write_text("x")
    names = ("checkpoint.json", "round-[0-9]*/shared.pt")
    check_only_named(folder, names, "--checkpoints")
    (folder / "round-000001" / "passwd").write_text("x")
    with pytest.raises(ForeignFolderError, match=r"--checkpoints .*: holds 1 file.*passwd"):
        check_only_named(folder, names, "--checkpoints")


def test_check_writable_leaves_nothing_behind_and_names_a_file_in_the_way(tmp_path):
    from adloco.core.io import NotWritableError, check_writable

    check_writable(tmp_path / "new" / "deeper", "--out")
    assert list(tmp_path.iterdir()) == []  # probed in tmp_path, nothing created
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotWritableError, match=r"--out .*/file/run \(in .*/file\): cannot write"):
        check_writable(tmp_path / "file" / "run", "--out")
