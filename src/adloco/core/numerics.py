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

The pinned values (``pinned`` mode, the default):

- ``ATEN_CPU_CAPABILITY``: ``avx2`` on an x86-64 CPU with AVX2 and FMA, else
  ``default`` (ATen's scalar-width kernels). Read once by torch, at import.
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility, the one
  branch MKL honours on Intel and AMD alike (a request for ``AVX2`` on an AMD CPU
  falls back to ``AUTO``, MKL's own choice; ``MKL_VERBOSE=1`` shows ``CNR:AUTO``).
- ``ONEDNN_MAX_CPU_ISA``: ``AVX2`` (``SSE41`` without AVX2); float32 training
  calls no oneDNN primitive today, a bfloat16 autocast on the CPU would.
- ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``: the stage's ``--threads``, else
  :data:`DEFAULT_THREADS`; ``MKL_DYNAMIC=FALSE`` so that MKL never takes fewer.

``ADLOCO_NUMERICS=native`` opts out: the environment and the libraries' own
choices then rule (the fastest paths of the machine, whose floats differ from
another's). :func:`record` says what a process ran under, for its outputs.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from collections.abc import MutableMapping
from pathlib import Path

MODE_VARIABLE = "ADLOCO_NUMERICS"
PINNED, NATIVE = "pinned", "native"
MODES = (PINNED, NATIVE)

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


def is_x86_64(machine: str) -> bool:
    return machine.lower() in ("x86_64", "amd64")


def pinned_environment(flags: frozenset[str], machine: str, threads: int) -> dict[str, str]:
    """The variables :func:`pin` sets on a CPU with ``flags`` of architecture ``machine``.

    AVX2 with FMA is the widest ISA every x86-64 CPU of the last decade has
    (AVX-512 is missing from AMD before Zen 4 and from Intel's client CPUs), so
    it is the pinned one; a CPU without it takes the scalar paths, whose floats
    differ from AVX2's (stated in the record). On another architecture only
    ATen and the thread count are pinned: MKL and oneDNN's x86 ISAs do not apply.
    """
    x86 = is_x86_64(machine)
    avx2 = x86 and {"avx2", "fma"} <= flags
    env = {"ATEN_CPU_CAPABILITY": "avx2" if avx2 else "default"}
    if x86:
        env["MKL_CBWR"] = "COMPATIBLE"
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2" if avx2 else "SSE41"
        env["MKL_DYNAMIC"] = "FALSE"
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """``pinned`` unless ``ADLOCO_NUMERICS`` says ``native``; another value is an error."""
    value = environ.get(MODE_VARIABLE, "").strip().lower() or PINNED
    if value not in MODES:
        raise ValueError(
            f"{MODE_VARIABLE}={environ[MODE_VARIABLE]!r}: expected {' or '.join(MODES)} "
            "(docs/numerics.md)"
        )
    return value


def threads_for(threads: int | None, environ: MutableMapping[str, str] = os.environ) -> int | None:
    """Intra-op threads of a stage: ``--threads``, else :data:`DEFAULT_THREADS` when pinned.

    None (torch's own default, the machine's cores) only in native mode.
    """
    if threads:
        return threads
    return DEFAULT_THREADS if mode(environ) == PINNED else None


def pin(
    threads: int | None = None,
    environ: MutableMapping[str, str] = os.environ,
    *,
    machine: str | None = None,
    flags: frozenset[str] | None = None,
) -> dict[str, str]:
    """Set the pinned environment (unless native); the variables set.

    Call it before anything imports torch: torch, MKL and oneDNN read these
    variables once, when they load. Where torch is already loaded (a test that
    calls ``adloco.cli.main`` in its own process) nothing is set, since it would
    only change what child processes run, not this one; :func:`record` then
    says the process was not pinned.
    """
    global _pinned
    if mode(environ) == NATIVE:
        _pinned = {}
        return {}
    machine = platform.machine() if machine is None else machine
    flags = cpu_flags() if flags is None else flags
    env = pinned_environment(flags, machine, threads_for(threads, environ) or DEFAULT_THREADS)
    if "torch" in sys.modules:
        # Pinned already if the process started under these paths (a parent, or an
        # earlier stage of this process, set them); the threads are torch's to set.
        paths = {k: v for k, v in env.items() if k in PATH_VARIABLES}
        _pinned = env if all(environ.get(k) == v for k, v in paths.items()) else {}
        return {}
    environ.update(env)
    _pinned = dict(env)
    return dict(env)


def record(environ: MutableMapping[str, str] = os.environ) -> dict:
    """What this process computes under, for a run's outputs: mode, variables, threads, torch.

    ``pinned_before_torch`` is true when the code paths were pinned before
    torch loaded; ``environment`` holds each variable as the process sees it
    (null where unset), ``cpu_capability`` the ATen kernels torch actually runs
    and ``intra_op_threads`` the threads it actually uses.
    """
    # Loaded by now (the stage trained); never at this module's import, which precedes torch's.
    torch = importlib.import_module("torch")
    return {
        "mode": mode(environ),
        "pinned_before_torch": bool(_pinned),
        "environment": {name: environ.get(name) for name in VARIABLES},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "intra_op_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
