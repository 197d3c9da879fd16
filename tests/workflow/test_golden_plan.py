"""The planned jobs of every preset and the CLI's help equal their golden text.

The golden files (tests/workflow/golden/) were written by
``tests/workflow/golden_plan.py --write``; moving where a stage declares its
command, arguments, inputs or outputs must not change one job of a dry run
or one line of a stage's help.
"""

from __future__ import annotations

import difflib

import pytest
from golden_plan import GOLDEN, golden_texts


@pytest.mark.workflow_cli
def test_dry_runs_and_cli_help_equal_the_golden_text():
    now = golden_texts()
    assert sorted(now) == sorted(p.name for p in GOLDEN.iterdir())
    for name, text in now.items():
        golden = (GOLDEN / name).read_text()
        if text != golden:
            diff = difflib.unified_diff(golden.splitlines(), text.splitlines(), lineterm="")
            pytest.fail(
                f"{name} differs from its golden text (after a change meant to alter it: "
                "tests/workflow/golden_plan.py --write, and read the diff):\n"
                + "\n".join(list(diff)[:40])
            )
