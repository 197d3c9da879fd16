"""What a training job shows as it goes: a bar on a terminal, one log line per round elsewhere.

``adloco pretrain`` counts its progress in tokens, its one limit. A run of
``adloco train`` ends at ``max_rounds`` rounds or ``max_tokens`` tokens,
whichever comes first, so its share done is the larger of the two shares, and
the line names the limit that share is counted against: the test preset's
last line reads ``round 3 of 3, tokens 1728 of 100000, 100% (of rounds)``, not
2%. On a terminal that is a tqdm bar (tokens for pretraining, percent for a
run). In a log file (Snakemake sends a job's stderr to
``logs/<experiment>/...``) a bar is a single line of carriage returns that no
one can read, so there each round of a run, and each evaluation of the base
model, is one INFO line instead, and the transformers library's own bars
(loading and saving a model) are switched off. ``--no-progress`` asks for the
lines on a terminal too.
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
    """A job's progress: a bar where ``bar`` holds and stderr is a terminal, else one line a step.

    ``shown`` false (a process that does not write the outputs) shows
    nothing. ``name`` starts every line and labels the bar. ``max_rounds``
    (a run of ``adloco train``): the job also ends after that many rounds,
    whichever limit comes first; ``done_rounds`` are those already trained
    (a resumed run).
    """

    def __init__(
        self,
        name: str,
        total_tokens: int,
        done_tokens: int,
        shown: bool,
        bar: bool,
        max_rounds: int | None = None,
        done_rounds: int = 0,
    ):
        self.name = name
        self.total_tokens = total_tokens
        self.max_rounds = max_rounds
        self.shown = shown
        self.bar = None
        if shown and bar and on_terminal():
            if max_rounds is None:
                self.bar = tqdm(
                    total=total_tokens,
                    initial=min(done_tokens, total_tokens),
                    desc=name,
                    unit="tok",
                    unit_scale=True,
                    dynamic_ncols=True,
                )
            else:  # two limits: the bar counts the share done, in percent
                self.bar = tqdm(
                    total=100,
                    initial=round(self.share(done_tokens, done_rounds)[0]),
                    desc=name,
                    unit="%",
                    dynamic_ncols=True,
                )
        self._counted = self._position(done_tokens, done_rounds)

    def share(self, tokens: int, rounds: int | None = None) -> tuple[float, str]:
        """Percent done and the limit it counts against ("tokens" or "rounds").

        With both limits, the one nearer its end: the run stops at whichever comes first.
        """
        by_tokens = 100 * tokens / self.total_tokens if self.total_tokens else 100.0
        if self.max_rounds is None or rounds is None:
            return min(by_tokens, 100.0), "tokens"
        by_rounds = 100 * rounds / self.max_rounds
        if by_rounds > by_tokens:
            return min(by_rounds, 100.0), "rounds"
        return min(by_tokens, 100.0), "tokens"

    def _position(self, tokens: int, rounds: int | None) -> float:
        if self.max_rounds is None:
            return min(tokens, self.total_tokens)
        return round(self.share(tokens, rounds)[0])

    def advance(self, tokens: int, rounds: int | None = None) -> None:
        """The job has now trained ``tokens`` tokens (and ``rounds`` rounds): the bar moves."""
        done = self._position(tokens, rounds)
        if self.bar is not None:
            self.bar.update(done - self._counted)
        self._counted = done

    def report(
        self, tokens: int, fields: Mapping[str, str], elapsed_s: float, rounds: int | None = None
    ) -> None:
        """A step's summary: the bar's postfix, or one INFO line.

        The line: ``<name>: <first field>, tokens <done> of <total> (<share>),
        <other fields>, <elapsed_s> s``; with ``max_rounds`` and ``rounds``:
        ``<name>: round <rounds> of <max>, tokens <done> of <total>, <share>
        (of rounds|tokens), <other fields>, ...`` (the first field, the round,
        is then the count). A field's underscores read as spaces.
        """
        self.advance(tokens, rounds)
        if self.bar is not None:
            self.bar.set_postfix(fields)
        elif self.shown:
            share, limit = self.share(tokens, rounds)
            head, *rest = [f"{k.replace('_', ' ')} {v}" for k, v in fields.items()]
            if self.max_rounds is None or rounds is None:
                done = [f"tokens {tokens} of {self.total_tokens} ({share:.0f}%)"]
            else:
                head = f"round {rounds} of {self.max_rounds}"
                done = [f"tokens {tokens} of {self.total_tokens}", f"{share:.0f}% (of {limit})"]
            log.info("%s: %s", self.name, ", ".join([head, *done, *rest, f"{elapsed_s:.1f} s"]))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
