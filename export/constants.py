"""Constant tensors → ConstantPayloads: device-dtype bytes under their names.

A stored tensor's key is its first state-dict name; its other names (a tied weight's, or
another constant's with identical bytes) are its aliases (docs/format.md, "Tensor names").
Identical bytes are found by sha256 and stored once, in every method of a file (`Names`): a name
two methods give to different bytes (a folded `arange(t)` of each call's length) is kept by the
first and numbered for the others.

Nothing here holds a second copy of the weights. Each tensor's bytes are made
when needed — a zero-copy view of a contiguous tensor already in its device dtype
(`--dtype` converted the module before the trace), or one narrowed or compacted
tensor at a time — once to hash them (ahead, while torch.export runs) and once
more when the writer asks for them.
"""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import torch

from vkx.export.dtypes import of, on_device, supported, torch_dtype
from vkx.export.lower import ConstantSource
from vkx.format import ConstantPayload


@dataclass(frozen=True)
class Reference:
    """A tensor of a safetensors checkpoint: its name there and the file."""
    key: str
    file: str


def constant_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's own elements, row-major, in their device dtype (never a view's whole storage)."""
    stored = torch_dtype(on_device(tensor.dtype))
    # at most one copy: `to` moves, narrows and compacts at once; it aliases a tensor already on the CPU
    # in `stored` (even a strided one), which `contiguous` then compacts
    data = tensor.detach().to("cpu", stored, memory_format=torch.contiguous_format).contiguous()
    if stored == torch.bfloat16:
        data = data.view(torch.int16)  # numpy has no bfloat16: its bits
    return memoryview(data.numpy()).cast("B")


def stored_nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * on_device(tensor.dtype).itemsize


def identity(tensor: torch.Tensor) -> tuple:
    """What tells one tensor's bytes from another's: where they are and how they are laid out."""
    return tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride())


def state_names(module: torch.nn.Module) -> dict[tuple, list[str]]:
    """Every state-dict name of each of the module's tensors (several for a tied one), by identity."""
    names: dict[tuple, list[str]] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        names.setdefault(identity(tensor), []).append(name)
    return names


def _reader(tensor: torch.Tensor) -> Callable[[], memoryview]:
    return lambda: constant_bytes(tensor)


class KeyCache:
    """sha256 keys of constants' stored bytes, by tensor identity.

    `start` hashes the model's tensors in a background thread while torch.export
    traces the model (hashlib releases the GIL on large buffers); `key` waits for it
    and hashes whatever it has not seen (lifted constants, non-persistent buffers).
    """

    def __init__(self) -> None:
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
        seen = identity(tensor)
        if seen not in self._keys:
            self._keys[seen] = hashlib.sha256(constant_bytes(tensor)).hexdigest()
        return self._keys[seen]

    def _hash_all(self) -> None:
        for tensor in self._held:  # a state dict lists a tied tensor under each of its names
            if self._stopped:
                return
            # others are refused later, in order; a tensor subclass (torchao's weights) is repacked
            # before it is stored, and its bytes are not the numpy view of a plain tensor
            if supported(tensor.dtype) and tensor.numel() and type(tensor) in (torch.Tensor, torch.nn.Parameter):
                self._hash(tensor)


Digest = tuple  # (sha256, dtype, shape): what one stored tensor is


class Names:
    """The named-data names of one file's constants, over all its methods: each distinct tensor
    (Digest) gets names no other tensor has, the first one its key. `checkpoint_keys` are taken
    by a referenced checkpoint: a tensor stored here under one of them (a cast copy of a
    checkpoint tensor) is numbered, so that a key never names two tensors."""

    def __init__(self, checkpoint_keys: Iterable[str] = ()) -> None:
        self.groups: dict[Digest, list[str]] = {}
        self._owner: dict[str, Digest] = {key: ("checkpoint",) for key in checkpoint_keys}

    def add(self, digest: Digest, names: Sequence[str]) -> None:
        group = self.groups.setdefault(digest, [])
        for name in names:
            unique, n = name, 1
            while self._owner.setdefault(unique, digest) != digest:
                unique, n = f"{name}.{n}", n + 1
            if unique not in group:
                group.append(unique)


def make_payloads(sources: Sequence[ConstantSource], keys: KeyCache, names: dict[tuple, list[str]],
                  on_hashed: Callable[[int], None] | None = None,
                  references: Mapping[tuple, Reference] | None = None,
                  taken: Names | None = None) -> list[ConstantPayload]:
    """One payload per constant_id, named: identical bytes get one key (the first name) and every
    name of every constant holding them as aliases.

    `names`: state_names() of the exported module. A constant that is none of its tensors (a
    lifted or folded constant, a quantized pack) keeps the name torch.export or vkx gave it.
    `references`: by identity(), the tensors that are a checkpoint's own bytes, stored as the
    device stores them; each is a payload `stored_in` its file under its checkpoint name (never
    read nor hashed). `taken`: the names of the file's other methods (shared over the calls).
    """
    references = references or {}
    taken = Names() if taken is None else taken
    out: dict[int, ConstantPayload] = {}
    digests = []
    for i, source in enumerate(sources):
        ref = references.get(identity(source.tensor))
        if ref is not None and of(source.tensor.dtype) == on_device(source.tensor.dtype):
            out[i] = ConstantPayload(ref.key, stored_nbytes(source.tensor), None, stored_in=ref.file)
            digests.append(None)
        else:  # equal bytes of another dtype or shape are another tensor for a checkpoint reader
            digests.append((keys.key(source.tensor), on_device(source.tensor.dtype), tuple(source.tensor.shape)))
            taken.add(digests[-1], names.get(identity(source.tensor), [source.name]))
        if on_hashed is not None:
            on_hashed(stored_nbytes(source.tensor))
    return [out[i] if digest is None else
            ConstantPayload(taken.groups[digest][0], stored_nbytes(source.tensor), _reader(source.tensor),
                            tuple(taken.groups[digest][1:]))
            for i, (source, digest) in enumerate(zip(sources, digests))]
