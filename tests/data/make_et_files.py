"""Make the ExecuTorch-1.5.1 sample files in this folder (run with executorch==1.5.1, torch 2.13).

    python tests/data/make_et_files.py

Writes et_mlp.pte, et_cnn.pte, et_mlp_ext.pte + its .ptd (renamed et_mlp_ext.ptd).
Weights are seeded so reruns give the same tensors.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
from pathlib import Path

import torch

from et_lower import vulkan_program
from et_models import CNN, MLP

HERE = Path(__file__).resolve().parent


def export(model: torch.nn.Module, example: tuple, name: str, external_bytes: int | None = None) -> None:
    model = model.eval()
    options = {} if external_bytes is None else {"external_constants_max_data_bytes": external_bytes}
    et = vulkan_program(model, example, options)
    (HERE / f"{name}.pte").write_bytes(et.buffer)
    if external_bytes is not None:
        with tempfile.TemporaryDirectory() as d:
            et.write_tensor_data_to_file(d)
            ptds = glob.glob(os.path.join(d, "*.ptd"))
            assert len(ptds) == 1, ptds
            shutil.copy(ptds[0], HERE / f"{name}.ptd")
            (HERE / f"{name}.ptd.tag").write_text(Path(ptds[0]).name + "\n")


def main() -> None:
    torch.manual_seed(0)
    export(MLP(), (torch.randn(1, 8),), "et_mlp")
    torch.manual_seed(0)
    export(CNN(), (torch.randn(1, 3, 8, 8),), "et_cnn")
    torch.manual_seed(0)
    export(MLP(), (torch.randn(1, 8),), "et_mlp_ext", external_bytes=1 << 20)


if __name__ == "__main__":
    main()
