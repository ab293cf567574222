"""Make et_no_delegate.pte and et_cpu_between.pte (run with executorch==1.5.1, torch 2.13):
ExecuTorch programs where its Vulkan partitioner leaves an op (remainder) on the CPU.

    python tests/data/make_et_no_delegate_files.py

et_no_delegate: remainder alone, so no Vulkan delegate at all (ExecuTorch lists one empty constant
segment and writes no extended header); et_cpu_between: remainder on the CPU, then * 2 + 1 in a
Vulkan delegate.
"""
from __future__ import annotations

from pathlib import Path

import torch

from et_lower import vulkan_program

HERE = Path(__file__).resolve().parent


class Remainder(torch.nn.Module):
    def forward(self, x):
        return torch.remainder(x, 0.75)


class RemainderThenAffine(torch.nn.Module):
    def forward(self, x):
        return torch.remainder(x, 0.75) * 2 + 1


def main() -> None:
    for name, model in (("et_no_delegate", Remainder()), ("et_cpu_between", RemainderThenAffine())):
        program = vulkan_program(model, (torch.randn(3, 5),))
        (HERE / f"{name}.pte").write_bytes(program.buffer)


if __name__ == "__main__":
    main()
