"""Make ExecuTorch 1.5.1's Vulkan files of the classic image classifiers of et_cnn_models.py (run with
executorch==1.5.1, torch 2.13):

    python tests/data/make_et_cnn_files.py [NAME ...]

Writes et_cnn_<name>.pte (the fp32 model, lowered by ExecuTorch's VulkanPartitioner) and, for the
models in HALF, et_cnn_<name>_half.pte (the model as a float16 model: fp16 inputs, weights and outputs,
as make_et_fp16_files.py makes et_cnn_half.pte). Each model is et_cnn_models.build(name): built after
torch.manual_seed(0) and drawn again by a seeded generator, so reruns give the same weights;
tests/regression/test_et_cnns.py rebuilds them as its oracle. Prints the ops each file leaves on the CPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root: et_cnn_models.build imports tests.models

from et_lower import vulkan_program  # noqa: E402
import et_cnn_models as m  # noqa: E402

FILES = list(m.MODELS)
"""The models written in fp32."""
HALF = list(m.MODELS)
"""The models also written as float16 models."""


def cpu_ops(et) -> list[str]:
    """The operators the program runs outside its delegates."""
    plan = et.executorch_program.execution_plan[0]
    return sorted({op.name + (f".{op.overload}" if op.overload else "") for op in plan.operators})


def main(names: list[str]) -> None:
    for name in names or FILES:
        model, x = m.build(name)
        for half in (False, True):
            if half and name not in HALF:
                continue
            stem = f"et_cnn_{name}{'_half' if half else ''}"
            try:
                et = vulkan_program(model.half() if half else model, (x.half() if half else x,))
            except Exception as error:  # the partitioner or ExecuTorch's lowering refuses it
                print(f"{stem}: not made: {type(error).__name__}: {str(error)[:300]}")
                continue
            path = HERE / f"{stem}.pte"
            path.write_bytes(et.buffer)
            delegates = sum(1 for d in et.executorch_program.execution_plan[0].delegates)
            print(f"{stem}.pte: {len(et.buffer)} bytes, {delegates} delegate(s), CPU ops: {cpu_ops(et) or 'none'}")
            model.float()


if __name__ == "__main__":
    main(sys.argv[1:])
