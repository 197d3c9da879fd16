"""How a training process starts: torch's threads, the bars off a terminal, freed memory kept.

Each case runs `training_process.prepare` in a fresh interpreter, so that the
thread count and the C library's thresholds of the test process stay as they were.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers.utils import logging as hf_logging
    from adloco import allocator, training_process

    kept = []
    allocator.keep_freed_memory = lambda: kept.append(True) or True
    before = torch.get_num_threads()
    training_process.prepare({threads})
    print(json.dumps({{
        "before": before,
        "after": torch.get_num_threads(),
        "bars": hf_logging.is_progress_bar_enabled(),
        "kept": kept,
    }}))
    """
)


def prepared(threads: int | None) -> dict:
    # stdin, stdout and stderr are pipes: the process is off a terminal, as a job's.
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(threads=threads)],
        capture_output=True, text=True, timeout=300, check=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_prepare_sets_the_threads_it_is_given_and_keeps_freed_memory():
    seen = prepared(3)
    assert seen["before"] == 2  # OMP_NUM_THREADS of the environment
    assert seen["after"] == 3
    assert seen["kept"] == [True]


@pytest.mark.parametrize("threads", [None, 0])
def test_no_threads_given_leaves_torch_s_own_count(threads):
    seen = prepared(threads)
    assert seen["before"] == seen["after"] == 2


def test_off_a_terminal_the_library_bars_are_off():
    assert prepared(1)["bars"] is False
