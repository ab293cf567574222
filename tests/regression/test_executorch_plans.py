"""ExecuTorch 1.5.1 files with several Vulkan delegates and CPU ops between them run whole on vkx.

The files were made by tests/data/make_et_plan_files.py from the models in
tests/data/et_models.py, built after torch.manual_seed(0); the same models are
rebuilt here as the oracle.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vkx
from .oracle import oracle
from vkx.format import describe, validate
from vkx.format.common import ScalarType
from vkx.format.program import EValue, ExecutionPlan, Chain, Instruction, TensorMeta
from vkx.loader.errors import BadProgramError, LoadError, TorchMissingError, UnsupportedOpError
from vkx.loader.execute.kernels import Refused, bind
from vkx.loader.execute.plan import PlanMethod, _bind_kernels, _check_dtypes, _check_instructions
from vkx.loader.execute.method import Method
from vkx.loader.upload.trace import Timeline

from tests.data.et_models import CumsumMLP, IndexPutMLP, MiniConvNeXt, TopkSortCNN
from tests.format.test_fmt_cli import run as run_cli

DATA = Path(__file__).resolve().parents[1] / "data"

CASES = {  # file -> (model class, input shape, delegates, CPU ops in plan order)
    "et_cumsum.pte": (CumsumMLP, (2, 8), 2, ["aten::cumsum.out"]),
    "et_topk_sort.pte": (TopkSortCNN, (1, 3, 8, 8), 3, ["aten::topk.values", "aten::sort.values"]),
    "et_index_put.pte": (IndexPutMLP, (2, 8), 2, ["aten::index_put.out"]),  # indices and values: plan constants
    # issue 11: the first delegate ends at the [1, 16, 1, 1] pooled tensor; vkx returned it as the output
    "et_convnext_mini.pte": (MiniConvNeXt, (1, 3, 16, 16), 2, ["aten::as_strided_copy.out"]),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("schedule", ["lazy", "eager"])
def test_plan_file_matches_torch(name, schedule):
    x, expected = oracle(*CASES[name][:2])
    with vkx.load(DATA / name, schedule=schedule) as program:
        assert isinstance(program.only, PlanMethod) and len(program.delegates) == CASES[name][2]
        assert program.weight_bytes == validate(DATA / name).constant_bytes
        got = program(x)
        again = program(x)  # a second run starts from fresh plan values
    assert got.shape == expected.shape and got.dtype == expected.dtype
    scale = expected.abs().max().item()
    assert (got - expected).abs().max().item() <= 1e-4 * scale
    assert torch.equal(got, again)


def test_plan_program_closes_every_delegate():
    with vkx.load(DATA / "et_topk_sort.pte") as program:
        delegates = list(program.delegates.values())
        memory = program.memory
    assert all(d.closed for d in delegates)
    assert all(d.ledger.is_zero for d in delegates)
    assert len(memory["delegates"]) == 3 and memory["weight_bytes"] == sum(m["weight_bytes"] for m in memory["delegates"])
    with pytest.raises(LoadError, match="closed"):
        program(oracle(*CASES["et_topk_sort.pte"][:2])[0])


def test_run_numpy_and_input_checks():
    x, expected = oracle(*CASES["et_cumsum.pte"][:2])
    with vkx.load(DATA / "et_cumsum.pte") as program:
        assert program.input_specs == [((2, 8), "float32")] and program.output_specs == [((2, 4), "float32")]
        (got,) = program.run_numpy(x.numpy())
        with pytest.raises(vkx.loader.errors.InputError, match="expected torch.float32"):
            program(x.double())
    assert abs(got - expected.numpy()).max() <= 1e-4 * expected.abs().max().item()


def test_one_delegate_keeps_the_fast_path():
    with vkx.load(DATA / "et_mlp.pte") as program:
        assert type(program.only) is Method


@pytest.mark.parametrize("name", CASES)
def test_validate_and_describe_list_every_delegate_and_cpu_op(name):
    _, _, n, ops = CASES[name]
    report = validate(DATA / name)
    assert report.delegates == n and report.cpu_ops == ops and not report.warnings
    d = describe(DATA / name)
    assert [x["vulkan"]["index"] for x in d["delegates"]] == list(range(n))
    plan = d["program"]["plans"][0]
    assert [c["op"] for c in plan["calls"] if c["kind"] == "KernelCall"] == ops
    assert [c["delegate"] for c in plan["calls"] if c["kind"] == "DelegateCall"] == list(range(n))
    assert d["totals"]["W"] == report.constant_bytes == sum(x["vulkan"]["totals"]["W"] for x in d["delegates"])


def test_inspect_and_validate_commands_print_every_delegate_and_cpu_op():
    code, out, err = run_cli("inspect", DATA / "et_topk_sort.pte")
    assert code == 0, err
    for text in ("delegate 0 of plan 0", "delegate 1 of plan 0", "delegate 2 of plan 0",
                 "aten::topk.values", "aten::sort.values"):
        assert text in out
    code, out, err = run_cli("validate", DATA / "et_topk_sort.pte")
    assert code == 0, err
    assert "3 delegate(s)" in out and "CPU ops: aten::topk.values, aten::sort.values" in out
    code, out, err = run_cli("inspect", DATA / "et_cumsum.pte", "--json")
    assert code == 0, err
    assert json.loads(out)["program"]["plans"][0]["cpu_ops"] == {"aten::cumsum.out": 1}


def test_cpu_ops_vkx_cannot_run_are_refused_in_one_error(tmp_path, monkeypatch):
    data = (DATA / "et_topk_sort.pte").read_bytes()
    for old, new in ((b"aten::topk", b"aten::tOpk"), (b"aten::sort", b"aten::sOrt")):
        assert data.count(old) == 1
        data = data.replace(old, new)  # same length: the FlatBuffer stays valid
    path = tmp_path / "unknown_ops.pte"
    path.write_bytes(data)
    assert validate(path).cpu_ops == ["aten::tOpk.values", "aten::sOrt.values"]

    def no_gpu_work(*args, **kwargs):
        raise AssertionError("a delegate was loaded before the plan was refused")
    monkeypatch.setattr("vkx.loader.execute.plan.load_source", no_gpu_work)
    with pytest.raises(UnsupportedOpError) as info:
        vkx.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert "aten::tOpk.values (no such torch op)" in message and "aten::sOrt.values (no such torch op)" in message


BLOCKED = """
import sys
sys.modules["torch"] = None
import vkx
from vkx.loader.errors import LoadError
import numpy as np
try:
    with vkx.load(sys.argv[1]) as program:
        program.run_numpy(*[np.zeros(shape, dtype) for shape, dtype in program.input_specs])
        print("ran")
except LoadError as e:
    print(f"{type(e).__name__}: {e}")
    sys.exit(2)
"""


def test_without_torch_a_plan_file_is_one_typed_error():
    p = subprocess.run([sys.executable, "-c", BLOCKED, str(DATA / "et_cumsum.pte")],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "VKX_VALIDATION": "1"})
    assert p.returncode == 2, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{TorchMissingError.__name__}: ")
    assert "not installed" in lines[0] and "aten::cumsum.out" in lines[0]
    p = subprocess.run([sys.executable, "-c", BLOCKED, str(DATA / "et_mlp.pte")],  # one delegate: no torch needed
                       capture_output=True, text=True, timeout=120, env={**os.environ, "VKX_VALIDATION": "1"})
    assert (p.returncode, p.stdout) == (0, "ran\n"), p.stderr


# -- the interpreter on a hand-made plan (no delegates): jumps, moves, frees ---------------------

def _tensor(n: int) -> EValue:
    return EValue("Tensor", TensorMeta(ScalarType.FLOAT, (n,), (0,), 0, 1, 0, 0))


def _plan(values, instructions, operators, inputs, outputs) -> ExecutionPlan:
    return ExecutionPlan("forward", tuple(values), tuple(inputs), tuple(outputs),
                         (Chain((), (), tuple(instructions), True),), tuple(operators), (), (0, 64),
                         None, None, frozenset())


def test_jumps_moves_and_frees_run_as_the_format_defines_them():
    values = [_tensor(2), _tensor(2), EValue("Bool", False), EValue("Int", 3), _tensor(2), EValue("Bool", True)]
    ops = [("aten::add", "out"), ("aten::mul", "out")]
    plan = _plan(values, [
        Instruction("JumpFalseCall", 2, (2,)),          # false: skip the add
        Instruction("KernelCall", 0, (0, 0, 3, 1, 1)),  # out = x + 3x
        Instruction("KernelCall", 1, (0, 0, 1, 1)),     # out = x * x
        Instruction("JumpFalseCall", 5, (5,)),          # true: go on to the move
        Instruction("MoveCall", -1, (1, 4)),
        Instruction("FreeCall", -1, (1,)),
    ], ops, inputs=[0], outputs=[4])
    program = PlanMethod(plan, _bind_kernels(plan, "hand.pte"), {}, {}, None, None, Timeline())  # no device: no delegate
    x = torch.tensor([3.0, -1.0])
    assert torch.equal(program(x), x * x)


def test_arguments_vkx_cannot_convert_are_refused():
    values = [_tensor(2), EValue("String", "two"), _tensor(2)]
    plan = _plan(values, [Instruction("KernelCall", 0, (0, 1, 2, 2))], [("aten::mul", "out")], [0], [2])
    with pytest.raises(Refused, match=r"aten::mul.out \(argument other: a String value for Tensor\)"):
        bind(plan, 0, (0, 1, 2, 2))
    with pytest.raises(UnsupportedOpError, match=r"hand.pte: CPU ops vkx cannot run: aten::mul.out \(argument other"):
        _bind_kernels(plan, "hand.pte")


def test_tensors_torch_has_no_dtype_for_are_refused():
    values = [_tensor(2), EValue("Tensor", TensorMeta(ScalarType.QINT8, (2,), (0,), 0, 1, 0, 0)), _tensor(2)]
    plan = _plan(values, [], [], [0], [2])
    _check_dtypes(_plan([_tensor(2)], [], [], [0], [0]), "hand.pte")
    with pytest.raises(BadProgramError, match=r"hand.pte: .* values 1 \(QINT8\)"):
        _check_dtypes(plan, "hand.pte")


@pytest.mark.parametrize("values,instruction,match", [
    ([_tensor(2)], Instruction("MoveCall", -1, (0, 5)), r"instructions\[0\]: a value id of \[0, 5\] is out of range"),
    ([_tensor(2)], Instruction("JumpFalseCall", 9, (0,)), r"instructions\[0\]: destination 9 out of range"),
    ([_tensor(2)], Instruction("KernelCall", 3, (0,)), r"instructions\[0\]: operator 3 out of range"),
    ([_tensor(2)], Instruction("DelegateCall", 0, (0,)), r"delegate 0 is not a VulkanBackend delegate"),
    ([_tensor(2), EValue("IntList", (0,))], Instruction("FreeCall", -1, (0,)), r"values\[1\]: IntList items \[0\]"),
])
def test_malformed_plans_are_refused_before_anything_runs(values, instruction, match):
    with pytest.raises(BadProgramError, match=match):
        _check_instructions(_plan(values, [instruction], [], [0], [0]), {}, "hand.pte")
