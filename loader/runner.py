"""`Program`: a loaded graph you can call with torch tensors (or numpy arrays).

Inputs are checked (count, shape, dtype; int64 and int32 are interchangeable,
cast to int32 on the way in), written into host-visible io buffers, the
pre-recorded command buffer is replayed, and outputs come back in the dtype
the graph declares. One output gives one tensor; several give a tuple.
"""
from __future__ import annotations

import numpy as np

from vkx.format import vkgraph as g
from vkx.loader.errors import InputError, LoadError
from vkx.loader.graph import RTensor
from vkx.loader.memory import Buffer
from vkx.loader.prepack import SOURCE_NUMPY, gpu_numpy

_INTS = (g.DataType.INT32, g.DataType.INT64)
_INT_NUMPY = (np.dtype(np.int32), np.dtype(np.int64))  # interchangeable for integer inputs


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.detach().cpu().contiguous().numpy()
    return np.asarray(x)


class _Port:
    """One graph input or output: its shape, its dtype as the caller sees it, and its io buffer."""
    __slots__ = ("shape", "dtype", "accepts", "view")

    def __init__(self, t: RTensor, io: Buffer):
        self.shape = t.arg.shape
        self.dtype = SOURCE_NUMPY[t.source_dtype]
        self.accepts = (self.dtype, *_INT_NUMPY) if t.source_dtype in _INTS else (self.dtype,)
        self.view = np.frombuffer(io.mapped(), gpu_numpy(t.arg.dtype), count=t.arg.numel)


class Program:
    def __init__(self, state, graph: g.VkGraph, builder, io_in, io_out, schedule: str, upload: str):
        self._state = state
        self.graph = graph
        self.schedule = schedule
        self.upload = upload
        self.device = state.device
        self.ledger = state.allocator.ledger
        self.timeline = state.timeline
        self.copies_per_weight_byte = state.uploader.copies_per_byte
        self.weight_bytes = state.uploader.weight_bytes
        self.dispatch_count = len(builder.dispatches)
        self._executor = state.executor
        self._in = [_Port(t, io) for io, t in io_in]
        self._out = [_Port(t, io) for t, io in io_out]
        self.closed = False
        self._executed = False

    # -- signatures --------------------------------------------------------------
    @property
    def input_specs(self) -> list[tuple[tuple[int, ...], str]]:
        return [(p.shape, p.dtype.name) for p in self._in]

    @property
    def output_specs(self) -> list[tuple[tuple[int, ...], str]]:
        return [(p.shape, p.dtype.name) for p in self._out]

    # -- calling -------------------------------------------------------------------
    def run_numpy(self, *arrays) -> list[np.ndarray]:
        if self.closed:
            raise LoadError("program is closed")
        if len(arrays) != len(self._in):
            raise InputError(f"expected {len(self._in)} input(s), got {len(arrays)}")
        for i, (x, p) in enumerate(zip(arrays, self._in)):
            a = _to_numpy(x)
            if tuple(a.shape) != p.shape:
                raise InputError(f"input {i}: shape {tuple(a.shape)}, expected {p.shape}")
            if a.dtype not in p.accepts:
                raise InputError(f"input {i}: dtype {a.dtype}, expected {p.dtype}")
            np.copyto(p.view, a.reshape(-1), casting="unsafe")
        self._executor.run()
        if not self._executed:
            self._executed = True
            self.timeline.mark("after execute")
        return [p.view.astype(p.dtype, copy=True).reshape(p.shape) for p in self._out]

    def __call__(self, *tensors):
        outs = self.run_numpy(*tensors)
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            res = outs
        else:
            res = [torch.from_numpy(o) for o in outs]
        return res[0] if len(res) == 1 else tuple(res)

    # -- memory ----------------------------------------------------------------------
    @property
    def memory(self) -> dict:
        return {"schedule": self.schedule, "upload": self.upload,
                "device": self.device.name,
                "weight_bytes": self.weight_bytes,
                "copies_per_weight_byte": self.copies_per_weight_byte,
                "ledger": self.ledger.snapshot(),
                "heap_budget": self.device.heap_budget() if not self.closed else None,
                "phases": self.timeline.as_list()}

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._in = self._out = []  # drop views before the memory goes
        self._state.close()
        self.device.check()

    def __enter__(self) -> "Program":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:
                pass

