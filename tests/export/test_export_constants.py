"""Constant bytes: effective dtype, only a view's own elements, zero-copy reads, sha256 keys,
and tied (or identical) weights stored once."""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from .export_helpers import Fn, check_file
from torch import nn

import vkx
from vkx.export import constants
from vkx.export.constants import KeyCache, constant_bytes, make_payloads
from vkx.export.lower import ConstantSource
from vkx.format import ProgramFile


def test_contiguous_float32_is_read_without_a_copy():
    weight = torch.randn(64, 32)
    view = constant_bytes(weight, fp16=False)
    assert view.nbytes == weight.numel() * 4
    assert np.frombuffer(view, dtype=np.uint8).ctypes.data == weight.data_ptr()


def test_a_view_gives_its_own_elements_not_its_storage():
    storage = torch.arange(20, dtype=torch.float32)
    view = storage[4:8]
    assert np.frombuffer(constant_bytes(view, fp16=False), dtype=np.float32).tolist() == [4, 5, 6, 7]
    transposed = storage[:6].view(2, 3).t()
    assert np.frombuffer(constant_bytes(transposed, fp16=False), dtype=np.float32).tolist() == [0, 3, 1, 4, 2, 5]


def test_a_strided_tensor_is_converted_and_compacted_in_one_copy():
    transposed = torch.randn(64, 32).t()
    for fp16 in (False, True):
        with torch.profiler.profile() as profile:
            view = constant_bytes(transposed, fp16)
        assert sum(event.count for event in profile.key_averages() if event.key == "aten::copy_") == 1
        dtype = np.float16 if fp16 else np.float32
        assert np.array_equal(np.frombuffer(view, dtype=dtype).reshape(32, 64), transposed.numpy().astype(dtype))


def test_effective_dtypes():
    as_list = lambda t, fp16, dtype: np.frombuffer(constant_bytes(t, fp16), dtype=dtype).tolist()  # noqa: E731
    assert as_list(torch.tensor([1, -2], dtype=torch.int64), False, np.int32) == [1, -2]
    assert as_list(torch.tensor([0.5], dtype=torch.float64), False, np.float32) == [0.5]
    assert as_list(torch.tensor([1e6, -1e6, 1.5]), True, np.float16) == [65504.0, -65504.0, 1.5]
    assert as_list(torch.tensor([True, False]), True, np.uint8) == [1, 0]


def test_keys_are_sha256_of_the_stored_bytes():
    tensor = torch.randn(3, 5)
    (payload,) = make_payloads([ConstantSource("w", tensor)], KeyCache(fp16=False))
    assert payload.key == hashlib.sha256(tensor.numpy().tobytes()).hexdigest()
    assert payload.nbytes == 60 and bytes(payload.read()) == tensor.numpy().tobytes()


def test_keys_hashed_ahead_are_reused_and_views_are_told_apart():
    weight = torch.randn(8, 8)
    keys = KeyCache(fp16=False)
    keys.start([weight, weight])
    keys.wait()
    assert len(keys._keys) == 1
    assert keys.key(weight) == hashlib.sha256(weight.numpy().tobytes()).hexdigest()
    assert keys.key(weight.t()) == hashlib.sha256(weight.t().contiguous().numpy().tobytes()).hexdigest()
    assert keys.key(weight[:4]) != keys.key(weight)


def test_a_tensor_listed_twice_is_hashed_once(monkeypatch):
    read = []

    def counted(tensor: torch.Tensor, fp16: bool) -> memoryview:
        read.append(tensor)
        return constant_bytes(tensor, fp16)
    monkeypatch.setattr(constants, "constant_bytes", counted)
    weight = torch.randn(8, 8)
    keys = KeyCache(fp16=False)
    keys.start([weight, weight])
    keys.key(weight)
    assert len(read) == 1


def tied_language_model() -> nn.Module:
    embed = nn.Embedding(100, 32)
    head = nn.Linear(32, 100, bias=False)
    head.weight = embed.weight
    twin_a, twin_b = nn.Linear(32, 32), nn.Linear(32, 32)
    with torch.no_grad():
        twin_b.weight.copy_(twin_a.weight)
        twin_b.bias.copy_(twin_a.bias)
    return Fn(lambda m, ids: m.head(m.b(m.a(m.embed(ids)))), embed=embed, head=head, a=twin_a, b=twin_b)


def test_tied_and_identical_weights_are_stored_once(tmp_path):
    path = tmp_path / "lm.pte"
    report = vkx.export_model(tied_language_model(), (torch.tensor([[1, 2, 3]]),), path)
    check_file(path)
    weight_bytes = 100 * 32 * 4
    assert report.constant_bytes == weight_bytes + 32 * 32 * 4 + 32 * 4
    with ProgramFile.open(path) as program:
        assert len(program.named_data) == 3
        graph = program.vulkan.graph
    assert len({ref.named_key for ref in graph.constants}) == 3
    assert path.stat().st_size < report.constant_bytes + weight_bytes  # not twice
