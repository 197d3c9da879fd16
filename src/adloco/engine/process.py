"""How a process that trains on the host starts: the stages that run training passes call it first.

Freed memory stays in the process (:mod:`adloco.engine.allocator`), and torch gets the
threads the command was given (Snakemake passes a job's threads; per process
under torchrun), else :data:`adloco.core.numerics.DEFAULT_THREADS` (``dvc repro``
passes none). Calibration, pretraining, the variance analysis and training
start the same way, so a calibration times passes as a training process runs them.
Off a terminal (a job's log file) the transformers library's progress bars
are switched off (:func:`adloco.engine.progress.quiet_library_bars`).
"""

from __future__ import annotations

import torch

from adloco.engine import allocator, progress


def prepare(threads: int | None) -> None:
    allocator.keep_freed_memory()
    progress.quiet_library_bars()
    if threads:
        torch.set_num_threads(threads)
