"""The check's steps, in the order a short GPU lease should spend its minutes.

Every step calls the project's own command (``python -m adloco <stage>``) or
benchmark on files in the work folder, so what passes here is what the
pipeline runs. Order: what only a GPU can tell first (the paper-shape
calibration and bf16 rounds, the engine and slot benchmarks), then the
default model on the device, then the two-process path.
"""

from __future__ import annotations

import shlex
import sys
from functools import partial
from pathlib import Path

import configs
import figures
from runner import Step

BENCH = configs.ROOT / "benchmarks" / "bench_engine.py"
ENVIRONMENT = Path(__file__).with_name("environment.py")

# Seconds each step may take at size full (a GPU machine); toy and quick scale them.
LIMIT_S = {
    "environment": 60,
    "corpus": 120,
    "data-default": 180,
    "data-paper-shape": 240,
    "calibrate-paper-shape": 150,
    "train-paper-shape-adloco": 120,
    "train-paper-shape-diloco": 100,
    "train-paper-shape-diloco-vectorized": 100,
    "bench-default": 120,
    "bench-paper-shape": 150,
    "calibrate-default": 90,
    "train-default-adloco": 90,
    "distributed-calibrate": 60,
    "distributed-1-process": 60,
    "distributed-2-processes": 120,
}


def bench_args(repeats: int, slot_repeats: int, slots, batches, *extra: str) -> list[str]:
    """benchmarks/bench_engine.py's repeats and slot grid (k in ``slots``, b in ``batches``)."""
    return [
        *("--repeats", str(repeats), "--slot-repeats", str(slot_repeats)),
        *("--slots", *map(str, slots), "--slot-batches", *map(str, batches)),
        *extra,
    ]


# Bench arguments by size: repeats, slot grid (engine vs plain loop, statistics, slots).
BENCH_ARGS = {
    "quick": bench_args(1, 1, [2], [1], "--steps", "2", "--batch", "2", "--slot-steps", "1"),
    "toy": bench_args(3, 2, [4, 16], [1, 4]),
    "full": bench_args(7, 3, [4, 16], [1, 4]),
}
# At the paper's shape 16 stacked slots of AdamW state (16 x 4.8 GB) exceed one GPU: 4 x 1
# only, and no exact per-sample estimator (batch x 300M floats).
BENCH_PAPER_ARGS = {
    "quick": BENCH_ARGS["quick"],
    "toy": bench_args(2, 2, [4], [1]),
    "full": bench_args(3, 3, [4], [1], "--batch", "8", "--skip-exact"),
}


class Plan:
    """Paths and commands of one check: its size, its device, its work folder."""

    def __init__(
        self,
        size: str,
        device: str,
        work: Path,
        prepared: Path,
        threads: int,
        peak_tflops: float | None,
        gpus: int,
    ):
        self.size, self.device, self.work = size, device, work
        self.prepared, self.threads, self.peak_tflops, self.gpus = (
            prepared,
            threads,
            peak_tflops,
            gpus,
        )
        self.py = sys.executable
        self.scale = {"full": 1.0, "toy": 1.0, "quick": 0.5}[size]
        default = configs.default_config(size, device)
        paper = configs.paper_shape_config(size, device)
        self.config = {
            "default": configs.write(default, work / "default.yaml"),
            "paper-shape": configs.write(paper, work / "paper-shape.yaml"),
            "distributed": configs.write(self._distributed(default), work / "distributed.yaml"),
        }
        self.dataset = {
            "default": default["data"]["dataset"],
            "paper-shape": paper["data"]["dataset"],
        }
        self.device_name = {
            "default": default["cluster"]["devices"][0]["name"],
            "paper-shape": paper["cluster"]["devices"][0]["name"],
            "distributed": "dist",
        }

    def _distributed(self, default: dict) -> dict:
        """The default on two devices of two slots, a process each (NCCL on two GPUs, else gloo)."""
        kind = "cuda" if self.device == "cuda" and self.gpus >= 2 else "cpu"
        device = {**default["cluster"]["devices"][0], "name": "dist", "count": 2, "kind": kind}
        if kind == "cpu":
            device["step_time"] = {**device["step_time"], "model": "roofline"}
        return {
            **default,
            "experiment": "gpu-check-distributed",
            "cluster": {
                **default["cluster"],
                "nodes_per_device": 2,
                "processes_per_machine": 2,
                "devices": [device],
            },
            "calibration": {
                **default["calibration"],
                "dtype": "bfloat16" if kind == "cuda" else "float32",
            },
            "train": {**default["train"], "autocast_dtype": "bfloat16" if kind == "cuda" else None},
        }

    def data_dir(self, exp: str) -> Path:
        carried = self.prepared / self.dataset[exp]
        return (
            carried
            if (carried / "manifest.json").exists()
            else self.work / "data" / self.dataset[exp]
        )

    def calibration_dir(self, exp: str) -> Path:
        return self.work / "calibration" / exp

    def adloco(self, *args) -> list[str]:
        return [self.py, "-m", "adloco", *map(str, args)]

    def limit(self, name: str) -> float:
        return LIMIT_S[name] * self.scale

    def steps(self) -> list[Step]:
        return [
            self.environment(),
            *self.data_steps(),
            self.calibrate("paper-shape", "data-paper-shape"),
            self.train("paper-shape", "adloco"),
            self.train("paper-shape", "diloco"),
            self.train_vectorized("paper-shape", "diloco"),
            self.bench("default", BENCH_ARGS[self.size]),
            self.bench("paper-shape", BENCH_PAPER_ARGS[self.size]),
            self.calibrate("default", "data-default"),
            self.train("default", "adloco"),
            *self.distributed_steps(),
        ]

    def environment(self) -> Step:
        out = self.work / "environment.json"
        return Step(
            "environment",
            [self.py, ENVIRONMENT, out],
            self.limit("environment"),
            partial(figures.environment, out),
        )

    def data_steps(self) -> list[Step]:
        raw = self.work / "raw"
        missing = [
            e
            for e in ("default", "paper-shape")
            if self.data_dir(e) != self.prepared / self.dataset[e]
        ]
        steps = []
        if missing:
            steps.append(
                Step(
                    "corpus",
                    self.adloco("prepare-corpus", "--config", self.config["default"], "--out", raw),
                    self.limit("corpus"),
                )
            )
        for exp in ("default", "paper-shape"):
            folder = self.data_dir(exp)
            if exp in missing:
                command = self.adloco(
                    "tokenize", "--config", self.config[exp], "--raw", raw, "--out", folder
                )
                needs = ("corpus",)
            else:  # carried: read the manifest only
                command, needs = [self.py, "-c", "pass"], ()
            steps.append(
                Step(
                    f"data-{exp}",
                    command,
                    self.limit(f"data-{exp}"),
                    partial(figures.manifest, folder),
                    needs,
                )
            )
        return steps

    def calibrate(self, exp: str, data_step: str) -> Step:
        out = self.calibration_dir(exp) / f"{self.device_name[exp]}.json"
        command = self.adloco(
            "calibrate",
            "--config",
            self.config[exp],
            "--data",
            self.data_dir(exp),
            "--device",
            self.device_name[exp],
            "--out",
            out,
            "--threads",
            self.threads,
        )
        return Step(
            f"calibrate-{exp}",
            command,
            self.limit(f"calibrate-{exp}"),
            partial(figures.calibration, out),
            (data_step,),
        )

    def train_command(self, exp: str, run: str, config_exp: str | None = None) -> tuple[list, Path]:
        config_exp = config_exp or exp
        out = self.work / "runs" / exp / run
        command = self.adloco(
            "train",
            "--config",
            self.config[config_exp],
            "--run-name",
            run,
            "--seed",
            0,
            "--data",
            self.data_dir("default" if config_exp == "distributed" else config_exp),
            "--calibration",
            self.calibration_dir(config_exp),
            "--out",
            out,
            "--checkpoints",
            self.work / "checkpoints" / exp / run,
            "--no-progress",
            "--threads",
            self.threads,
        )
        return command, out

    def train(self, exp: str, run: str) -> Step:
        command, out = self.train_command(exp, run)
        name = f"train-{exp}-{run}"
        return Step(
            name, command, self.limit(name), partial(figures.training, out), (f"calibrate-{exp}",)
        )

    def train_vectorized(self, exp: str, run: str) -> Step:
        """The run with its slots stacked (``slot_execution: vectorized``), beside sequential."""
        command, out = self.train_command(exp, f"{run}-vectorized")
        _, sequential = self.train_command(exp, run)
        name = f"train-{exp}-{run}-vectorized"
        return Step(
            name,
            command,
            self.limit(name),
            partial(figures.vectorized_training, out, sequential),
            (f"calibrate-{exp}",),
        )

    def bench(self, exp: str, args: list[str]) -> Step:
        out = self.work / f"bench-{exp}.json"
        full_paper = exp == "paper-shape" and self.size == "full"
        vocab = ["--vocab", str(configs.LLAMA2_VOCAB)] if full_paper else []
        command = [
            self.py,
            BENCH,
            "--config",
            self.config[exp],
            "--device",
            self.device,
            "--threads",
            str(self.threads),
            *vocab,
            *args,
            "--json",
            out,
        ]
        if self.peak_tflops:
            command += ["--peak-tflops", str(self.peak_tflops)]
        return Step(
            f"bench-{exp}",
            command,
            self.limit(f"bench-{exp}"),
            partial(figures.bench, out),
            (f"data-{exp}",),
        )

    def distributed_steps(self) -> list[Step]:
        cal = self.calibration_dir("distributed") / "dist.json"
        calibrate = self.adloco(
            "calibrate",
            "--config",
            self.config["distributed"],
            "--data",
            self.data_dir("default"),
            "--device",
            "dist",
            "--out",
            cal,
            "--threads",
            "1",
        )
        one, one_out = self.train_command("distributed-one", "adloco", "distributed")
        two, two_out = self.train_command("distributed-two", "adloco", "distributed")
        two = [
            self.py,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            *two[1:],
        ]
        return [
            Step(
                "distributed-calibrate",
                calibrate,
                self.limit("distributed-calibrate"),
                partial(figures.calibration, cal),
                ("data-default",),
            ),
            Step(
                "distributed-1-process",
                one,
                self.limit("distributed-1-process"),
                needs=("distributed-calibrate",),
            ),
            Step(
                "distributed-2-processes",
                two,
                self.limit("distributed-2-processes"),
                partial(figures.same_run, one_out, two_out),
                ("distributed-calibrate", "distributed-1-process"),
                env={"OMP_NUM_THREADS": "1"},
            ),
        ]


def describe(steps: list[Step]) -> str:
    return "\n".join(
        f"{s.name} ({s.limit_s:.0f} s): {shlex.join(map(str, s.command))}" for s in steps
    )
