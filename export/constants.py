"""Constant tensors → ConstantPayloads: effective-dtype bytes under their sha256 key.

Nothing here holds a second copy of the weights. Each tensor's bytes are made
when needed — a zero-copy view of a contiguous tensor already in its stored dtype,
or one converted tensor at a time — once to hash them and once more when the
writer asks for them.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Sequence

import torch

from vkx.export.dtypes import FP16_MAX, stored_dtype
from vkx.export.lower import ConstantSource
from vkx.format import ConstantPayload


def constant_bytes(tensor: torch.Tensor, fp16: bool) -> memoryview:
    """The tensor's own elements, row-major, in their stored dtype (never a view's whole storage)."""
    stored = stored_dtype(tensor.dtype, fp16)
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    if data.dtype != stored:
        data = data.to(stored)
        if stored == torch.float16:
            data.clamp_(-FP16_MAX, FP16_MAX)
    data = data.contiguous()
    return memoryview(data.numpy()).cast("B")


def stored_nbytes(tensor: torch.Tensor, fp16: bool) -> int:
    return tensor.numel() * stored_dtype(tensor.dtype, fp16).itemsize


def _reader(tensor: torch.Tensor, fp16: bool) -> Callable[[], memoryview]:
    return lambda: constant_bytes(tensor, fp16)


def make_payloads(sources: Sequence[ConstantSource], fp16: bool,
                  on_hashed: Callable[[int], None] | None = None) -> list[ConstantPayload]:
    """One payload per constant_id; identical bytes (tied weights) get identical keys."""
    payloads = []
    for source in sources:
        data = constant_bytes(source.tensor, fp16)
        key = hashlib.sha256(data).hexdigest()
        payloads.append(ConstantPayload(key, data.nbytes, _reader(source.tensor, fp16)))
        del data
        if on_hashed is not None:
            on_hashed(payloads[-1].nbytes)
    return payloads
