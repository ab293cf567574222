"""The models behind ExecuTorch's quantized sample files (made by make_et_quant_files.py).

`build(name)` makes the seeded float model and quantizes it exactly as the script did
(torchao's quantize_, or ExecuTorch's PT2E VulkanQuantizer weight-only flow), so torch
running it is the oracle for the file.
"""
from __future__ import annotations

import torch
from torch import nn
from torchao.quantization import IntxWeightOnlyConfig, quantize_
from torchao.quantization.granularity import PerAxis, PerGroup


class TinyLM(nn.Module):
    """An embedding and two Linears (ExecuTorch 1.5.1 fails to export a 4-bit Linear whose N is not a
    multiple of 4, so the padded-scale case is tested on a hand-built graph)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 128)
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, 32)

    def forward(self, ids):
        return self.fc2(torch.relu(self.fc1(self.embed(ids))))


def _weights(bits: int) -> dict[str, IntxWeightOnlyConfig]:
    """Each layer's torchao config: several group sizes in one file."""
    dtype = torch.int4 if bits == 4 else torch.int8
    return {"embed": IntxWeightOnlyConfig(weight_dtype=dtype, granularity=PerGroup(32)),
            "fc1": IntxWeightOnlyConfig(weight_dtype=dtype, granularity=PerGroup(64 if bits == 4 else 32)),
            "fc2": IntxWeightOnlyConfig(weight_dtype=dtype, granularity=PerAxis(0) if bits == 8 else PerGroup(32))}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, 32, bias=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


FILES = {"et_q4_lm": 4, "et_q8_lm": 8, "et_pt2e_q4_mlp": 4, "et_pt2e_q8_mlp": 8}
"""file stem -> weight bits."""


def example(name: str) -> torch.Tensor:
    if name.startswith("et_pt2e"):
        return torch.randn(3, 128, generator=torch.Generator().manual_seed(1))
    return torch.tensor([[3, 63, 0, 17, 5]])


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    if name.startswith("et_pt2e"):
        return _pt2e(MLP().eval(), FILES[name], example(name))
    model = TinyLM().eval()
    for layer, config in _weights(FILES[name]).items():
        quantize_(model, config, filter_fn=lambda module, fqn, layer=layer: fqn == layer)
    return model


def _pt2e(model: nn.Module, bits: int, x: torch.Tensor) -> nn.Module:
    """ExecuTorch's weight-only PT2E flow: per-channel symmetric weights, calibrated on `x`."""
    from executorch.backends.vulkan.quantizer.vulkan_quantizer import (VulkanQuantizer,
                                                                       get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = VulkanQuantizer().set_global(get_symmetric_quantization_config(is_dynamic=False, weight_bits=bits))
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)
    return convert_pt2e(prepared)
