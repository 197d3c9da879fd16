"""Outputs owned by the stage that wrote them: what a hostile sweep of users' files found.

Each case puts a user's file where adloco once took it for its own (a name
that matched a stage's file pattern, a folder another stage wrote), runs the
stage's own check or the stage itself, and asserts the refusal names the file
and the file is still there byte for byte.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from adloco.core.io import (
    OWNED_LIST,
    ForeignFolderError,
    atomic_dir,
    check_replaceable,
    is_own_temporary,
)
from adloco.data import corpus, tokenize

# Bytes no stage writes, so that a file kept is the user's file and no other.
USERS = b"\x1f\x8b the user's own bytes \x00\xff"


def _snapshot(folder) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize("beside", [False, True])
def test_a_users_c4_shards_in_data_raw_dir_are_kept(tmp_path, beside):
    # Named exactly as prepare-corpus names its own shards: in a folder of the
    # user's, or added to the folder prepare-corpus wrote.
    raw = tmp_path / "raw"
    if beside:
        corpus.prepare_wiki_corpus(raw, max_documents=3)
    raw.mkdir(exist_ok=True)
    (raw / "c4-train.00007-of-01024.json.gz").write_bytes(USERS)
    before = _snapshot(raw)
    with pytest.raises(ForeignFolderError) as refused:
        corpus.prepare_wiki_corpus(raw, max_documents=3)
    message = str(refused.value)
    assert message.startswith(f"{corpus.WHAT} {raw}: holds 1 file(s) adloco did not write")
    assert "(c4-train.00007-of-01024.json.gz)" in message and "\n" not in message
    assert _snapshot(raw) == before
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]  # nothing written beside it


@pytest.mark.reliability("ownership")
def test_a_users_png_in_the_reports_figures_is_kept(tmp_path):
    # What `snakemake --forcerun report` would empty: the report's figures/.
    from adloco import report

    out = tmp_path / "report"
    with atomic_dir(out, report.WRITER, "--out") as tmp:
        (tmp / "figures").mkdir()
        (tmp / "figures" / "curves.png").write_bytes(b"adloco's figure")
        (tmp / "index.html").write_text("<html></html>")
    (out / "figures" / "my-plot.png").write_bytes(USERS)
    with pytest.raises(ForeignFolderError, match=r"--out .*: holds 1 file\(s\) .*my-plot\.png"):
        given = {"config": "config.yaml", "runs": "runs", "calibration": "calibration"}
        report.build_report(report.ReportRequest(**given, variance="variance", out=out))
    assert (out / "figures" / "my-plot.png").read_bytes() == USERS


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize(
    ("writer", "inside"),
    [("adloco train", "final/"), (tokenize.WRITER, "tokenizer/")],
)
def test_a_users_file_in_a_runs_final_or_the_tokenizer_folder_is_kept(tmp_path, writer, inside):
    # adloco train and adloco tokenize run again directly over their own output.
    out = tmp_path / "out"
    with atomic_dir(out, writer, "--out") as tmp:
        (tmp / inside).mkdir()
        if inside == "final/":
            with atomic_dir(tmp / "final", writer, "--out") as final:
                (final / "model.safetensors").write_bytes(b"weights")
        else:
            (tmp / inside / "tokenizer.json").write_text("{}")
    (out / inside / "notes.md").write_bytes(USERS)
    with pytest.raises(ForeignFolderError) as refused:
        check_replaceable(out, writer, "--out")
    assert f"--out {out}: holds 1 file(s) adloco did not write ({inside}notes.md)" in str(
        refused.value
    )
    if inside == "final/":  # Snakemake's preflight checks final/ alone, by its own manifest
        with pytest.raises(ForeignFolderError, match=r"final: holds 1 file\(s\) .*\(notes\.md\)"):
            check_replaceable(out / "final", writer)
    assert (out / inside / "notes.md").read_bytes() == USERS


@pytest.mark.reliability("ownership")
def test_the_tokenize_stage_refuses_before_any_work(tmp_path, tiny_data_config):
    out = tmp_path / "tokenized"
    with atomic_dir(out, tokenize.WRITER) as tmp:
        (tmp / "tokenizer").mkdir()
        (tmp / "tokenizer" / "tokenizer.json").write_text("{}")
    (out / "tokenizer" / "vocab-notes.txt").write_bytes(USERS)
    with pytest.raises(ForeignFolderError, match=r"tokenizer/vocab-notes\.txt"):
        tokenize.tokenize_corpus(tiny_data_config(), 0, out, progress=False)
    assert (out / "tokenizer" / "vocab-notes.txt").read_bytes() == USERS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenized"]


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_users_dot_old_beside_an_output_is_kept(tmp_path, kind):
    out = tmp_path / "final"
    old = tmp_path / ".final.old"
    if kind == "file":
        old.write_bytes(USERS)
    else:
        old.mkdir()
        (old / "weights.bin").write_bytes(USERS)
    for _ in range(2):  # written, then replaced: a swap, with its old copy
        with atomic_dir(out, "adloco train") as tmp:
            (tmp / "model.safetensors").write_bytes(b"weights")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".final.old", "final"]
    assert (old.read_bytes() if kind == "file" else (old / "weights.bin").read_bytes()) == USERS
    assert not is_own_temporary("final", ".final.old")


@pytest.mark.reliability("ownership")
def test_another_stages_output_named_as_data_raw_dir_is_kept(tmp_path):
    # Another experiment's base model, all of it adloco's, given as data.raw_dir.
    base = tmp_path / "other" / "base"
    with atomic_dir(base, "adloco pretrain", "--out") as tmp:
        (tmp / "model").mkdir()
        (tmp / "model" / "model.safetensors").write_bytes(USERS)
        (tmp / "base.json").write_text('{"model_dir": "model"}')
    before = _snapshot(base)
    with pytest.raises(ForeignFolderError) as refused:
        corpus.prepare_wiki_corpus(base, max_documents=3)
    message = str(refused.value)
    assert f"{base}: written by adloco pretrain, not adloco prepare-corpus" in message
    assert OWNED_LIST in message and "base.json" in message
    assert _snapshot(base) == before


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize("change", [b"", b"weights!", b"weights and more"])
def test_a_listed_file_whose_size_changed_is_kept(tmp_path, change):
    # 7 bytes when written: emptied, grown by one, grown by more (the same
    # size edited in place passes, as docs/reliability.md says).
    out = tmp_path / "final"
    with atomic_dir(out, "adloco train") as tmp:
        (tmp / "model.safetensors").write_bytes(b"weights")
    (out / "model.safetensors").write_bytes(change)
    with pytest.raises(ForeignFolderError) as refused:
        with atomic_dir(out, "adloco train", "--out"):
            pytest.fail("the work must not start")
    assert (
        f"--out {out}: 1 file(s) changed since adloco train wrote them (model.safetensors; "
        f"model.safetensors is {len(change)} bytes, listed at 7)"
    ) in str(refused.value)
    assert (out / "model.safetensors").read_bytes() == change


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize(
    ("manifest", "why"),
    [
        ({"files": ["notes.txt"]}, "an older adloco's list"),  # an older adloco's, or copied
        ({"written_by": "me", "files": {"notes.txt": {"size_bytes": 5}}}, "names 'me'"),
        ({"written_by": "adloco train", "files": ["notes.txt"]}, "lists no size"),
        ({"written_by": "adloco train", "files": {"notes.txt": {"size_bytes": "5"}}}, "no size"),
        ([], "names no writer"),
        ("{", "does not read as JSON"),
    ],
)
def test_a_manifest_adloco_did_not_write_is_refused(tmp_path, manifest, why):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_bytes(b"notes")
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (out / OWNED_LIST).write_text(text)
    with pytest.raises(ForeignFolderError) as refused:
        check_replaceable(out, "adloco train", "--out")
    message = str(refused.value)
    assert message.startswith(f"--out {out}: its {OWNED_LIST} is not a list adloco wrote (")
    assert why in message and "notes.txt" in message
    assert message.endswith(
        "if it is an older adloco's output, move or delete it (adloco writes it again)"
    )
    assert (out / "notes.txt").read_bytes() == b"notes" and (out / OWNED_LIST).read_text() == text


@pytest.mark.reliability("ownership")
def test_a_folder_without_a_manifest_says_to_move_or_delete_it(tmp_path):
    # What an adloco older than the manifest left, or a folder of the user's.
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "curves.png").write_bytes(USERS)
    with pytest.raises(ForeignFolderError) as refused:
        check_replaceable(out, "adloco report", "--out")
    assert str(refused.value) == (
        f"--out {out}: holds 1 file(s) adloco did not write (figures/curves.png) and no "
        f"{OWNED_LIST}, adloco's list of what it wrote (a folder of yours, or the output of an "
        "adloco older than that list), which writing this output would delete; choose a new or "
        "empty folder, or, if it is an older adloco's output, move or delete it (adloco writes "
        "it again)"
    )
    assert (out / "figures" / "curves.png").read_bytes() == USERS


@pytest.mark.reliability("ownership")
def test_a_rerun_over_its_own_output_replaces_it(tmp_path):
    # prepare-corpus twice, the second with fewer files; Snakemake's stamp inside.
    raw = tmp_path / "raw"
    corpus.prepare_wiki_corpus(raw, max_documents=3, documents_per_file=1)
    assert len(list(raw.glob("c4-train.*.json.gz"))) == 3
    listed = json.loads((raw / OWNED_LIST).read_text())
    assert listed["written_by"] == corpus.WRITER
    assert listed["files"] == {
        name: {"size_bytes": os.path.getsize(raw / name)}
        for name in os.listdir(raw)
        if name != OWNED_LIST
    }
    (raw / ".snakemake_timestamp").write_text("")
    corpus.prepare_wiki_corpus(raw, max_documents=3)
    assert sorted(os.listdir(raw)) == [
        OWNED_LIST,
        "SOURCE.json",
        "c4-train.00000-of-00001.json.gz",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]


@pytest.mark.reliability("ownership")
def test_a_clones_report_folder_holding_gits_files_is_replaced(tmp_path):
    # A fresh clone holds the report's metrics.json and median_curves.csv (kept
    # in git, .gitignore lets them through) but not the manifest, which DVC caches.
    from adloco.core import paths
    from adloco.report import WRITER
    from adloco.report.tables.dvc_files import MEDIAN_CURVES_FILE, METRICS_FILE

    assert paths.REPORT_FILES_IN_GIT == (METRICS_FILE, MEDIAN_CURVES_FILE)
    ignore = (Path(__file__).parents[2] / ".gitignore").read_text().splitlines()
    kept = [line for line in ignore if line.startswith("!/results/*/report/") and line[-1] != "/"]
    assert kept == [f"!/results/*/report/{name}" for name in paths.REPORT_FILES_IN_GIT]
    out = tmp_path / "report"
    out.mkdir()
    for name in paths.REPORT_FILES_IN_GIT:
        (out / name).write_text("as committed")
    with atomic_dir(out, WRITER, "--out", paths.REPORT_FILES_IN_GIT) as tmp:
        (tmp / METRICS_FILE).write_text("{}")
    assert sorted(os.listdir(out)) == [OWNED_LIST, METRICS_FILE]
    (out / "notes.txt").write_bytes(USERS)
    with pytest.raises(ForeignFolderError, match=r"holds 1 file\(s\) adloco did not write \(notes"):
        check_replaceable(out, WRITER, "--out", paths.REPORT_FILES_IN_GIT)
    assert (out / "notes.txt").read_bytes() == USERS
