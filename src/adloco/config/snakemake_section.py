"""The ``snakemake`` section: how the Snakemake workflow cuts the training into jobs.

Only the workflow reads it (``workflow/lib/adloco_workflow/plan.py``): no
``adloco`` command and no DVC stage depends on it, and no result changes with
it. ``seed`` gives Snakemake's natural grain, one job per run and seed, which
a cluster runs side by side; ``run`` trains every seed of a run in one job, one
after the other, as DVC's stage per run does, so that a machine with a few
cores imports torch and transformers once per run instead of once per seed.
"""

from __future__ import annotations

import dataclasses

from adloco.config.fields import setting

TRAIN_JOBS = ("seed", "run")


@dataclasses.dataclass(frozen=True)
class SnakemakeConfig:
    """``snakemake``: the workflow's own choices, which change no result."""

    train_jobs: str = setting(
        "seed",
        (
            "seed: one Snakemake job per run and seed (a cluster trains the seeds side by side;"
            " a seed's file as a target trains that seed alone); run: one job per run trains"
            " its seeds one after the other (`adloco train --seed all`: torch and"
            " transformers imported once per run; a killed job rewrites the seeds it had"
            " finished from their checkpoints and resumes the one it was on)"
        ),
        type="string",
        enum=list(TRAIN_JOBS),
    )
