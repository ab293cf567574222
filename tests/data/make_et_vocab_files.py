"""Make the ExecuTorch-1.5.1 files of ExecuTorch's Vulkan op vocabulary (run with executorch==1.5.1,
torch 2.13):

    python tests/data/make_et_vocab_files.py

Writes et_vocab_<block>.pte for each block of et_vocab_models.py, lowered by the VulkanPartitioner
(one delegate each, but the resnet block's mean runs on the CPU between two);
tests/regression/test_et_vocab.py lists the ops each must contain. Every model is built after
torch.manual_seed(0), so reruns give the same weights.
"""
from __future__ import annotations

from pathlib import Path

import executorch.backends.vulkan.custom_ops_lib  # noqa: F401  (torch.ops.et_vk.sdpa)
import torch

from et_lower import vulkan_program
import et_vocab_models as m

HERE = Path(__file__).resolve().parent

BLOCKS = {  # file stem -> (model, input shape)
    "res": (m.ResBlock, (1, 3, 16, 16)),
    "shape": (m.ShapeBlock, (2, 3, 12)),
    "rope": (lambda: m.RopeBlock(et_sdpa=True), (1, 8, 32)),
    "mobile": (m.MobileBlock, (1, 8, 8, 8)),
    "vit": (m.ViTBlock, (1, 3, 16, 16)),
}


def main() -> None:
    for stem, (make, shape) in BLOCKS.items():
        torch.manual_seed(0)
        model = make().eval()
        et = vulkan_program(model, (torch.randn(shape),))
        (HERE / f"et_vocab_{stem}.pte").write_bytes(et.buffer)


if __name__ == "__main__":
    main()
