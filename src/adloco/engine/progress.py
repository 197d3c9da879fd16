"""What a training job shows as it goes: a bar on a terminal, one log line per round elsewhere.

``adloco train`` and ``adloco pretrain`` count their progress in tokens. On a
terminal that is a tqdm bar. In a log file (Snakemake sends a job's stderr to
``logs/<experiment>/...``) a bar is a single line of carriage returns that no
one can read, so there each round of a run, and each evaluation of the base
model, is one INFO line instead (``round 3, tokens 61440 of 300000 (20%), ...``),
and the transformers library's own bars (loading and saving a model) are
switched off. ``--no-progress`` asks for the lines on a terminal too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from tqdm.auto import tqdm
from transformers.utils import logging as hf_logging

log = logging.getLogger(__name__)


def on_terminal() -> bool:
    """Whether stderr, where the bars and the log lines go, is a terminal."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def quiet_library_bars() -> None:
    """Switch transformers' bars ("Loading weights", "Writing model shards") off off a terminal."""
    if not on_terminal():
        hf_logging.disable_progress_bar()


class Progress:
    """A job's tokens: a bar where ``bar`` holds and stderr is a terminal, else one line a step.

    ``shown`` false (a process that does not write the outputs) shows
    nothing. ``name`` starts every line and labels the bar.
    """

    def __init__(self, name: str, total_tokens: int, done_tokens: int, shown: bool, bar: bool):
        self.name = name
        self.total_tokens = total_tokens
        self.shown = shown
        self.bar = None
        if shown and bar and on_terminal():
            self.bar = tqdm(
                total=total_tokens,
                initial=min(done_tokens, total_tokens),
                desc=name,
                unit="tok",
                unit_scale=True,
                dynamic_ncols=True,
            )
        self._counted = min(done_tokens, total_tokens)

    def advance(self, tokens: int) -> None:
        """The job has now trained ``tokens`` tokens in all (the bar moves; no line)."""
        done = min(tokens, self.total_tokens)
        if self.bar is not None:
            self.bar.update(done - self._counted)
        self._counted = done

    def report(self, tokens: int, fields: Mapping[str, str], elapsed_s: float) -> None:
        """A step's summary: the bar's postfix, or one INFO line.

        The line: ``<name>: <first field>, tokens <done> of <total> (<share>),
        <other fields>, <elapsed_s> s``; a field's underscores read as spaces.
        """
        self.advance(tokens)
        if self.bar is not None:
            self.bar.set_postfix(fields)
        elif self.shown:
            share = 100 * tokens / self.total_tokens if self.total_tokens else 100.0
            head, *rest = [f"{k.replace('_', ' ')} {v}" for k, v in fields.items()]
            done = f"tokens {tokens} of {self.total_tokens} ({share:.0f}%)"
            log.info("%s: %s", self.name, ", ".join([head, done, *rest, f"{elapsed_s:.1f} s"]))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
