"""The models behind ExecuTorch's quantized sample files (made by make_et_quant_files.py).

`build(name)` makes the seeded float model and quantizes it with torchao exactly as the
script did, so torch running it is the oracle for the file.
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


FILES = {"et_q4_lm": 4, "et_q8_lm": 8}
"""file stem -> weight bits."""
EXAMPLE = torch.tensor([[3, 63, 0, 17, 5]])


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    model = TinyLM().eval()
    for layer, config in _weights(FILES[name]).items():
        quantize_(model, config, filter_fn=lambda module, fqn, layer=layer: fqn == layer)
    return model
