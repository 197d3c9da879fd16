"""The report's outputs on the engine fixture equal the stored golden files, byte for byte.

The golden folders (tests/report/fixtures/golden/) were written by
``tests/report/golden.py --write`` before the report's modules were moved; a
move or a template change that alters one character of the page, a CSV, the
claims or a figure's pixels fails here, with the first differing lines named.
"""

from __future__ import annotations

import difflib

import pytest
from golden import CASES, comparable, render, stored


@pytest.mark.heavy
@pytest.mark.parametrize("case", sorted(CASES))
def test_report_outputs_equal_the_golden_files(case, tmp_path, references_and_base):
    written = comparable(render(case, tmp_path, references_and_base))
    golden = stored(case)
    assert sorted(written) == sorted(golden)
    for name in golden:
        if written[name] != golden[name]:
            diff = difflib.unified_diff(
                golden[name].splitlines(), written[name].splitlines(), "golden", "now", lineterm=""
            )
            pytest.fail(f"{name} differs from its golden file:\n" + "\n".join(list(diff)[:40]))
