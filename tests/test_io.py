"""Atomic outputs: what a killed writer left beside an output is removed by the next writer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from adloco.io import atomic_dir, atomic_files, atomic_path, write_text_atomic


def _killed_writer(target, kind: str) -> None:
    """A process that starts an atomic write of ``target`` and is killed half-way."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from adloco.io import atomic_dir, atomic_path
        helper = atomic_dir if {kind!r} == "dir" else atomic_path
        with helper({str(target)!r}) as tmp:
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
    assert len(left) == 1 and left[0].startswith(".tiny.") and left[0].endswith(".tmp")
    # An unrelated folder of a similar name is not touched.
    (tmp_path / ".tiny-2.abcdefgh.tmp").mkdir()
    with atomic_dir(target) as tmp:
        (tmp / "shard.bin").write_bytes(b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny-2.abcdefgh.tmp", "tiny"]
    assert (target / "shard.bin").read_bytes() == b"whole"


def test_a_killed_file_write_is_cleaned_by_the_next_one(tmp_path):
    target = tmp_path / "summary.json"
    _killed_writer(target, "file")
    assert len(list(tmp_path.glob(".summary.json.*.tmp"))) == 1
    (tmp_path / ".summary.json.x.tmp.keep").write_text("not ours")
    write_text_atomic(target, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".summary.json.x.tmp.keep",
        "summary.json",
    ]


def test_an_old_copy_left_by_a_killed_swap_is_removed(tmp_path):
    target = tmp_path / "final"
    target.mkdir()
    (tmp_path / ".final.old").mkdir()  # a swap killed between its two renames
    with atomic_dir(target) as tmp:
        (tmp / "model.bin").write_bytes(b"1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


@pytest.mark.parametrize("helper", [atomic_dir, atomic_path])
def test_a_failed_write_leaves_the_old_output_and_no_temporary(tmp_path, helper):
    target = tmp_path / "out"
    write_text_atomic(target, "old") if helper is atomic_path else target.mkdir()
    with pytest.raises(RuntimeError), helper(target):
        raise RuntimeError("stage failed")
    assert os.listdir(tmp_path) == ["out"]


# ------------------------------------------------------------------ what a folder may hold
def test_a_folder_is_replaced_only_when_adloco_wrote_all_of_it(tmp_path):
    from adloco.io import OWNED_LIST, ForeignFolderError

    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "a.bin").write_bytes(b"a")
    assert (target / OWNED_LIST).is_file()
    (target / ".snakemake_timestamp").write_text("")  # Snakemake's, for a directory output
    with atomic_dir(target) as tmp:
        (tmp / "b.bin").write_bytes(b"b")
    assert sorted(p.name for p in target.iterdir()) == [OWNED_LIST, "b.bin"]
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ForeignFolderError, match=r"--out .*/out: holds 1 file\(s\) .*notes.txt"):
        with atomic_dir(target, what="--out") as tmp:
            pytest.fail("the work must not start")
    assert (target / "notes.txt").read_text() == "mine"


def test_the_tools_bookkeeping_is_recognised_at_any_depth(tmp_path):
    from adloco.io import ForeignFolderError, check_replaceable

    # Snakemake stamps a directory output inside its parent output folder: the
    # report's figures/.snakemake_timestamp.
    report = tmp_path / "report"
    (report / "figures").mkdir(parents=True)
    (report / "figures" / ".snakemake_timestamp").write_text("")
    (report / "figures" / "curves.png").write_bytes(b"png")
    check_replaceable(report, ("figures/*.png",))
    (report / "figures" / "snakemake_timestamp.txt").write_text("not the tool's")
    with pytest.raises(ForeignFolderError, match="snakemake_timestamp.txt"):
        check_replaceable(report, ("figures/*.png",))


def test_own_patterns_cover_a_folder_written_before_the_list(tmp_path):
    from adloco.io import ForeignFolderError, check_replaceable

    legacy = tmp_path / "tokenized"
    (legacy / "tokenizer").mkdir(parents=True)
    for name in ("manifest.json", "train-00000.bin", "tokenizer/tokenizer.json"):
        (legacy / name).write_text("x")
    own = ("manifest.json", "tokenizer/*", "*-[0-9][0-9][0-9][0-9][0-9].bin")
    check_replaceable(legacy, own)
    (legacy / "tokenizer" / ".." / "passwd").write_text("x")
    with pytest.raises(ForeignFolderError, match="passwd"):
        check_replaceable(legacy, own)
    with pytest.raises(ForeignFolderError, match="not a folder"):
        check_replaceable(legacy / "manifest.json")


def test_check_writable_leaves_nothing_behind_and_names_a_file_in_the_way(tmp_path):
    from adloco.io import NotWritableError, check_writable

    check_writable(tmp_path / "new" / "deeper", "--out")
    assert list(tmp_path.iterdir()) == []  # probed in tmp_path, nothing created
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotWritableError, match=r"--out .*/file/run \(in .*/file\): cannot write"):
        check_writable(tmp_path / "file" / "run", "--out")


def test_atomic_files_moves_in_its_files_only_once_all_are_written(tmp_path):
    folder = tmp_path / "replay"
    folder.mkdir()
    (folder / "calibrate.yaml").write_text("not the stage's")
    (folder / "a.csv").write_text("old a")
    (folder / "figures").mkdir()
    (folder / "figures" / "b.png").write_text("old b")
    names = ["a.csv", "figures/b.png", "figures/c.png"]
    # A failure part-way: the folder as it was, no temporary left beside it.
    with pytest.raises(OSError), atomic_files(folder, names) as tmp:
        (tmp / "a.csv").write_text("new a")
        raise OSError(28, "No space left on device")
    assert (folder / "a.csv").read_text() == "old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay"]
    # Success: the names written replace theirs, one not written is removed, the rest kept.
    with atomic_files(folder, names) as tmp:
        (tmp / "a.csv").write_text("new a")
        (tmp / "figures").mkdir()
        (tmp / "figures" / "c.png").write_text("new c")
    found = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*.*")}
    assert found == {
        "calibrate.yaml": "not the stage's",
        "a.csv": "new a",
        "figures/c.png": "new c",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay"]
