"""scripts/compare-results.py: two results folders equal but for wall-time fields."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare-results.py"


@pytest.fixture(scope="module")
def cr():
    spec = importlib.util.spec_from_file_location("compare_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_results(root: Path, wall: float, **changes) -> Path:
    """A small results folder: JSON, JSON Lines, CSV, a binary file, a checkpoint and a log."""
    summary = {"tokens_total": 512, "wall_time_s": wall, "nested": {"train_seconds": wall}}
    summary.update(changes.get("summary", {}))
    rows = [
        {"round": 1, "val_loss": 4.5, "wall_time_s": wall, "stats": {"wall_time_s": wall}},
        {"round": 2, "val_loss": changes.get("val_loss", 4.25), "wall_time_s": 2 * wall},
    ]
    files = {
        "runs/r/seed0/summary.json": json.dumps(summary),
        "runs/r/seed0/metrics.jsonl": "".join(json.dumps(r) + "\n" for r in rows),
        "calibration/cpu.json": json.dumps(
            {"max_batch": 4, "fwd_bwd_repeats_s": [wall, wall], "step_time_measured": wall}
        ),
        "report/table.csv": f"run,perplexity,wall_time_s\nr,{changes.get('ppl', '81.5')},{wall}\n",
        "checkpoints/r/seed0/state.json": json.dumps({"wall_time_s": wall, "round": 2}),
        "logs/train.log": f"took {wall} s\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "runs/r/seed0/weights.bin").write_bytes(changes.get("weights", b"\x00\x01\x02"))
    return root


def _run(cr, capsys, *argv):
    code = cr.main([str(a) for a in argv])
    return code, capsys.readouterr().out.splitlines()


def test_folders_equal_but_for_wall_times(cr, tmp_path, capsys):
    before = _write_results(tmp_path / "a", wall=1.0)
    after = _write_results(tmp_path / "b", wall=7.5)
    code, out = _run(cr, capsys, before, after)
    # 5 files compared (checkpoints/ and the log are skipped), none differs.
    assert (code, out) == (0, ["5 of 5 files equal (0 differ)"])
    assert cr.compare(before, after, frozenset(cr.WALL_TIME_KEYS)) == []


def test_a_result_field_that_differs_is_reported(cr, tmp_path, capsys):
    before = _write_results(tmp_path / "a", wall=1.0)
    after = _write_results(tmp_path / "b", wall=1.0, val_loss=4.26, ppl="81.6")
    code, out = _run(cr, capsys, before, after)
    assert code == 1
    assert out == [
        "differs: report/table.csv",
        "differs: runs/r/seed0/metrics.jsonl",
        "3 of 5 files equal (2 differ)",
    ]


def test_binary_files_compare_byte_for_byte(cr, tmp_path, capsys):
    before = _write_results(tmp_path / "a", wall=1.0)
    after = _write_results(tmp_path / "b", wall=1.0, weights=b"\x00\x01\x03")
    code, out = _run(cr, capsys, before, after)
    assert (code, out) == (
        1,
        ["differs: runs/r/seed0/weights.bin", "4 of 5 files equal (1 differ)"],
    )


def test_files_on_one_side_only(cr, tmp_path, capsys):
    before = _write_results(tmp_path / "a", wall=1.0)
    after = _write_results(tmp_path / "b", wall=1.0)
    (before / "variance").mkdir()
    (before / "variance/estimate.json").write_text("{}")
    (after / "report/extra.txt").write_text("x")
    (after / "checkpoints/r/seed0/more.pt").write_bytes(b"skipped")
    code, out = _run(cr, capsys, before, after)
    assert code == 1
    assert out == [
        f"only in {before}: variance/estimate.json",
        f"only in {after}: report/extra.txt",
        "5 of 7 files equal (2 differ)",
    ]


def test_ignore_replaces_the_default_keys(cr, tmp_path, capsys):
    before = _write_results(tmp_path / "a", wall=1.0, summary={"tokens_total": 1})
    after = _write_results(tmp_path / "b", wall=1.0, summary={"tokens_total": 2})
    code, out = _run(cr, capsys, before, after, "--ignore", "tokens_total")
    assert (code, out) == (0, ["5 of 5 files equal (0 differ)"])
    # With another key only, the wall times count again.
    after2 = _write_results(tmp_path / "c", wall=2.0, summary={"tokens_total": 1})
    code, out = _run(cr, capsys, before, after2, "--ignore", "tokens_total")
    assert code == 1 and len(out) == 5  # every file holding a wall time differs


def test_skip_patterns_and_their_default(cr, tmp_path, capsys):
    before = _write_results(tmp_path / "a", wall=1.0)
    after = _write_results(tmp_path / "b", wall=2.0)
    # With nothing skipped, the checkpoint (wall_time_s is ignored) is equal, the log is not.
    code, out = _run(cr, capsys, before, after, "--skip", "none-such")
    assert (code, out) == (1, ["differs: logs/train.log", "6 of 7 files equal (1 differ)"])
    assert cr.files(before, cr.SKIPPED) == {
        "runs/r/seed0/summary.json",
        "runs/r/seed0/metrics.jsonl",
        "runs/r/seed0/weights.bin",
        "calibration/cpu.json",
        "report/table.csv",
    }
    code, out = _run(cr, capsys, before, after, "--skip", "runs/*", "--skip", "logs/*")
    assert code == 0 and out[-1] == "3 of 3 files equal (0 differ)"


def test_without_removes_keys_at_any_depth(cr):
    value = {"a": 1, "wall_time_s": 2, "b": [{"wall_time_s": 3, "c": {"wall_time_s": 4, "d": 5}}]}
    assert cr.without(value, frozenset({"wall_time_s"})) == {"a": 1, "b": [{"c": {"d": 5}}]}
    assert cr.without([1, "x", None], frozenset({"x"})) == [1, "x", None]  # values are kept


def test_json_that_does_not_parse_compares_as_bytes(cr, tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text('{"wall_time_s": 1,')
    b.write_text('{"wall_time_s": 1,')
    c.write_text('{"wall_time_s": 2,')
    ignored = frozenset(cr.WALL_TIME_KEYS)
    assert cr.same(a, b, ignored)
    assert not cr.same(a, c, ignored)
    # Parsed JSON compares as values: key order and spacing do not matter.
    a.write_text('{"x": 1, "y": [1, 2]}')
    b.write_text('{ "y": [1,2], "x": 1 }')
    assert cr.same(a, b, ignored)
