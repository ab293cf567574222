"""Make ExecuTorch-1.5.1 fp16 Vulkan sample files (run by hand with executorch==1.5.1, torch 2.13).

    python tests/data/make_et_fp16_files.py

Writes et_mlp_fp16.pte (an fp32 MLP through the partitioner's force_fp16: fp16 tensors on the
device, fp32 program inputs and outputs) and et_cnn_half.pte (the CNN as a float16 model: fp16
everywhere). Weights are seeded so reruns give the same tensors.
"""
from __future__ import annotations

from pathlib import Path

import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge_transform_and_lower

from et_models import CNN, MLP

HERE = Path(__file__).resolve().parent


def export(model: torch.nn.Module, example: tuple, name: str, options: dict) -> None:
    ep = torch.export.export(model.eval(), example)
    et = to_edge_transform_and_lower(ep, partitioner=[VulkanPartitioner(options)]).to_executorch()
    (HERE / f"{name}.pte").write_bytes(et.buffer)


def main() -> None:
    torch.manual_seed(0)
    export(MLP(), (torch.randn(1, 8),), "et_mlp_fp16", {"force_fp16": True})
    torch.manual_seed(0)
    export(CNN().half(), (torch.randn(1, 3, 8, 8).half(),), "et_cnn_half", {})


if __name__ == "__main__":
    main()
