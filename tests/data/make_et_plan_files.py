"""Make the ExecuTorch-1.5.1 files with several Vulkan delegates (run with executorch==1.5.1, torch 2.13).

    python tests/data/make_et_plan_files.py

Each model puts an op the Vulkan partitioner does not take between parts it
does, so the program is delegate calls with CPU kernel calls between them.
Writes et_cumsum.pte, et_topk_sort.pte, et_index_put.pte, et_convnext_mini.pte; weights are seeded
(torch.manual_seed(0) before each model is built).
"""
from __future__ import annotations

from pathlib import Path

import torch

from et_lower import vulkan_program
from et_models import CumsumMLP, IndexPutMLP, MiniConvNeXt, TopkSortCNN

HERE = Path(__file__).resolve().parent

FILES = {  # file stem -> (model class, input shape)
    "et_cumsum": (CumsumMLP, (2, 8)),
    "et_topk_sort": (TopkSortCNN, (1, 3, 8, 8)),
    "et_index_put": (IndexPutMLP, (2, 8)),
    "et_convnext_mini": (MiniConvNeXt, (1, 3, 16, 16)),
}


def main() -> None:
    for name, (model_class, shape) in FILES.items():
        torch.manual_seed(0)
        model = model_class().eval()
        et = vulkan_program(model, (torch.randn(shape),))
        plan = et.executorch_program.execution_plan[0]
        print(name, len(plan.delegates), "delegates, CPU ops:", [f"{o.name}.{o.overload}" for o in plan.operators])
        (HERE / f"{name}.pte").write_bytes(et.buffer)


if __name__ == "__main__":
    main()
