"""Make et_mlp_methods.pte, ExecuTorch 1.5.1's own two-method file (run with executorch==1.5.1):
the MLP of et_models.py as `one` (batch 1) and `four` (batch 4), each method lowered to
VulkanBackend by `to_edge_transform_and_lower` with a dict of ExportedPrograms.

    python tests/data/make_et_methods_file.py
"""
from __future__ import annotations

from pathlib import Path

import torch
from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
from executorch.exir import to_edge_transform_and_lower

from et_models import MLP

HERE = Path(__file__).resolve().parent


def main() -> None:
    torch.manual_seed(0)
    model = MLP().eval()
    programs = {"one": torch.export.export(model, (torch.randn(1, 8),)),
                "four": torch.export.export(model, (torch.randn(4, 8),))}
    et = to_edge_transform_and_lower(programs, partitioner=[VulkanPartitioner()]).to_executorch()
    (HERE / "et_mlp_methods.pte").write_bytes(et.buffer)


if __name__ == "__main__":
    main()
