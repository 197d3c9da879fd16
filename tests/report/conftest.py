"""Builders for the report tests: small result trees written from compact specs.

A run is given as rounds, each a list of trainer rows in shorthand
(``ppl``, ``req``, ``eff``, ``mode``, ``events``, ``trainer``); cumulative
fields (tokens_total, communications, sim_time_s) are filled the way the
engine fills them, so each test can state its expected numbers by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adloco.report.claims import evaluate_claims
from adloco.report.inputs import load_runs
from adloco.report.ladder import build_ladder
from adloco.report.settings import ReportSettings, assign_roles

FIXTURES = Path(__file__).parent / "fixtures"
ENGINE_FIXTURE = FIXTURES / "engine"  # real engine runs, three seeds (make_engine_fixture.py)

BASE_CONFIG = {
    "data": {"dataset": "t", "source": "local"},
    "model": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    },
    "cluster": {
        "nodes_per_device": 2,
        "devices": [{"name": "cpu-t", "count": 2, "memory_gib": 0.5, "max_batch": 8}],
    },
    "train": {"max_rounds": 10, "inner_steps": 2},
}

FULL_ADLOCO = {
    "method": "adloco",
    "initial_trainers": 2,
    "batch_test": "norm",
    "merge": "smallest_batch",
}


def single(ppls: list[float | None], req: int = 8) -> list[list[dict]]:
    """One trainer per round with these perplexities."""
    return [[{"ppl": p, "req": req}] for p in ppls]


def pair(ppls_a: list[float | None], ppls_b: list[float | None]) -> list[list[dict]]:
    """Two trainers per round."""
    return [[{"ppl": a}, {"ppl": b}] for a, b in zip(ppls_a, ppls_b, strict=True)]


def make_rows(
    run: str,
    seed: int,
    method: str,
    rounds: list[list[dict]],
    sim_s_per_round: float = 1.0,
    tokens_per_row: int = 100,
) -> list[dict]:
    rows, tokens, comms = [], 0, 0
    for index, trainers in enumerate(rounds, start=1):
        tokens += tokens_per_row * len(trainers)
        for position, t in enumerate(trainers):
            comms += 1
            req = t.get("req", 4)
            rows.append(
                {
                    "run": run,
                    "seed": seed,
                    "method": method,
                    "round": index,
                    "trainer": t.get("trainer", position),
                    "active_trainers": len(trainers),
                    "nodes": 1,
                    "requested_batch": req,
                    "effective_batch": t.get("eff", req),
                    "micro_batch": t.get("micro", min(req, 8)),
                    "accum_steps": 1,
                    "switch_mode": t.get("mode", "plain"),
                    "tokens": tokens_per_row,
                    "tokens_total": tokens,
                    "communications": comms,
                    "bytes": 10,
                    "bytes_total": 10 * comms,
                    "val_perplexity": t.get("ppl"),
                    "sim_time_s": sim_s_per_round * index,
                    "wall_time_s": 0.1 * index,
                    "stats": None,
                    "events": t.get("events", []),
                }
            )
    return rows


class Workspace:
    """A results tree in a temporary folder: config, runs, calibration, variance."""

    FULL_ADLOCO = FULL_ADLOCO
    single = staticmethod(single)
    pair = staticmethod(pair)

    def __init__(self, root: Path):
        self.root = root
        self.runs_dir = root / "runs"
        self.settings: dict[str, dict] = {}
        self.seeds: set[int] = set()

    def run(
        self,
        name: str,
        settings: dict,
        per_seed: dict[int, list[list[dict]]],
        sim_s_per_round: float | dict[int, float] = 1.0,
    ) -> None:
        self.settings[name] = settings
        for seed, rounds in per_seed.items():
            self.seeds.add(seed)
            sim = sim_s_per_round[seed] if isinstance(sim_s_per_round, dict) else sim_s_per_round
            rows = make_rows(name, seed, settings["method"], rounds, sim)
            folder = self.runs_dir / name / f"seed{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            last = [r for r in rows if r["round"] == len(rounds)]
            ppls = [r["val_perplexity"] for r in rows if r["val_perplexity"] is not None]
            final = [r["val_perplexity"] for r in last if r["val_perplexity"] is not None]
            summary = {
                "run": name,
                "seed": seed,
                "method": settings["method"],
                "rounds": len(rounds),
                "final_val_perplexity": min(final) if final else None,
                "best_val_perplexity": min(ppls) if ppls else None,
                "tokens_total": last[-1]["tokens_total"],
                "communications": last[-1]["communications"],
                "bytes_total": last[-1]["bytes_total"],
                "sim_time_s": last[-1]["sim_time_s"],
                "wall_time_s": last[-1]["wall_time_s"],
                "final_trainers": len(last),
            }
            (folder / "summary.json").write_text(json.dumps(summary))

    def write(self, targets: list[float] | None = None, **report) -> Path:
        config = {
            "experiment": "report-test",
            **BASE_CONFIG,
            "seeds": sorted(self.seeds),
            "runs": self.settings,
            "report": {"targets": targets, "bootstrap_samples": 1000, **report},
        }
        path = self.root / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        variance = self.root / "variance"
        variance.mkdir(exist_ok=True)
        (variance / "variance.json").write_text(json.dumps({"trace_cov": 10.0, "grad_sqnorm": 0.5}))
        (self.root / "calibration").mkdir(exist_ok=True)
        return path

    def load(self, targets: list[float] | None = None, **report):
        from adloco.config import load_config

        config = load_config(self.write(targets, **report))
        runs = load_runs(self.runs_dir, config)
        settings = ReportSettings.from_config(config)
        roles = assign_roles(config, {r.run: r.settings for r in runs})
        return runs, roles, build_ladder(runs, roles, settings), settings

    def claims(self, targets: list[float] | None = None, clock_reason: str = "", **report):
        runs, roles, ladder, settings = self.load(targets, **report)
        return {c.number: c for c in evaluate_claims(runs, roles, ladder, settings, clock_reason)}


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture(scope="session")
def engine_fixture() -> Path:
    """Real engine runs on tiny data, three seeds (tests/report/fixtures/engine)."""
    return ENGINE_FIXTURE


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The hand-made results tree of tests/report/fixtures."""
    return FIXTURES
