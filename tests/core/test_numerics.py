"""adloco.core.numerics: the modes' CPU float paths, the thread rule, the entry point pins first."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from adloco.core import numerics

AVX2_FLAGS = frozenset({"sse4_1", "avx", "avx2", "fma", "avx512f"})


def test_avx2_cpu_pins_avx2_and_mkl_compatible_when_portable():
    env = numerics.pinned_environment(AVX2_FLAGS, "x86_64", 3, "portable")
    assert env == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_DYNAMIC": "FALSE",
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
    }
    assert list(env) == list(numerics.VARIABLES)


def test_fast_mode_differs_from_portable_in_mkls_branch_alone():
    fast = numerics.pinned_environment(AVX2_FLAGS, "x86_64", 3, "fast")
    portable = numerics.pinned_environment(AVX2_FLAGS, "x86_64", 3, "portable")
    assert fast == {**portable, "MKL_CBWR": "AUTO"}
    assert numerics.pinned_environment(AVX2_FLAGS, "x86_64", 3) == fast  # the default mode
    assert numerics.pinned_environment(frozenset(), "aarch64", 1, "fast") == (
        numerics.pinned_environment(frozenset(), "aarch64", 1, "portable")
    )
    with pytest.raises(ValueError, match="no pinned environment in mode 'native'"):
        numerics.pinned_environment(AVX2_FLAGS, "x86_64", 1, "native")


def test_cpu_without_avx2_or_fma_takes_the_scalar_paths():
    for flags in (frozenset({"sse4_1", "avx"}), frozenset({"avx2"})):  # AVX2 needs FMA too
        env = numerics.pinned_environment(flags, "AMD64", 1, "portable")
        assert env["ATEN_CPU_CAPABILITY"] == "default"
        assert env["ONEDNN_MAX_CPU_ISA"] == "SSE41"
        assert env["MKL_CBWR"] == "COMPATIBLE"


def test_other_architectures_pin_aten_and_threads_only():
    env = numerics.pinned_environment(frozenset({"asimd", "sve"}), "aarch64", 1)
    assert env == {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def test_cpu_flags_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu sse avx2 fma\n\n")
    assert numerics.cpu_flags(cpuinfo) == {"fpu", "sse", "avx2", "fma"}
    assert numerics.cpu_flags(tmp_path / "missing") == frozenset()
    cpuinfo.write_text("processor\t: 0\n")
    assert numerics.cpu_flags(cpuinfo) == frozenset()


def test_cpu_vendor_and_mkl_branch_names(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: avx2 fma\n")
    assert numerics.cpu_vendor(cpuinfo) == "AuthenticAMD"
    assert numerics.cpu_vendor(tmp_path / "missing") == ""
    # An Intel CPU: MKL names its branch; another vendor's: MKL's AUTO, named by the ISA.
    assert numerics.branch_name(12, "GenuineIntel", AVX2_FLAGS) == "GenuineIntel-AVX512"
    assert numerics.branch_name(10, "GenuineIntel", AVX2_FLAGS) == "GenuineIntel-AVX2"
    assert numerics.branch_name(2, "AuthenticAMD", AVX2_FLAGS) == "AuthenticAMD-AUTO-avx512"
    assert numerics.branch_name(2, "AuthenticAMD", frozenset({"avx2"})) == "AuthenticAMD-AUTO-avx2"
    assert numerics.branch_name(99, "", frozenset()) == "unknown-branch99"


def test_mkl_branch_of_this_machine():
    import torch

    got = numerics.mkl_branch()
    if not torch.backends.mkl.is_available():
        assert got is None
    else:
        assert got.startswith(numerics.cpu_vendor() or "unknown")


def test_mode_and_its_errors():
    assert numerics.mode({}) == "fast"
    assert numerics.mode({"ADLOCO_NUMERICS": ""}) == "fast"
    assert numerics.mode({"ADLOCO_NUMERICS": " Native "}) == "native"
    assert numerics.mode({"ADLOCO_NUMERICS": "portable"}) == "portable"
    assert numerics.mode({"ADLOCO_NUMERICS": "pinned"}) == "portable"  # its old name
    with pytest.raises(
        ValueError, match=r"ADLOCO_NUMERICS='quick': expected fast, portable or native"
    ):
        numerics.mode({"ADLOCO_NUMERICS": "quick"})


def test_threads_default_to_one_when_pinned_and_to_torch_when_native():
    assert numerics.threads_for(4, {}) == 4
    assert numerics.threads_for(None, {}) == numerics.DEFAULT_THREADS == 1
    assert numerics.threads_for(None, {"ADLOCO_NUMERICS": "portable"}) == 1
    assert numerics.threads_for(None, {"ADLOCO_NUMERICS": "native"}) is None
    assert numerics.threads_for(2, {"ADLOCO_NUMERICS": "native"}) == 2


def test_pin_leaves_the_environment_alone_once_torch_is_loaded(monkeypatch):
    import torch  # noqa: F401  (loaded, as in a test calling adloco.cli.main)

    monkeypatch.setattr(numerics, "_pinned", None)
    environ: dict[str, str] = {}
    assert numerics.pin(None, environ, machine="x86_64", flags=AVX2_FLAGS) == {}
    assert environ == {}  # children would run other paths than this process
    assert numerics._pinned == {}  # and the record says this one is not pinned
    # A process started under the pinned values (a parent pinned them) is pinned.
    environ = numerics.pinned_environment(AVX2_FLAGS, "x86_64", 2)
    assert numerics.pin(2, dict(environ), machine="x86_64", flags=AVX2_FLAGS) == {}
    assert numerics._pinned == environ
    # Started under portable's paths, a fast process is not pinned to its own.
    portable = numerics.pinned_environment(AVX2_FLAGS, "x86_64", 2, "portable")
    assert numerics.pin(2, dict(portable), machine="x86_64", flags=AVX2_FLAGS) == {}
    assert numerics._pinned == {}
    portable["ADLOCO_NUMERICS"] = "portable"
    assert numerics.pin(2, dict(portable), machine="x86_64", flags=AVX2_FLAGS) == {}
    assert numerics._pinned == {k: v for k, v in portable.items() if k != "ADLOCO_NUMERICS"}
    # The threads are torch.set_num_threads's; another count leaves the paths pinned.
    assert numerics.pin(4, dict(environ), machine="x86_64", flags=AVX2_FLAGS) == {}
    assert numerics._pinned["OMP_NUM_THREADS"] == "4"
    environ["ATEN_CPU_CAPABILITY"] = "avx512"
    assert numerics.pin(2, dict(environ), machine="x86_64", flags=AVX2_FLAGS) == {}
    assert numerics._pinned == {}
    assert numerics.pin(None, {"ADLOCO_NUMERICS": "native"}, machine="x86_64") == {}
    assert numerics._pinned == {}


def _child(first: str, **env: str) -> dict:
    """Run ``first`` in a fresh interpreter, then import torch and say which paths it took."""
    code = (
        "import json, os, sys\n"
        f"{first}\n"
        "import torch\n"
        "from adloco.core import numerics\n"
        "print(json.dumps({'capability': torch.backends.cpu.get_cpu_capability(),\n"
        "    'record': numerics.record(),\n"
        "    'threads': torch.get_num_threads(),\n"
        "    'env': {k: os.environ.get(k) for k in "
        f"{numerics.VARIABLES!r}" + "}}))\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in numerics.VARIABLES}
    base.pop("ADLOCO_NUMERICS", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("setting", "mode"), [(None, "fast"), ("portable", "portable"), ("pinned", "portable")]
)
def test_cli_entry_pins_before_torch_loads(tmp_path, setting, mode):
    # A stage that fails on its configuration, after main() has pinned.
    argv = ["dvc-params", "--preset", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "p")]
    env = {} if setting is None else {"ADLOCO_NUMERICS": setting}
    got = _child(f"from adloco.cli import main\nmain({argv!r})", **env)
    want = numerics.pinned_environment(numerics.cpu_flags(), platform.machine(), 1, mode)
    assert got["env"] == {k: want.get(k) for k in numerics.VARIABLES}
    assert got["capability"] == want["ATEN_CPU_CAPABILITY"].upper()
    assert got["threads"] == 1
    # The mode and the variables each process ran under are in its record.
    assert got["record"]["mode"] == mode and got["record"]["pinned_before_torch"]
    assert got["record"]["environment"] == got["env"]


@pytest.mark.heavy
def test_native_mode_sets_nothing(tmp_path):
    argv = ["dvc-params", "--preset", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "p")]
    got = _child(f"from adloco.cli import main\nmain({argv!r})", ADLOCO_NUMERICS="native")
    assert got["env"] == dict.fromkeys(numerics.VARIABLES)
    assert got["record"]["mode"] == "native" and not got["record"]["pinned_before_torch"]
    # torch's own choices: those of a process that never saw adloco
    plain = _child("pass")
    assert (got["capability"], got["threads"]) == (plain["capability"], plain["threads"])
