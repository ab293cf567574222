"""Make ExecuTorch 1.5.1's quantized Vulkan sample files in this folder (run by hand, not in CI):

    python tests/data/make_et_quant_files.py

Needs executorch==1.5.1 and torchao 0.18. Writes et_q4_lm.pte (torchao int4 group-wise weights,
which ExecuTorch's passes fuse into et_vk.linear_q4gsw / et_vk.embedding_q4gsw) and et_q8_lm.pte
(torchao int8 weights, which ExecuTorch 1.5.1 keeps as torchao.dequantize_affine + linear /
embedding). The models and their quantization are in et_quant_models.py.
"""
from __future__ import annotations

from pathlib import Path

import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge_transform_and_lower
from torchao.utils import unwrap_tensor_subclass

from et_quant_models import EXAMPLE, FILES, build

HERE = Path(__file__).resolve().parent


def main() -> None:
    for name in FILES:
        model = unwrap_tensor_subclass(build(name))
        program = torch.export.export(model, (EXAMPLE,))
        et = to_edge_transform_and_lower(program, partitioner=[VulkanPartitioner()]).to_executorch()
        (HERE / f"{name}.pte").write_bytes(et.buffer)


if __name__ == "__main__":
    main()
