"""How a training process starts: torch's threads, the bars off a terminal, freed memory kept.

`training_process.prepare` runs in a fresh interpreter (one for every case, in
turn), so that the thread count and the C library's thresholds of the test
process stay as they were.
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
    import json
    import torch
    from transformers.utils import logging as hf_logging
    from adloco.engine import allocator, process as training_process

    kept = []
    allocator.keep_freed_memory = lambda: kept.append(True) or True
    seen = {"start": torch.get_num_threads(), "bars": hf_logging.is_progress_bar_enabled()}
    for threads in (None, 0, 3):
        training_process.prepare(threads)
        seen[str(threads)] = torch.get_num_threads()
    seen["bars_after"] = hf_logging.is_progress_bar_enabled()
    seen["kept"] = len(kept)
    print(json.dumps(seen))
    """
)


@pytest.fixture(scope="module")
def seen() -> dict:
    # stdin, stdout and stderr are pipes: the process is off a terminal, as a job's.
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True, text=True, timeout=300, check=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.heavy
def test_no_threads_given_leaves_torch_s_own_count(seen):
    assert seen["start"] == 2  # OMP_NUM_THREADS of the environment
    assert seen["None"] == seen["0"] == 2


@pytest.mark.heavy
def test_prepare_sets_the_threads_it_is_given_and_keeps_freed_memory_each_time(seen):
    assert seen["3"] == 3
    assert seen["kept"] == 3


@pytest.mark.heavy
def test_off_a_terminal_the_library_bars_go_off(seen):
    assert seen["bars"] is True  # on by default
    assert seen["bars_after"] is False
