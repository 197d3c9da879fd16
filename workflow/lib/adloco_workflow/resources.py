"""What each job asks of its machine: threads, host memory, GPUs and their model.

A job that trains or measures on CUDA asks for one GPU; the default profile
allows one at a time on a local machine (``resources: gpu: 1``), the SLURM
plugin turns ``gpu`` and ``gpu_model`` into ``sbatch --gpus=[model:]1``. The
GPU model (SLURM's GPU type, e.g. a100) is a device's ``gpu_model`` in the
config, else ``ADLOCO_GPU_MODEL`` from the environment (a cluster-wide choice
kept out of the experiment's file); only CUDA jobs get one. The methods taking
``wildcards`` are the rules' threads and resources functions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def process_threads(cuda: bool) -> int:
    """CPU threads of one process that trains: one on a CPU, a few feeding a GPU."""
    return 4 if cuda else 1


class Resources:
    """The resources of one configuration's jobs, from its cluster section."""

    def __init__(self, cluster, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self.devices = {device.name: device for device in cluster.devices}
        # Processes of one training job (torchrun on its machine when more than one).
        self.train_processes = cluster.processes_per_machine
        self.gpu_model_default = environ.get("ADLOCO_GPU_MODEL") or None

    def uses_cuda(self) -> bool:
        return any(device.kind == "cuda" for device in self.devices.values())

    def _gpu_model(self, device):
        return (device.gpu_model or self.gpu_model_default) if device.kind == "cuda" else None

    def device_gpu(self, wildcards) -> int:
        return 1 if self.devices[wildcards.device].kind == "cuda" else 0

    def calibrate_threads(self, wildcards) -> int:
        """Threads of a calibration: those of one training process on the device.

        The curve it times is then the one a training process sees (one thread on a
        CPU, where parallel jobs use the cores; a few feeding a GPU), and a CPU
        calibration runs beside other jobs (the base's pretraining) as training does.
        """
        return process_threads(self.devices[wildcards.device].kind == "cuda")

    def device_gpu_model(self, wildcards) -> str | None:
        return self._gpu_model(self.devices[wildcards.device])

    def train_threads(self, wildcards) -> int:
        """CPU threads of a training job (all its processes together).

        A simulated CPU cluster runs its slots one after another in one process on
        a small model, so parallel runs use cores better than intra-op threads:
        one thread per process. A GPU process gets a few threads to feed its device.
        """
        return process_threads(self.uses_cuda()) * self.train_processes

    def train_launcher(self, wildcards) -> str:
        """torchrun on the job's machine when the config asks for several training processes."""
        if self.train_processes == 1:
            return ""
        return f"torchrun --standalone --nproc_per_node {self.train_processes} --no-python "

    def train_gpu(self, wildcards) -> int:
        """One GPU per training process on a CUDA cluster."""
        return self.train_processes if self.uses_cuda() else 0

    def cluster_gpu(self, wildcards) -> int:
        return 1 if self.uses_cuda() else 0

    def cluster_gpu_model(self, wildcards) -> str | None:
        """The GPU model of the first CUDA device: a training job runs on one kind."""
        models = [self._gpu_model(d) for d in self.devices.values() if d.kind == "cuda"]
        return models[0] if models else None

    def calibrate_mem_mb(self, wildcards) -> int:
        """Host memory of a calibration: a simulated CPU device lives in it."""
        device = self.devices[wildcards.device]
        simulated_mb = round(device.memory_gib * 1024) if device.kind == "cpu" else 0
        return 4000 + simulated_mb

    def cpu_budget_mb(self) -> int:
        """Host memory the simulated CPU devices of the config may fill."""
        return sum(
            round(device.count * device.memory_gib * 1024)
            for device in self.devices.values()
            if device.kind == "cpu"
        )
