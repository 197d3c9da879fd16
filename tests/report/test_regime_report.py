"""``adloco regimes`` (report/regime_report.py) and the replay script: runs replayed elsewhere."""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from results_folder import analysed

from adloco.cli import main
from adloco.config import load_config
from adloco.core import io
from adloco.report.analysis.claims import VERDICTS, fmt_p, fmt_ratio
from disk_faults import full_disk


@pytest.mark.heavy
def test_adloco_regimes_writes_the_table_and_figures(engine_fixture, tmp_path, capsys):
    f = engine_fixture
    common = ["--config", str(f / "config.yaml"), "--runs", str(f / "runs"),
              "--calibration", str(f / "calibration")]  # fmt: skip
    out = tmp_path / "byod"
    rc = main(["regimes", *common, "--roofline", "fast=0.001,8",
               "--network", "ib=100,0.00001", "--out", str(out)])  # fmt: skip
    assert rc == 0
    with open(out / "regimes.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    mine = [r for r in rows if r["clock"] == "device:fast"]
    assert {r["network"] for r in mine} == {"", "ib"}
    # Claim 1 against every baseline alone, beside DiLoCo and the best one.
    assert {r["against"] for r in mine} >= {"diloco", "best", "baseline:diloco-big",
                                             "baseline:localsgd"}  # fmt: skip
    assert any(r["clock"] == "roofline" and r["saturation_batch"] == "4" for r in rows)
    assert (out / "figures" / "regimes.png").is_file()
    assert (out / "figures" / "regime_map.png").is_file()
    doc = json.loads((out / "regimes.json").read_text())
    assert doc["devices"][0]["name"] == "fast" and "memory" in doc["sweeps"]["brought devices"][
        "cannot_vary"]  # fmt: skip
    # A measured curve that stops short of the runs' passes: refused, naming device and size.
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"device": "sim", "gpu_name": "Tiny GPU", "model_parameters": 3632,
                                 "step_time_measured": {"batches": [1, 2],
                                                        "fwd_bwd_s": [0.1, 0.2]}}))  # fmt: skip
    rc = main(["regimes", *common, "--device", str(short), "--out", str(tmp_path / "no")])
    assert rc == 1
    assert "device Tiny GPU" in capsys.readouterr().err


def test_the_replay_script_times_this_device_at_the_runs_max_batch(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "scripts" / "replay-on-this-device.py"
    spec = importlib.util.spec_from_file_location("replay_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from adloco.config import read_yaml

    path = Path(__file__).parents[2] / "config" / "config.yaml"
    config = load_config(path)
    (tmp_path / "cpu-sim.json").write_text(json.dumps({"device": "cpu-sim", "max_batch": 5}))
    measured = script.calibrate_config(path, tmp_path, "cuda")
    (device,) = measured["cluster"]["devices"]
    # The runs' max batch fixed (no search; timing up to nodes_per_device x 5 sequences),
    # the curve measured here, memory enough to time it.
    assert (device["kind"], device["max_batch"], device["step_time"]["model"]) == (
        "cuda",
        5,
        "measured",
    )
    assert device["memory_gib"] == script.TIMING_MEMORY_GIB
    assert measured["model"] == read_yaml(path)["model"]
    assert config.cluster.devices[0].kind == "cpu"
    # The file written is a valid configuration whose device is the measured one.
    written = tmp_path / "calibrate.yaml"
    written.write_text(yaml.safe_dump(measured))
    (typed,) = load_config(written).cluster.devices
    assert (typed.kind, typed.max_batch, typed.step_time.scale) == ("cuda", 5, 1.0)


DOCS = Path(__file__).parents[2] / "docs" / "calibration.md"
# A curve measured "on another machine" for the engine fixture's model (3632 parameters,
# 12 tokens), covering every pass the fixture's runs logged.
MY_GPU = {"device": "sim", "model_parameters": 3632, "seq_len_tokens": 12,
          "step_time_measured": {"batches": [1, 2, 4, 8], "fwd_bwd_s": [0.002, 0.003, 0.005, 0.009],
                                 "update_s": 0.0005}}  # fmt: skip


def docs_command(program: str) -> list[str]:
    """The arguments of the command docs/calibration.md writes for ``program``, as written."""
    lines = DOCS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(program + " "))
    words = []
    for line in lines[start:]:
        words.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(words))[1:]


def docs_layout(root: Path, fixture: Path, references_and_base, level: float = 0.75) -> None:
    """The folders the docs' replay command names, from the engine fixture, under ``root``.

    Targets relative to the base model (64, so the main target is 64 × ``level``), as the
    default configuration has them; the base model where the pipeline writes it, beside
    the runs.
    """
    config = yaml.safe_load((fixture / "config.yaml").read_text())
    config["report"]["targets"] = {"relative_to": "base", "levels": [level]}
    (root / "config").mkdir()
    (root / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    results = root / "results" / "default"
    shutil.copytree(fixture / "runs", results / "runs")
    shutil.copytree(fixture / "calibration", results / "calibration")
    data, base = references_and_base(root / "inputs")
    shutil.copytree(data, root / "data" / "tokenized" / "wiki-offline")
    shutil.copytree(base, results / "base")
    (root / "my-gpu.json").write_text(json.dumps(MY_GPU))


def verdict_rows(out: Path, clock: str, target: float) -> dict:
    """regimes.csv's rows of ``clock`` at ``target``, slots concurrent, by (network, against)."""
    with open(out / "regimes.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {
        (r["network"], r["against"], float(r["bandwidth_gbit_s"])): r
        for r in rows
        if r["clock"] == clock and r["slot_sharing"] == "concurrent"
        and math.isclose(float(r["target_perplexity"]), target)
    }  # fmt: skip


@pytest.mark.heavy
def test_the_docs_replay_command_works_as_written(
    engine_fixture, references_and_base, tmp_path, monkeypatch, capsys
):
    docs_layout(tmp_path, engine_fixture, references_and_base)
    monkeypatch.chdir(tmp_path)
    argv = docs_command("adloco regimes")
    assert "--base" not in argv  # the base model is found beside --runs
    assert main(argv) == 0
    out = Path(argv[argv.index("--out") + 1])
    printed = capsys.readouterr().out.splitlines()
    # The target: 0.75 × the base model's 64.
    assert printed[0] == (
        "Target: perplexity 48, the main target (fixed before the runs: 0.75 × the base "
        "model's validation perplexity 64 (report.targets))."
    )
    rows = verdict_rows(out, "device:my-gpu", 48.0)
    heads = [line for line in printed if not line.startswith("  ")][2:]
    assert heads == [
        "my-gpu on the cluster's network (1 Gbit/s, latency 0.001 s):",
        "my-gpu on ib (100 Gbit/s, latency 5e-06 s):",
    ]
    lines = [line for line in printed if line.startswith("  against ")]
    assert len(lines) == 4
    # Against DiLoCo, then the best baseline, on the cluster's network, then on ib.
    where = [("", 1.0), ("", 1.0), ("ib", 100.0), ("ib", 100.0)]
    for line, (network, bandwidth) in zip(lines, where, strict=True):
        against = "diloco" if "against DiLoCo" in line else "best"
        row = rows[(network, against, bandwidth)]
        # The cell's verdict, ratio and p, in the words of the report's claims.
        assert row["verdict"] in VERDICTS and f": {row['verdict']} — " in line
        assert f"needs {fmt_ratio(float(row['ratio_estimate']))}× the simulated time" in line
        assert f"p = {fmt_p(float(row['p_adloco_faster']))}" in line
    assert lines[0].startswith("  against DiLoCo (diloco): ")
    assert lines[1].startswith("  against the best baseline (diloco): ")
    assert (out / "figures" / "regimes.png").is_file()


@pytest.mark.heavy
def test_the_replay_on_the_runs_own_curve_says_what_the_report_says(
    engine_fixture, references_and_base, tmp_path, capsys
):
    from adloco.report.analysis.claims import evaluate_claims
    from adloco.report.inputs.references import load_base, load_references

    f = engine_fixture
    data, base = references_and_base(tmp_path / "inputs")
    rc = main(["regimes", "--config", str(f / "config.yaml"), "--runs", str(f / "runs"),
               "--calibration", str(f / "calibration"), "--data", str(data), "--base", str(base),
               "--out", str(tmp_path / "out")])  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr().out.splitlines()
    config = load_config(f / "config.yaml")
    runs, roles, ladder, settings = analysed(
        config, f / "runs", load_base(base), load_references(data)
    )
    claim = evaluate_claims(runs, roles, ladder, settings)[0]
    at_main = [c for c in claim.comparisons if c.target == ladder.main]
    diloco = next(c for c in at_main if c.against == "diloco")
    best = next(c for c in at_main if c.against == "best baseline")
    assert printed[2] == "the runs' own curve on the cluster's network (1 Gbit/s, latency 0.001 s):"
    assert printed[3] == f"  against DiLoCo (diloco): {diloco.verdict} — {diloco.reason}"
    assert printed[4] == (
        f"  against the best baseline ({best.baseline}): {best.verdict} — {best.reason}"
    )


@pytest.mark.heavy
def test_a_run_that_never_reaches_the_target_is_censored_not_a_ratio_of_0(engine_fixture, tmp_path):
    from adloco.report.analysis.claims import Context, values_of
    from adloco.report.analysis.seed_stats import median

    f = engine_fixture
    out = tmp_path / "out"
    rc = main(["regimes", "--config", str(f / "config.yaml"), "--runs", str(f / "runs"),
               "--calibration", str(f / "calibration"), "--out", str(out)])  # fmt: skip
    assert rc == 0
    with open(out / "regimes.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["verdict"] for r in rows} <= set(VERDICTS)
    assert not any(r[k] in ("0", "0.0") for r in rows for k in ("ratio_estimate", "ratio_low"))
    # The runs' own setting: the logged times say which baseline never gets there.
    config = load_config(f / "config.yaml")
    runs, roles, ladder, settings = analysed(config, f / "runs")
    ctx = Context(runs, roles, ladder, settings, "")
    own = [r for r in rows if r["own_setting"] == "True" and r["against"].startswith("baseline:")]
    censored = 0
    for r in own:
        name, target = r["baseline"], float(r["target_perplexity"])
        never = math.isinf(median(list(values_of(ctx, name, "sim_time_s", target).values())))
        assert (r["censored"] == "baseline") == never
        if never:
            censored += 1
            assert r["baseline_median_s"] == "" and r["ratio_estimate"] == ""
    assert censored >= 1  # localsgd at the lower targets


@pytest.mark.reliability("replay inputs")
@pytest.mark.parametrize(
    "fault, message",
    [
        ("another model", "my-gpu.json: measured with model_parameters 999, the runs' model "
         "has 3632: its curve times other passes than the runs logged; time it with `adloco "
         "calibrate` on the runs' configuration"),
        ("no model", "my-gpu.json: has no model_parameters, so the model its curve was timed on "
         "is unknown; time it with `adloco calibrate`"),
        ("no base", "report.targets.relative_to: base needs the base model's perplexity, and "
         "results/default/base/base.json (beside --runs) is not there; pass --base"),
        ("binary", "my-gpu.json: not a JSON text file (byte 0 is not UTF-8); write it again "
         "with the adloco stage that made it"),
        ("nested", "my-gpu.json: nests too deeply to read as JSON; write it again with the "
         "adloco stage that made it"),
    ],
)  # fmt: skip
def test_a_replay_input_that_cannot_be_used_is_refused_in_one_line(
    fault, message, engine_fixture, references_and_base, tmp_path, monkeypatch, capsys
):
    docs_layout(tmp_path, engine_fixture, references_and_base)
    monkeypatch.chdir(tmp_path)
    device = dict(MY_GPU)
    if fault == "another model":
        device["model_parameters"] = 999
    elif fault == "no model":
        del device["model_parameters"]
    elif fault == "no base":
        shutil.rmtree(tmp_path / "results" / "default" / "base")
    (tmp_path / "my-gpu.json").write_text(json.dumps(device))
    if fault == "binary":
        (tmp_path / "my-gpu.json").write_bytes(bytes(range(128, 256)))
    elif fault == "nested":
        (tmp_path / "my-gpu.json").write_text("[" * 200_000 + "]" * 200_000)
    argv = docs_command("adloco regimes")
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("adloco regimes: error: ") and message in line
    assert not (tmp_path / argv[argv.index("--out") + 1]).exists()


# ------------------------------------------------------------------ the replay script
def replay_script():
    import importlib.util

    path = Path(__file__).parents[2] / "scripts" / "replay-on-this-device.py"
    spec = importlib.util.spec_from_file_location("replay_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def timed_here(script, monkeypatch) -> list[list[str]]:
    """The script's ``adloco calibrate`` writes MY_GPU as the measured curve; the rest runs."""
    calls = []

    def adloco(argv: list[str]) -> int:
        calls.append(argv)
        if argv[0] == "calibrate":
            Path(argv[argv.index("--out") + 1]).write_text(json.dumps(MY_GPU))
            return 0
        return main(argv)

    monkeypatch.setattr(script, "adloco", adloco)
    return calls


@pytest.mark.reliability("replay inputs")
@pytest.mark.parametrize("name", ["../../../../x", "../..", "a/b", ".hidden", "my gpu", ""])
def test_the_replay_script_refuses_a_name_that_is_not_one_and_writes_nothing(
    name, engine_fixture, references_and_base, tmp_path, monkeypatch, capsys
):
    work = tmp_path / "work"
    work.mkdir()
    docs_layout(work, engine_fixture, references_and_base)
    (work / "calibrate.yaml").write_text("the user's own file\n")
    monkeypatch.chdir(work)
    script = replay_script()
    calls = timed_here(script, monkeypatch)
    before = tree(tmp_path)
    assert script.main(["--config", "config/config.yaml", "--kind", "cpu", "--name", name]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"replay-on-this-device: error: --name {name!r}: a device name holds "
                           "only letters, digits, '-' and '_'"), line  # fmt: skip
    assert "; choose another, e.g. --name " in line, line
    assert tree(tmp_path) == before and calls == []


@pytest.mark.heavy
@pytest.mark.reliability("replay inputs")
def test_the_replay_script_writes_its_folder_whole_and_nothing_outside_it(
    engine_fixture, references_and_base, tmp_path, monkeypatch, capsys
):
    from adloco.core.io import OWNED_LIST

    work = tmp_path / "work"
    work.mkdir()
    docs_layout(work, engine_fixture, references_and_base)
    config = yaml.safe_load((work / "config" / "config.yaml").read_text())
    config["experiment"], config["data"]["dataset"] = "default", "wiki-offline"  # the layout's
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(work)
    script = replay_script()
    calls = timed_here(script, monkeypatch)
    before = tree(tmp_path)
    args = ["--config", "config/config.yaml", "--kind", "cpu", "--name", "my-gpu"]
    assert script.main(args) == 0
    out = Path("results/default/replay/my-gpu")
    after = tree(tmp_path)
    prefix = f"work/{out.as_posix()}/"
    assert {k: v for k, v in after.items() if not k.startswith(prefix)} == before
    assert sorted(k.removeprefix(prefix) for k in after if k.startswith(prefix)) == [
        OWNED_LIST, "calibrate.yaml", "my-gpu.json", f"regimes/{OWNED_LIST}",
        "regimes/figures/regime_map.png", "regimes/figures/regimes.png", "regimes/regimes.csv",
        "regimes/regimes.json",
    ]  # fmt: skip
    assert [c[0] for c in calls] == ["calibrate", "regimes"]
    # Everything it ran wrote into a temporary folder beside --out, swapped in whole.
    written = [Path(c[c.index("--out") + 1]) for c in calls]
    assert all(p.parent.parent == out.parent and p.parent.name != out.name for p in written)
    assert load_config(out / "calibrate.yaml").cluster.devices[0].step_time.model == "measured"
    # A folder holding a file of the user's (their own calibrate.yaml): refused, untouched.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "calibrate.yaml").write_text("the user's own file\n")
    before = tree(tmp_path)
    capsys.readouterr()
    assert script.main([*args, "--out", str(mine)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"replay-on-this-device: error: --out {mine}: holds 1 file(s) "), line
    assert tree(tmp_path) == before and len(calls) == 2


# ``adloco regimes`` writes its folder whole: a new one swapped in, never old and new mixed.
WRITTEN = ["regimes.csv", "regimes.json", "figures/regimes.png", "figures/regime_map.png"]


def contents(folder) -> dict[str, bytes]:
    """Every file of ``folder`` but adloco's manifest, by relative path."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != io.OWNED_LIST
    }


def regimes(engine_fixture, out, roofline: str) -> int:
    f = engine_fixture
    args = ["--config", str(f / "config.yaml"), "--runs", str(f / "runs")]
    args += ["--calibration", str(f / "calibration"), "--roofline", roofline]
    return main(["regimes", *args, "--out", str(out)])


@pytest.mark.heavy
@pytest.mark.reliability("disk-full")
def test_a_full_disk_at_the_last_figure_leaves_the_previous_files_whole(
    engine_fixture, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "replay" / "my-gpu"
    assert regimes(engine_fixture, out, "fast=0.001,8") == 0
    before = contents(out)
    assert sorted(before) == sorted(WRITTEN)
    capsys.readouterr()
    # The map is written last, into a temporary folder beside --out.
    with full_disk(out.parent, ("regime_map.png",), monkeypatch):
        # Another device: every file would change; the map, written last, fails.
        assert regimes(engine_fixture, out, "slow=0.01,2") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("adloco regimes: error: "), err
    assert f"no space left to write {out / 'figures' / 'regime_map.png'} (" in err, err
    assert contents(out) == before
    assert [p.name for p in out.parent.iterdir()] == ["my-gpu"]  # no temporary left
    # Written again with room: every file of the new device.
    assert regimes(engine_fixture, out, "slow=0.01,2") == 0
    after = contents(out)
    assert sorted(after) == sorted(WRITTEN)
    assert all(after[name] != before[name] for name in WRITTEN[:2])


class Killed(BaseException):
    """The process killed: nothing after it runs, no clean-up either."""


# Where the swap is killed: before its first rename (--out aside), after it, after the
# second (the new folder in).
KILL_POINTS = ["before moving --out aside", "after moving --out aside", "after moving the new in"]


@pytest.mark.heavy
@pytest.mark.reliability("kills")
@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_kill_during_the_swap_leaves_the_old_or_the_new_files_whole(
    engine_fixture, tmp_path, monkeypatch, point
):
    out = tmp_path / "replay" / "my-gpu"
    assert regimes(engine_fixture, out, "fast=0.001,8") == 0
    old = contents(out)
    reference = tmp_path / "reference"  # what the new replay writes, uninterrupted
    assert regimes(engine_fixture, reference, "slow=0.01,2") == 0
    new = contents(reference)
    assert all(new[name] != old[name] for name in WRITTEN[:2])
    rename, remove = os.replace, shutil.rmtree
    killed = []

    def replace(src, dst):
        aside, new_in = str(src) == str(out), str(dst) == str(out)
        if point == KILL_POINTS[0] and aside:
            killed.append(True)
            raise Killed
        rename(src, dst)
        if (point == KILL_POINTS[1] and aside) or (point == KILL_POINTS[2] and new_in):
            killed.append(True)
            raise Killed

    def rmtree(path, *args, **kwargs):
        if not killed:  # a killed process removes nothing
            remove(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(io.os, "replace", replace)
        patch.setattr(io.shutil, "rmtree", rmtree)
        with pytest.raises(Killed):
            regimes(engine_fixture, out, "slow=0.01,2")
    assert killed == [True]
    # --out is the old replay whole, or the new one whole, or (between the two renames)
    # absent, the old one whole in adloco's temporary beside it: never old and new mixed.
    beside = [p for p in out.parent.iterdir() if p != out]
    assert all(io.is_own_temporary(out.name, p.name) for p in beside)
    whole = {point: old for point in KILL_POINTS[:2]} | {KILL_POINTS[2]: new}
    if out.exists():
        assert contents(out) == whole[point]
    else:
        assert point == KILL_POINTS[1]
        assert old in [contents(p) for p in beside]
    # The next run writes the new replay whole and removes what the kill left.
    assert regimes(engine_fixture, out, "slow=0.01,2") == 0
    assert contents(out) == new
    assert [p.name for p in out.parent.iterdir()] == ["my-gpu"]


@pytest.mark.reliability("replay inputs")
@pytest.mark.parametrize("where", ["the report folder", "inside it", "another stage's folder"])
def test_an_out_that_is_a_report_or_another_stages_folder_is_refused(
    engine_fixture, tmp_path, capsys, where
):
    report = tmp_path / "report"
    report.mkdir()
    files = {"index.html": b"<html>the page</html>", "claims.json": b"{}", "regimes.csv": b"x\n"}
    for name, data in files.items():
        (report / name).write_bytes(data)
    io.write_manifest(report, "adloco report")
    out = {"the report folder": report, "inside it": report / "figures" / "mine"}.get(where)
    if out is None:  # a variance folder
        out = tmp_path / "variance"
        with io.atomic_dir(out, "adloco variance") as tmp:
            (tmp / "variance.json").write_text("{}")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert regimes(engine_fixture, out, "fast=0.001,8") == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"adloco regimes: error: --out {out}: "), line
    if where == "another stage's folder":
        assert "written by adloco variance, not adloco regimes" in line, line
    else:
        inside = "" if out == report else f"inside {report}, "
        assert f": is {inside}a report folder adloco report wrote (index.html, claims.json)" in (
            line
        ), line
        assert "write the replay to a folder of its own" in line, line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (report / "figures").exists()
