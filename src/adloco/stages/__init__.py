"""The pipeline's stages, each declared once in its own module of this package.

A stage's module (``stages/<stage>.py``) declares its ``adloco <stage>``
command (help, arguments, which of them name its outputs, whether it trains),
the configuration keys it depends on, its inputs and outputs as dvc.yaml runs
it (:mod:`adloco.stages.declaration`), the request type its library takes,
and its entry ``run(args) -> int``, which hands the library it calls the
parsed arguments as that request (``STAGE.request_from(args)``) and returns
the exit status, with at most one line of its own (``report`` logs the page it
wrote, ``regimes`` prints claim 1).
From :data:`STAGES` come :mod:`adloco.cli`'s parser, the Snakemake rules'
``settings`` params (:func:`snakemake_params`) and dvc.yaml
(workflow/lib/adloco_workflow/dvc_yaml.py). The package imports only the
standard library and :mod:`adloco.core.paths`: Snakemake imports it while it
parses the workflow, and ``adloco --help`` imports no torch. A stage's
library is imported by its ``run`` when it runs.
"""

from __future__ import annotations

from adloco.stages import (
    calibrate,
    dvc_check,
    dvc_params,
    prepare_corpus,
    pretrain,
    regimes,
    report,
    tokenize,
    train,
    variance,
)
from adloco.stages.declaration import Stage

# In the pipeline's order: the CLI lists them so, and dvc.yaml writes its stages so.
STAGES: tuple[Stage, ...] = (
    prepare_corpus.STAGE,
    tokenize.STAGE,
    pretrain.STAGE,
    calibrate.STAGE,
    variance.STAGE,
    train.STAGE,
    report.STAGE,
    regimes.STAGE,
    dvc_params.STAGE,
    dvc_check.STAGE,
)


def stage(name: str, stages: tuple[Stage, ...] = STAGES) -> Stage:
    """The stage ``adloco <name>`` runs."""
    (found,) = [s for s in stages if s.name == name]
    return found


def snakemake_params(stages: tuple[Stage, ...] = STAGES) -> dict[str, list[str]]:
    """Each stage's configuration keys as a Snakemake job reads them (``{run}`` a wildcard).

    Every stage, one without keys too (an empty list): its rule's
    ``stage_params("<stage>")`` is then an empty mapping.
    """
    return {s.name: s.snakemake_keys() for s in stages}
