"""Make ExecuTorch 1.5.1's quantized Vulkan sample files in this folder (run by hand, not in CI):

    python tests/data/make_et_quant_files.py

Needs executorch==1.5.1 and torchao 0.18. Writes et_q4_lm.pte (torchao int4 group-wise weights,
which ExecuTorch's passes fuse into et_vk.linear_q4gsw / et_vk.embedding_q4gsw), et_q8_lm.pte
(torchao int8 weights, which ExecuTorch 1.5.1 keeps as torchao.dequantize_affine + linear /
embedding), and et_pt2e_q4_mlp.pte / et_pt2e_q8_mlp.pte (ExecuTorch's PT2E VulkanQuantizer
weight-only flow: et_vk.linear_qcs4w / aten._weight_int8pack_mm). The models and their
quantization are in et_quant_models.py.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torchao.utils import unwrap_tensor_subclass

from et_lower import vulkan_program
from et_quant_models import FILES, build, example

HERE = Path(__file__).resolve().parent


def main() -> None:
    for name in FILES:
        model = build(name)
        if not name.startswith("et_pt2e"):
            model = unwrap_tensor_subclass(model)
        et = vulkan_program(model, (example(name),))
        (HERE / f"{name}.pte").write_bytes(et.buffer)


if __name__ == "__main__":
    main()
