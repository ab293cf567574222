"""Make ExecuTorch-1.5.1 fp16 Vulkan sample files (run by hand with executorch==1.5.1, torch 2.13).

    python tests/data/make_et_fp16_files.py

Writes et_mlp_fp16.pte (an fp32 MLP through the partitioner's force_fp16: fp16 tensors on the
device, fp32 program inputs and outputs) and et_cnn_half.pte (the CNN as a float16 model: fp16
everywhere). Weights are seeded so reruns give the same tensors.
"""
from __future__ import annotations

from pathlib import Path

import torch

from et_lower import vulkan_program
from et_models import CNN, MLP

HERE = Path(__file__).resolve().parent


def export(model: torch.nn.Module, example: tuple, name: str, options: dict) -> None:
    et = vulkan_program(model.eval(), example, options)
    (HERE / f"{name}.pte").write_bytes(et.buffer)


def main() -> None:
    torch.manual_seed(0)
    export(MLP(), (torch.randn(1, 8),), "et_mlp_fp16", {"force_fp16": True})
    torch.manual_seed(0)
    export(CNN().half(), (torch.randn(1, 3, 8, 8).half(),), "et_cnn_half", {})


if __name__ == "__main__":
    main()
