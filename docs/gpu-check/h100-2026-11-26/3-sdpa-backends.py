"""The stack of slots at the paper's shape under each attention backend (run once, on the H100 lease).

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-check/wheels/*.whl
    PYTHONPATH=src:/tmp/site python3 docs/gpu-check/h100-2026-11-26/3-sdpa-backends.py full cuda

from the repository root at commit 56e6625 (the autocast fix in, the cuDNN exclusion not
yet): 4 slots x 2 steps of DiLoCo's settings, batch 8 then 1, each way: the
worker's sequential loop, the stack as it was, the stack without cuDNN attention, with math
attention only, and with contiguous attention inputs. Its output is 3-sdpa-backends.txt.
Since the fix the stack itself leaves cuDNN out, so "stack" no longer shows the fault.
"""
import sys, time, dataclasses, traceback
sys.path.insert(0, "scripts/gpu_check")
import torch
import configs
from torch.nn.attention import sdpa_kernel, SDPBackend
from adloco.config import load_config
from adloco.engine.inner import NodeState, Worker
from adloco.engine import stacked
from adloco.engine.stacked import SlotJob, Stack
from adloco.model.llama import build_model
import pathlib, tempfile
size = sys.argv[1]; dev = sys.argv[2]
p = configs.write(configs.paper_shape_config(size, dev), pathlib.Path(tempfile.mkdtemp()) / "c.yaml")
cfg = load_config(p)
settings = cfg.run("diloco")
if dev == "cpu":
    settings = dataclasses.replace(settings, autocast_dtype="bfloat16")
vocab, seq = 32000, cfg.data.seq_len_tokens
device = torch.device(dev)
worker = Worker(build_model(cfg.model, vocab, seq, 0), settings, device)
if dev == "cpu":
    worker.autocast_dtype = torch.bfloat16
theta = [p.detach().clone() for p in worker.params]
k, steps = 4, 2
orig = stacked._sdpa_autocast_cast
def contiguous(module, q, k_, v, *a, **kw):
    return orig(module, q.contiguous(), k_.contiguous(), v.contiguous(), *a, **kw)
for b in (8, 1):
    data = torch.randint(0, vocab, (k * b * steps, seq), generator=torch.Generator().manual_seed(0))
    own = [torch.arange(j * b * steps, (j + 1) * b * steps) for j in range(k)]
    lrs = [settings.inner_lr] * steps
    for name in ("sequential", "stack", "stack-no-cudnn", "stack-math", "stack-contiguous"):
        try:
            torch.cuda.synchronize() if dev == "cuda" else None
            t = time.perf_counter()
            if name == "sequential":
                losses = []
                for j in range(k):
                    r = worker.run_node(theta, NodeState(j), own[j], data.__getitem__, [(b,)] * steps, lrs)
                    losses.append(r.loss_sum)
            else:
                jobs = [SlotJob(NodeState(j), own[j], [(b,)] * steps) for j in range(k)]
                ctx = {"stack-no-cudnn": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
                       "stack-math": [SDPBackend.MATH]}.get(name)
                stacked.AttentionInterface.register(stacked._ONE_DTYPE_SDPA, contiguous if name == "stack-contiguous" else orig)
                if ctx:
                    with sdpa_kernel(ctx):
                        out = Stack(worker, settings).run(theta, jobs, data.__getitem__, lrs)
                else:
                    out = Stack(worker, settings).run(theta, jobs, data.__getitem__, lrs)
                losses = [None if o.result is None else o.result.loss_sum for o in out]
            torch.cuda.synchronize() if dev == "cuda" else None
            print(f"b={b} {name:18s} {time.perf_counter()-t:6.2f}s losses {losses}", flush=True)
        except Exception as e:
            print(f"b={b} {name:18s} ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
