"""Peak tensor memory of CPU code, for the calibration stage's simulated devices.

A CPU has no ``torch.cuda.max_memory_allocated``; the calibration stage
(``adloco calibrate``, :mod:`adloco.calibrate`) still needs the peak memory of
one training step to find the largest micro-batch that fits a simulated
device's budget. :class:`StorageTracker` is a ``TorchDispatchMode`` that sees
every ATen operator below autograd (forward, backward and optimizer step alike),
registers each new tensor storage an operator returns together with its size in
bytes, and drops it when the storage is freed (a ``weakref.finalize`` on the
storage object, which PyTorch keeps alive exactly as long as the C++ storage).
Live bytes and their running maximum are therefore the bytes of tensor storage
the code holds, as a GPU's caching allocator would count them, without the
rounding to allocator blocks. Outputs that alias an input (views, in-place and
``out=`` operators, known from the operator schema) allocate nothing and are
not counted. Not seen: scratch buffers a fused kernel allocates and frees
internally, and tensors created before the tracker starts (pass their bytes as
``baseline_bytes``; :func:`storage_bytes` counts them).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class SimulatedOutOfMemoryError(RuntimeError):
    """Live tensor bytes went past a simulated device's budget."""

    def __init__(self, live_bytes: int, limit_bytes: int):
        super().__init__(f"simulated out of memory: {live_bytes} bytes live, limit {limit_bytes}")
        self.live_bytes = live_bytes
        self.limit_bytes = limit_bytes


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (shared storage counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None or t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


class StorageTracker(TorchDispatchMode):
    """Live and peak bytes of tensor storage allocated while the mode is active.

    ``peak_bytes`` and ``live_bytes`` include ``baseline_bytes`` (memory that
    existed before, such as model parameters). With ``limit_bytes`` set, the
    operator that takes the live total past it raises
    :class:`SimulatedOutOfMemoryError`, as a device out of memory would.
    """

    def __init__(self, baseline_bytes: int = 0, limit_bytes: int | None = None):
        super().__init__()
        self.baseline_bytes = int(baseline_bytes)
        self.limit_bytes = limit_bytes
        self._sizes: dict[int, int] = {}
        self._new_bytes = 0
        self._peak_new_bytes = 0

    @property
    def live_bytes(self) -> int:
        return self.baseline_bytes + self._new_bytes

    @property
    def peak_bytes(self) -> int:
        return self.baseline_bytes + self._peak_new_bytes

    def reset_peak(self) -> None:
        self._peak_new_bytes = self._new_bytes

    def _release(self, key: int) -> None:
        self._new_bytes -= self._sizes.pop(key, 0)

    def _account(self, tensor: torch.Tensor, fresh: bool) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        nbytes = storage.nbytes()
        if key in self._sizes:
            # An aliasing op such as resize_ may have grown a storage we track.
            self._new_bytes += nbytes - self._sizes[key]
            self._sizes[key] = nbytes
        elif fresh:
            self._sizes[key] = nbytes
            self._new_bytes += nbytes
            weakref.finalize(storage, self._release, key)
        else:
            return
        if self._new_bytes > self._peak_new_bytes:
            self._peak_new_bytes = self._new_bytes
            if self.limit_bytes is not None and self.live_bytes > self.limit_bytes:
                raise SimulatedOutOfMemoryError(self.live_bytes, self.limit_bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        outputs = list(out) if len(returns) > 1 else [out]
        for ret, value in zip(returns, outputs, strict=False):
            fresh = ret.alias_info is None
            for t in tree_flatten(value)[0]:
                if isinstance(t, torch.Tensor) and t.device.type != "meta":
                    self._account(t, fresh)
        return out
