"""Constant tensors → ConstantPayloads: effective-dtype bytes under their sha256 key.

Nothing here holds a second copy of the weights. Each tensor's bytes are made
when needed — a zero-copy view of a contiguous tensor already in its stored dtype,
or one converted tensor at a time — once to hash them (ahead, while torch.export
runs) and once more when the writer asks for them.
"""
from __future__ import annotations

import hashlib
import threading
from typing import Callable, Iterable, Sequence

import torch

from vkx.export.dtypes import FP16_MAX, SUPPORTED, stored_dtype
from vkx.export.lower import ConstantSource
from vkx.format import ConstantPayload


def constant_bytes(tensor: torch.Tensor, fp16: bool) -> memoryview:
    """The tensor's own elements, row-major, in their stored dtype (never a view's whole storage)."""
    stored = stored_dtype(tensor.dtype, fp16)
    # at most one copy: `to` moves, converts and compacts at once; it aliases a tensor already on the CPU
    # in `stored` (even a strided one), which `contiguous` then compacts
    data = tensor.detach().to("cpu", stored, memory_format=torch.contiguous_format).contiguous()
    if stored == torch.float16 and tensor.dtype != stored:
        data.clamp_(-FP16_MAX, FP16_MAX)  # a fresh copy: overflow to ±inf becomes the largest half
    return memoryview(data.numpy()).cast("B")


def stored_nbytes(tensor: torch.Tensor, fp16: bool) -> int:
    return tensor.numel() * stored_dtype(tensor.dtype, fp16).itemsize


def _reader(tensor: torch.Tensor, fp16: bool) -> Callable[[], memoryview]:
    return lambda: constant_bytes(tensor, fp16)


class KeyCache:
    """sha256 keys of constants' stored bytes, by tensor identity.

    `start` hashes the model's tensors in a background thread while torch.export
    traces the model (hashlib releases the GIL on large buffers); `key` waits for it
    and hashes whatever it has not seen (lifted constants, scalars).
    """

    def __init__(self, fp16: bool):
        self.fp16 = fp16
        self._keys: dict[tuple, str] = {}
        self._held: list[torch.Tensor] = []
        """The hashed tensors, kept alive so that no other tensor takes their address."""
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start(self, tensors: Iterable[torch.Tensor]) -> None:
        self._held = list(tensors)
        self._thread = threading.Thread(target=self._hash_all, name="vkx-hash", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop hashing ahead (the export failed or is done)."""
        self._stopped = True
        self.wait()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def key(self, tensor: torch.Tensor) -> str:
        self.wait()
        return self._hash(tensor)

    def _hash(self, tensor: torch.Tensor) -> str:
        """The tensor's key; its bytes are read only the first time its identity is seen."""
        identity = tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), self.fp16
        if identity not in self._keys:
            self._keys[identity] = hashlib.sha256(constant_bytes(tensor, self.fp16)).hexdigest()
        return self._keys[identity]

    def _hash_all(self) -> None:
        for tensor in self._held:  # a state dict lists a tied tensor under each of its names
            if self._stopped:
                return
            if tensor.dtype in SUPPORTED and tensor.numel():  # others are refused later, in order
                self._hash(tensor)


def make_payloads(sources: Sequence[ConstantSource], keys: KeyCache,
                  on_hashed: Callable[[int], None] | None = None) -> list[ConstantPayload]:
    """One payload per constant_id; identical bytes (tied weights) get identical keys."""
    payloads = []
    for source in sources:
        nbytes = stored_nbytes(source.tensor, keys.fp16)
        payloads.append(ConstantPayload(keys.key(source.tensor), nbytes, _reader(source.tensor, keys.fp16)))
        if on_hashed is not None:
            on_hashed(nbytes)
    return payloads
