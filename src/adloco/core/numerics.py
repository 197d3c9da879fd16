"""The CPU float paths every process takes, pinned before torch loads (docs/numerics.md).

The same commit and seeds gave other floats on another x86-64 CPU, and
``--threads 2`` others than ``--threads 1``: torch, MKL and oneDNN each pick a
code path from the CPU they find (ATen's vectorised kernels by AVX2 or
AVX-512, MKL's GEMM by vendor and ISA, oneDNN's primitives by ISA), and a
reduction split over more threads sums in another order. Verdicts that sit on
a threshold then depend on the machine. :func:`pin` fixes each of those
choices through the environment the libraries read when they load, so it must
run before ``import torch``: ``adloco``'s entry point calls it first, and every
Snakemake rule, DVC stage and torchrun worker runs ``adloco``.

``ADLOCO_NUMERICS`` picks one of three modes:

- ``fast`` (the default): every pin that costs nothing, MKL's GEMM left to its
  own branch for this CPU (``MKL_CBWR=AUTO``). The same floats on every CPU
  of one MKL branch (:func:`mkl_branch`: the CPU's vendor and the branch MKL
  picks for it), other last digits on another branch.
- ``portable`` (``pinned``, its old name, is accepted): the same with
  ``MKL_CBWR=COMPATIBLE``, MKL's one branch that is the same on Intel and AMD;
  the same floats on every x86-64 CPU with AVX2, at about half the training
  loop's speed.
- ``native``: nothing set; the environment and the libraries' own choices rule.

What ``fast`` and ``portable`` set:

- ``ATEN_CPU_CAPABILITY``: ``avx2`` on an x86-64 CPU with AVX2 and FMA, else
  ``default`` (ATen's scalar-width kernels). Read once by torch, at import.
- ``MKL_CBWR``: ``AUTO`` (fast) or ``COMPATIBLE`` (portable). MKL's conditional
  numerical reproducibility honours ``COMPATIBLE`` on Intel and AMD alike; a
  request for ``AVX2`` on an AMD CPU falls back to ``AUTO`` (``MKL_VERBOSE=1``
  shows ``CNR:AUTO``), so no ISA branch can be pinned across vendors.
- ``ONEDNN_MAX_CPU_ISA``: ``AVX2`` (``SSE41`` without AVX2); float32 training
  calls no oneDNN primitive today, a bfloat16 autocast on the CPU would.
- ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``: the stage's ``--threads``, else
  :data:`DEFAULT_THREADS`; ``MKL_DYNAMIC=FALSE`` so that MKL never takes fewer.

:func:`record` says what a process ran under, for its outputs.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
import sys
from collections.abc import MutableMapping
from pathlib import Path

MODE_VARIABLE = "ADLOCO_NUMERICS"
FAST, PORTABLE, NATIVE = "fast", "portable", "native"
MODES = (FAST, PORTABLE, NATIVE)
DEFAULT_MODE = FAST
# Old names still accepted (records and docs before the fast mode said "pinned").
ALIASES = {"pinned": PORTABLE}

# MKL's GEMM branch per pinned mode: its own for the CPU, or the one shared by every vendor.
MKL_CBWR = {FAST: "AUTO", PORTABLE: "COMPATIBLE"}

# MKL's branch codes (mkl_cbwr_get_auto_branch, mkl.h's MKL_CBWR_*), by name.
MKL_BRANCHES = {
    2: "AUTO",  # MKL names no branch for this CPU (a non-Intel one): its generic dispatch
    3: "COMPATIBLE",
    4: "SSE2",
    6: "SSSE3",
    7: "SSE4_1",
    8: "SSE4_2",
    9: "AVX",
    10: "AVX2",
    11: "AVX512_MIC",
    12: "AVX512",
    13: "AVX512_MIC_E1",
    14: "AVX512_E1",
}

# Intra-op threads of a stage given no --threads: those of a training job on a
# CPU (adloco_workflow.resources.process_threads), so that `dvc repro`, which
# passes none, trains as the Snakemake rules do.
DEFAULT_THREADS = 1

# The code paths, read once when the libraries load, and the thread counts
# (torch.set_num_threads sets those again later); the record lists them in this order.
PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_DYNAMIC")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
VARIABLES = PATH_VARIABLES + THREAD_VARIABLES

# What this process pinned (None: pin() has not run).
_pinned: dict | None = None


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags as Linux lists them; empty where the file cannot be read."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_vendor(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's vendor as Linux lists it (``GenuineIntel``, ``AuthenticAMD``); "" if unknown."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return ""


def is_x86_64(machine: str) -> bool:
    return machine.lower() in ("x86_64", "amd64")


def pinned_environment(
    flags: frozenset[str], machine: str, threads: int, mode: str = DEFAULT_MODE
) -> dict[str, str]:
    """The variables :func:`pin` sets in ``mode`` on a CPU with ``flags``, of ``machine``.

    AVX2 with FMA is the widest ISA every x86-64 CPU of the last decade has
    (AVX-512 is missing from AMD before Zen 4 and from Intel's client CPUs), so
    it is the pinned one; a CPU without it takes the scalar paths, whose floats
    differ from AVX2's (stated in the record). On another architecture only
    ATen and the thread count are pinned: MKL and oneDNN's x86 ISAs do not apply.
    ``fast`` and ``portable`` differ in MKL's branch alone (:data:`MKL_CBWR`).
    """
    if mode not in MKL_CBWR:
        raise ValueError(f"no pinned environment in mode {mode!r}: expected fast or portable")
    x86 = is_x86_64(machine)
    avx2 = x86 and {"avx2", "fma"} <= flags
    env = {"ATEN_CPU_CAPABILITY": "avx2" if avx2 else "default"}
    if x86:
        env["MKL_CBWR"] = MKL_CBWR[mode]
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2" if avx2 else "SSE41"
        env["MKL_DYNAMIC"] = "FALSE"
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """``ADLOCO_NUMERICS``'s mode: ``fast`` (unset or empty), ``portable`` or ``native``.

    ``pinned`` is read as ``portable``, its old name; another value is an error.
    """
    value = environ.get(MODE_VARIABLE, "").strip().lower() or DEFAULT_MODE
    value = ALIASES.get(value, value)
    if value not in MODES:
        raise ValueError(
            f"{MODE_VARIABLE}={environ[MODE_VARIABLE]!r}: expected {', '.join(MODES[:-1])} "
            f"or {MODES[-1]} (docs/numerics.md)"
        )
    return value


def threads_for(threads: int | None, environ: MutableMapping[str, str] = os.environ) -> int | None:
    """Intra-op threads of a stage: ``--threads``, else :data:`DEFAULT_THREADS` (fast, portable).

    None (torch's own default, the machine's cores) only in native mode.
    """
    if threads:
        return threads
    return None if mode(environ) == NATIVE else DEFAULT_THREADS


def pin(
    threads: int | None = None,
    environ: MutableMapping[str, str] = os.environ,
    *,
    machine: str | None = None,
    flags: frozenset[str] | None = None,
) -> dict[str, str]:
    """Set the mode's environment (:func:`pinned_environment`; none if native); what it set.

    Call it before anything imports torch: torch, MKL and oneDNN read these
    variables once, when they load. Where torch is already loaded (a test that
    calls ``adloco.cli.main`` in its own process) nothing is set, since it would
    only change what child processes run, not this one; :func:`record` then
    says the process was not pinned.
    """
    global _pinned
    chosen = mode(environ)
    if chosen == NATIVE:
        _pinned = {}
        return {}
    machine = platform.machine() if machine is None else machine
    flags = cpu_flags() if flags is None else flags
    threads = threads_for(threads, environ) or DEFAULT_THREADS
    env = pinned_environment(flags, machine, threads, chosen)
    if "torch" in sys.modules:
        # Pinned already if the process started under these paths (a parent, or an
        # earlier stage of this process, set them); the threads are torch's to set.
        paths = {k: v for k, v in env.items() if k in PATH_VARIABLES}
        _pinned = env if all(environ.get(k) == v for k, v in paths.items()) else {}
        return {}
    environ.update(env)
    _pinned = dict(env)
    return dict(env)


def branch_name(code: int, vendor: str, flags: frozenset[str]) -> str:
    """:func:`mkl_branch`'s name for MKL's branch ``code`` on a CPU of ``vendor`` with ``flags``."""
    branch = MKL_BRANCHES.get(code, f"branch{code}")
    if branch == "AUTO":  # MKL names none: its generic dispatch, by the CPU's ISA
        branch += "-avx512" if "avx512f" in flags else "-avx2" if "avx2" in flags else "-sse"
    return f"{vendor or 'unknown'}-{branch}"


def mkl_branch() -> str | None:
    """The name of the floats MKL's ``AUTO`` GEMM computes on this CPU: vendor and branch.

    MKL's own name for the branch it picks on this CPU (``mkl_cbwr_get_auto_branch``:
    ``AVX2``, ``AVX512``... on an Intel CPU; ``AUTO`` on another vendor's, where MKL
    names none) after the CPU's vendor, such as ``GenuineIntel-AVX512``; where MKL
    names no branch, the widest vector ISA the CPU has is added
    (``AuthenticAMD-AUTO-avx2``). The fast mode's fingerprints are kept one per
    name. None where torch has no MKL (another architecture, another build).
    Call it once torch is loaded.
    """
    torch = importlib.import_module("torch")
    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        code = int(lib.mkl_serv_cbwr_get_auto_branch())
    except (OSError, AttributeError):
        return None
    return branch_name(code, cpu_vendor(), cpu_flags())


def record(environ: MutableMapping[str, str] = os.environ) -> dict:
    """What this process computes under, for a run's outputs: mode, variables, threads, torch.

    ``pinned_before_torch`` is true when the code paths were pinned before
    torch loaded; ``mkl_branch`` names the floats MKL's ``AUTO`` computes on
    this CPU (:func:`mkl_branch`; what ``fast`` runs, whatever the mode);
    ``environment`` holds each variable as the process sees it (null where
    unset), ``cpu_capability`` the ATen kernels torch actually runs and
    ``intra_op_threads`` the threads it actually uses.
    """
    # Loaded by now (the stage trained); never at this module's import, which precedes torch's.
    torch = importlib.import_module("torch")
    return {
        "mode": mode(environ),
        "pinned_before_torch": bool(_pinned),
        "environment": {name: environ.get(name) for name in VARIABLES},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_branch": mkl_branch(),
        "intra_op_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
