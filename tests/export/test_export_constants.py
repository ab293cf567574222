"""Constant bytes: device dtype (64-bit narrowed), only a view's own elements, zero-copy reads,
keys named after the state dict, and tied (or identical) weights stored once, in every --dtype."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
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
    view = constant_bytes(weight)
    assert view.nbytes == weight.numel() * 4
    assert np.frombuffer(view, dtype=np.uint8).ctypes.data == weight.data_ptr()


def test_a_view_gives_its_own_elements_not_its_storage():
    storage = torch.arange(20, dtype=torch.float32)
    view = storage[4:8]
    assert np.frombuffer(constant_bytes(view), dtype=np.float32).tolist() == [4, 5, 6, 7]
    transposed = storage[:6].view(2, 3).t()
    assert np.frombuffer(constant_bytes(transposed), dtype=np.float32).tolist() == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize("dtype, narrowed", [(torch.float32, np.float32), (torch.float16, np.float16),
                                             (torch.int64, np.int32), (torch.float64, np.float32)])
def test_a_strided_tensor_is_narrowed_and_compacted_in_one_copy(dtype, narrowed):
    transposed = (torch.randn(64, 32) * 100).to(dtype).t()
    with torch.profiler.profile() as profile:
        view = constant_bytes(transposed)
    assert sum(event.count for event in profile.key_averages() if event.key == "aten::copy_") == 1
    assert np.array_equal(np.frombuffer(view, dtype=narrowed).reshape(32, 64), transposed.numpy().astype(narrowed))


def test_device_dtypes():
    as_list = lambda t, dtype: np.frombuffer(constant_bytes(t), dtype=dtype).tolist()  # noqa: E731
    assert as_list(torch.tensor([1, -2], dtype=torch.int64), np.int32) == [1, -2]
    assert as_list(torch.tensor([0.5], dtype=torch.float64), np.float32) == [0.5]
    assert as_list(torch.tensor([1.5, -65504.0], dtype=torch.float16), np.float16) == [1.5, -65504.0]
    assert as_list(torch.tensor([True, False]), np.uint8) == [1, 0]
    assert as_list(torch.tensor([-3, 7], dtype=torch.int8), np.int8) == [-3, 7]
    bf16 = torch.tensor([1.0, -2.5, 3e38], dtype=torch.bfloat16)
    assert as_list(bf16, np.uint16) == bf16.view(torch.int16).numpy().view(np.uint16).tolist()
    assert as_list(bf16, np.uint16)[:2] == [0x3F80, 0xC020]  # the upper halves of float32 1.0 and -2.5


def test_keys_are_names_and_equal_bytes_share_the_first():
    tensor, other = torch.randn(3, 5), torch.randn(3, 5)
    sources = [ConstantSource("w", tensor), ConstantSource("lifted_0", other), ConstantSource("v", tensor.clone()),
               ConstantSource("as_int", tensor.view(torch.int32))]
    payloads = make_payloads(sources, KeyCache(), {constants.identity(tensor): ["w", "tied_w"]})
    assert [(p.key, p.aliases) for p in payloads] == [("w", ("tied_w", "v")), ("lifted_0", ()), ("w", ("tied_w", "v")),
                                                       ("as_int", ())]  # equal bytes of another dtype: another tensor
    assert payloads[0].nbytes == 60 and bytes(payloads[0].read()) == tensor.numpy().tobytes()


def test_keys_hashed_ahead_are_reused_and_views_are_told_apart():
    weight = torch.randn(8, 8)
    keys = KeyCache()
    keys.start([weight, weight])
    keys.wait()
    assert len(keys._keys) == 1
    assert keys.key(weight) == hashlib.sha256(weight.numpy().tobytes()).hexdigest()
    assert keys.key(weight.t()) == hashlib.sha256(weight.t().contiguous().numpy().tobytes()).hexdigest()
    assert keys.key(weight[:4]) != keys.key(weight)


def test_a_tensor_listed_twice_is_hashed_once(monkeypatch):
    read = []

    def counted(tensor: torch.Tensor) -> memoryview:
        read.append(tensor)
        return constant_bytes(tensor)
    monkeypatch.setattr(constants, "constant_bytes", counted)
    weight = torch.randn(8, 8)
    keys = KeyCache()
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


@pytest.mark.parametrize("dtype, itemsize", [("fp32", 4), ("bf16", 2)])
def test_tied_and_identical_weights_are_stored_once(dtype, itemsize, tmp_path):
    path = tmp_path / "lm.pte"
    report = vkx.export_model(tied_language_model(), (torch.tensor([[1, 2, 3]]),), path, dtype=dtype)
    check_file(path)
    weight_bytes = 100 * 32 * itemsize
    assert report.constant_bytes == weight_bytes + (32 * 32 + 32) * itemsize
    with ProgramFile.open(path) as program:
        assert sorted(program.named_data) == ["a.bias", "a.weight", "b.bias", "b.weight", "embed.weight", "head.weight"]
        assert len(set(program.named_data.values())) == 3
        graph = program.vulkan.graph
    assert {ref.named_key for ref in graph.constants} == {"embed.weight", "a.weight", "a.bias"}
    assert path.stat().st_size < report.constant_bytes + weight_bytes  # not twice
