"""The workflow's own helpers, outside the training package.

``stages``: the one table of the pipeline's stages (command, inputs, outputs,
the configuration keys each depends on), which gives the Snakemake rules
their params and generates dvc.yaml (``dvc_yaml``); ``lock``: the release of
the lock a killed Snakemake left; ``preflight``: the profiles' checks before
Snakemake reads the configuration file; ``plan``: the values and param
functions the rules (workflow/rules/*.smk) read. workflow/Snakefile and the
profiles put this folder on ``sys.path``; like the adloco modules they read
(``adloco.config``, ``adloco.core.paths``, ``adloco.core.io``), they need only the
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
