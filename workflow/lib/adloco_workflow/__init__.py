"""The workflow's own helpers, outside the training package.

``dvc_yaml``: dvc.yaml, generated from the stages' declarations
(:mod:`adloco.stages`: command, inputs, outputs, the configuration keys each
depends on, which give the Snakemake rules their ``settings`` params too);
``snakemake_lock``: the release of the lock a killed Snakemake left;
``snakemake_preflight``: the profiles' checks before Snakemake reads the
configuration file; ``plan``: the values and param functions the rules
(workflow/rules/*.smk) read. workflow/Snakefile and the profiles put this
folder on ``sys.path``; like the adloco modules they read (``adloco.config``,
``adloco.stages``, ``adloco.core.paths``, ``adloco.core.io``), they need only the
standard library, jsonschema and PyYAML.
"""

import os
import sys


def put_checkout_src_first(main_snakefile: str) -> str | None:
    """Put src/ of this checkout first on ``sys.path``; returns it, or None without one.

    src/ lies beside the main Snakefile (./Snakefile) or above it
    (workflow/Snakefile). The checkout comes first so that the workflow checks
    with the code of the checkout it belongs to, even where another copy of
    adloco is installed; a copy of the workflow without src/ uses the
    installed package.
    """
    here = os.path.dirname(os.path.abspath(main_snakefile))
    for root in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(root, "src", "adloco", "__init__.py")):
            src = os.path.join(root, "src")
            if src not in sys.path:
                sys.path.insert(0, src)
            return src
    return None


def rule_files(basedir: str, stages) -> list[str]:
    """The rule file of each stage Snakemake runs, ``rules/<stage>.smk``, in the stages' order.

    ``stages``: :data:`adloco.stages.STAGES`. A stage without a file there
    (``adloco regimes``, the DVC helpers) has no rule. In the stages' order,
    a rule may name an earlier one's outputs (``rules.variance.output``).
    """
    names = [f"rules/{stage.name.replace('-', '_')}.smk" for stage in stages]
    return [name for name in names if os.path.isfile(os.path.join(str(basedir), name))]
