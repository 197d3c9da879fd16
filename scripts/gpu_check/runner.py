"""Run the check's steps one by one, each under its own time limit, into one JSON.

A step is a command (a process of its own, so that a step that runs out of
memory, hangs or crashes the interpreter takes nothing else down) and a
function that reads its figures from the files the command wrote. Its entry
in the JSON says ``passed`` (with its figures), ``failed`` (the command's exit
status and last lines, or why its figures were refused), ``cut`` (it ran past
its limit and was killed with every process it started) or ``skipped`` (a step
it needs did not pass). The JSON is rewritten, atomically, after every step, so
a check that is itself killed still leaves what it measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Lines of a failed step's output quoted in its message.
TAIL_LINES = 12


@dataclass(frozen=True)
class Step:
    """One step: a command, its time limit, and what to read once it has passed."""

    name: str
    command: Sequence[str]
    limit_s: float
    collect: Callable[[], dict[str, Any]] = dict
    needs: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def write_json_atomic(path: Path, payload: Any) -> None:
    """``path`` holds either its previous content or all of ``payload``."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-TAIL_LINES:])


class Runner:
    """Runs steps in order against an overall deadline; keeps the JSON and the log."""

    def __init__(self, out: Path, work: Path, budget_s: float, header: dict[str, Any]):
        self.out, self.work = out, work
        self.deadline = time.monotonic() + budget_s
        self.log = out / "gpu-check.log"
        self.json = out / "gpu-check.json"
        self.report: dict[str, Any] = {**header, "budget_s": budget_s, "steps": {}}
        self.log.write_text("")
        write_json_atomic(self.json, self.report)

    def status(self, name: str) -> str | None:
        entry = self.report["steps"].get(name)
        return None if entry is None else entry["status"]

    def run(self, step: Step) -> dict[str, Any]:
        """Run one step and record its entry."""
        missing = [n for n in step.needs if self.status(n) != "passed"]
        left = self.deadline - time.monotonic()
        if missing:
            entry = {
                "status": "skipped",
                "message": f"needs {', '.join(missing)}, which did not pass",
            }
        elif left < 1:
            entry = {"status": "cut", "message": "the check's overall budget was spent before it"}
        else:
            entry = self._execute(step, min(step.limit_s, left))
        self.report["steps"][step.name] = entry
        write_json_atomic(self.json, self.report)
        self._append_log(
            f"== {step.name}: {entry['status']}"
            + (f" ({entry['message'].splitlines()[0]})" if "message" in entry else "")
        )
        return entry

    def _execute(self, step: Step, limit_s: float) -> dict[str, Any]:
        output = self.work / f"{step.name}.out"
        self._append_log(
            f"== {step.name} (limit {limit_s:.0f} s): {' '.join(map(str, step.command))}"
        )
        start = time.monotonic()
        with open(output, "wb") as fh:
            # A session of its own, so that a cut kills every process it started.
            proc = subprocess.Popen(
                [str(c) for c in step.command],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, **step.env},
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout=limit_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        seconds = round(time.monotonic() - start, 2)
        text = output.read_text(errors="replace")
        self._append_log(text.rstrip("\n"))
        entry: dict[str, Any] = {"seconds": seconds, "limit_s": round(limit_s, 1)}
        if code is None:
            what = "its limit" if limit_s >= step.limit_s else "the check's overall budget"
            return {
                "status": "cut",
                **entry,
                "message": f"killed after {limit_s:.0f} s ({what})\n" + _tail(text),
            }
        if code != 0:
            return {"status": "failed", **entry, "message": f"exit status {code}\n" + _tail(text)}
        try:
            figures = step.collect()
        except (AssertionError, ValueError, KeyError, OSError) as exc:
            return {"status": "failed", **entry, "message": f"{type(exc).__name__}: {exc}"}
        return {"status": "passed", **entry, "figures": figures}

    def _append_log(self, text: str) -> None:
        with open(self.log, "a") as fh:
            fh.write(text + "\n")

    def summary(self) -> str:
        """One line per step, for the console."""
        rows = []
        for name, entry in self.report["steps"].items():
            took = f" {entry['seconds']:.1f} s" if "seconds" in entry else ""
            why = entry.get("message", "").splitlines()[:1]
            rows.append(f"{entry['status']:8s} {name}{took}" + (f": {why[0]}" if why else ""))
        return "\n".join(rows)
