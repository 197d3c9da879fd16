"""scripts/fingerprint.py: this machine computes the committed numbers to the bit.

The fingerprint (tests/fixtures/fingerprint.json) holds the test preset's
losses, perplexities and final weights' sha256 and a short run of the default
model, computed under each pinned mode (adloco.core.numerics): portable's
(fingerprint.json, any x86-64 CPU with AVX2) and fast's, one per MKL branch
(fingerprint-fast-<branch>.json; a CPU whose branch has none skips, saying so).
A fresh process computes them again here; a difference names each number that moved.
"""

from __future__ import annotations

import importlib.util
import json
import math
import platform
import sys
from pathlib import Path

import pytest

from adloco.core import numerics
from numerics_modes import run_in_mode

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "fingerprint.py"


@pytest.fixture(scope="module")
def fp():
    spec = importlib.util.spec_from_file_location("fingerprint", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_differences_name_every_number_that_moved(fp):
    committed = {
        "numerics": {"torch": "2.0"},
        "runs": {"a": {"rows": [[1, 0, 5.25, None]], "sha": "ab"}},
        "loss": 7.5,
    }
    assert fp.differences(committed, json.loads(json.dumps(committed))) == []
    moved = json.loads(json.dumps(committed))
    moved["runs"]["a"]["rows"][0][2] = math.nextafter(5.25, 6.0)  # one ulp
    moved["runs"]["a"]["sha"] = "cd"
    moved["numerics"]["torch"] = "2.1"  # shown, not compared
    del moved["loss"]
    moved["new"] = 1
    assert fp.differences(committed, moved) == [
        "loss: missing (committed 7.5)",
        "new: new (1)",
        f"runs.a.rows[0][2]: committed 5.25, now {math.nextafter(5.25, 6.0)!r}",
        "runs.a.sha: committed 'ab', now 'cd'",
    ]
    # 1 and 1.0 are equal numbers but not the same record
    assert fp.differences({"x": 1}, {"x": 1.0}) == ["x: committed 1, now 1.0"]
    message = fp.report(committed, moved)
    assert message.startswith("4 number(s) of the fingerprint drifted from fingerprint.json:")
    assert "now.torch: '2.1'" in message and fp.REGENERATE in message


def committed_fingerprints(fp) -> dict[Path, dict]:
    """Every committed fingerprint: portable's and one per MKL branch in fast mode."""
    paths = [fp.FIXTURE, *sorted(fp.FIXTURE.parent.glob("fingerprint-fast-*.json"))]
    return {path: json.loads(path.read_text()) for path in paths}


def test_each_fixture_was_made_under_its_modes_rule(fp):
    found = committed_fingerprints(fp)
    assert any(doc["numerics"]["mode"] == "fast" for doc in found.values())
    for path, doc in found.items():
        committed = doc["numerics"]
        assert committed["pinned_before_torch"], path
        mode = "portable" if path == fp.FIXTURE else "fast"
        assert committed["mode"] == mode, path
        assert fp.fixture(mode, committed["mkl_branch"]) == path
        flags = frozenset({"avx2", "fma"} if committed["cpu_capability"] == "AVX2" else ())
        rule = numerics.pinned_environment(flags, committed["machine"], 1, mode)
        assert committed["environment"] == {k: rule.get(k) for k in numerics.VARIABLES}, path
        assert committed["intra_op_threads"] == numerics.DEFAULT_THREADS


@pytest.mark.heavy
@pytest.mark.parametrize("mode", ["portable", "fast"])
def test_this_machine_computes_the_committed_fingerprint(fp, tmp_path, mode):
    import torch  # noqa: F401  (mkl_branch asks the MKL torch loaded)

    pinned = numerics.pinned_environment(numerics.cpu_flags(), platform.machine(), 1, mode)
    expected = fp.fixture(mode, numerics.mkl_branch())
    if not expected.is_file():
        pytest.skip(
            f"no fast-mode fingerprint for this CPU's MKL branch {numerics.mkl_branch()} "
            f"({expected.name}): its floats are not checked here; record them with "
            "scripts/fingerprint.py --mode fast --write"
        )
    committed = json.loads(expected.read_text())
    if pinned["ATEN_CPU_CAPABILITY"].upper() != committed["numerics"]["cpu_capability"]:
        pytest.skip(
            f"this CPU pins {pinned['ATEN_CPU_CAPABILITY']}, the fingerprint was made "
            f"under {committed['numerics']['cpu_capability']}"
        )
    out, keep = tmp_path / "fingerprint.json", tmp_path / "run"
    run_in_mode([sys.executable, str(SCRIPT), "--json", str(out), "--keep", str(keep)], mode)
    got = json.loads(out.read_text())
    assert got["numerics"]["mode"] == mode
    assert {k: got["numerics"]["environment"][k] for k in pinned} == pinned
    assert not fp.report(committed, got, expected), fp.report(committed, got, expected)
    # Every output that trained records the numerics it was trained under.
    recorded = {k: v for k, v in got["numerics"].items() if k != "transformers"}
    written = [keep / "base" / "base.json", *sorted((keep / "runs").glob("*/summary.json"))]
    assert len(written) == 1 + len(got["test_preset"]["runs"])
    for path in written:
        assert json.loads(path.read_text())["numerics"] == recorded, path
