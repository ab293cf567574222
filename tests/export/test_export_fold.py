"""Constant folding at export (vkx.export.fold) and the source lines of library frames."""
from __future__ import annotations

import os
import types

import pytest
import torch

from vkx.export import UnsupportedOpsError
from vkx.export.lower import lower
from vkx.export.support import source_line
from vkx.export.trace import trace

from .export_helpers import Fn, check_graph


class CausalMask(torch.nn.Module):
    """A mask built from the input's shape and a buffer (as transformers builds one), applied to x."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.5, 0.25]))

    def forward(self, x):
        n = x.shape[-1]
        positions = torch.arange(n)
        mask = positions[None, :] <= positions[:, None]
        angles = torch.cos(positions[:, None].float() * self.inv_freq[0])
        return torch.where(mask, x, torch.full_like(x, -1.0)) * angles


def _ops(program):
    return [call.name for call in program.graph.chain]


def test_shape_and_buffer_ops_fold_into_constants():
    module = CausalMask().eval()
    x = torch.randn(4, 4)
    lowered = lower(trace(module, (x,)))
    check_graph(lowered.graph)
    names = [source.name for source in lowered.constants]
    assert _ops(lowered) == ["et_vk.prepack.default"] * len(names) + ["aten.where.self", "aten.mul.Tensor"]
    values = {source.name: source.tensor for source in lowered.constants}
    mask = next(t for t in values.values() if t.dtype == torch.bool)
    assert torch.equal(mask, torch.ones(4, 4).tril().bool())
    angles = next(t for t in values.values() if t.shape == (4, 1))
    assert torch.allclose(angles, torch.cos(torch.arange(4.0)[:, None]))
    fill = next(t for name, t in values.items() if t.dtype == torch.float32 and t.shape == (4, 4))
    assert torch.equal(fill, torch.full((4, 4), -1.0))


def test_parameters_are_not_folded():
    """A weight stays one constant used as stored; ops on it run on the device."""
    module = Fn(lambda m, x: x + m.w.t(), w=torch.nn.Parameter(torch.randn(3, 2)))
    lowered = lower(trace(module.eval(), (torch.randn(2, 3),)))
    assert [source.name for source in lowered.constants] == ["w"]
    assert "aten.permute_copy.default" in _ops(lowered)


def test_library_frames_have_source_lines():
    """A frame in torchvision (or any package beside torch) is the user's, not torch's."""
    packages = os.path.dirname(os.path.dirname(torch.__file__))
    trace_text = (f'  File "{packages}/torchvision/models/mobilenetv2.py", line 166, in forward\n'
                  f'    x = self.features(x)\n'
                  f'  File "{os.path.dirname(torch.__file__)}/nn/modules/conv.py", line 548, in forward\n'
                  f'    return self._conv_forward(input, self.weight, self.bias)\n')
    node = types.SimpleNamespace(meta={"stack_trace": trace_text})
    assert source_line(node) == "mobilenetv2.py:166: x = self.features(x)"


def test_random_ops_are_not_folded():
    """rand reads no tensor but gives a new value per call: it is not a constant (and vkx lacks it)."""
    module = Fn(lambda m, x: x + torch.rand(3))
    with pytest.raises(UnsupportedOpsError, match="aten.rand.default"):
        lower(trace(module.eval(), (torch.randn(3),)))


class Positions(torch.nn.Module):
    """Folds torch.arange(t) (t: the call's length, 8 in prefill, 1 in decode) and a table both
    methods compute alike."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        t = x.shape[1]
        scale = torch.full((4,), 0.5) * 3.0
        return self.proj(x) * scale + torch.arange(t, dtype=torch.float32)[None, :, None]


def test_folded_constants_of_two_methods_never_collide_by_name(tmp_path):
    import vkx
    from vkx.format import ProgramFile, validate
    module = Positions().eval()
    path = tmp_path / "two.pte"
    prefill, decode = torch.randn(1, 8, 4), torch.randn(1, 1, 4)
    vkx.export_model(module, {"prefill": (prefill,), "decode": (decode,)}, path)  # was: key 'folded.arange' used for 32 and 4 bytes
    validate(path)
    with ProgramFile.open(path) as pf:
        keys = [{c.named_key: c.length for c in v.graph.constants} for v in pf.vulkan_delegates]
    folded = [{k: n for k, n in method.items() if k.startswith("folded.")} for method in keys]
    aranges = [{k for k, n in method.items() if "arange" in k} for method in folded]
    assert all(len(a) == 1 for a in aranges) and aranges[0] != aranges[1]  # different bytes, different keys
    shared = set(folded[0]) & set(folded[1])
    assert len(shared) == 1 and "arange" not in shared.pop()  # the table: equal bytes, one key
    with vkx.load(path) as program:
        for method, x in (("prefill", prefill), ("decode", decode)):
            torch.testing.assert_close(getattr(program, method)(x), module(x), rtol=1e-6, atol=1e-6)
