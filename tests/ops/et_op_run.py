"""Runs one case of ExecuTorch's Vulkan op suite (tests/data/et_op_cases.py) on vkx and judges it
against torch eager: through vkx's exporter ("vkx") or from ExecuTorch's own export of it ("et",
tests/data/et_op_cases/). Shared by tests/ops/test_et_op_cases.py and bench/et_op_cases.py."""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch

import vkx
from vkx.format.errors import VkxError
from vkx.loader.errors import ShaderError, ValidationError

from tests.data.et_op_cases import CASES, DTYPES, Case, runs

from .conftest import max_error, tolerance

DATA = Path(__file__).resolve().parents[1] / "data"

ET_FILES = DATA / "et_op_cases"
PATHS = ("vkx", "et")
PASS, REFUSED, WRONG, ABSENT = "pass", "refused", "wrong", "not made"
"""A run's outcomes; ABSENT: ExecuTorch itself refused to export the case (et_op_cases/refused.txt)."""

__all__ = ["CASES", "Case", "runs", "judge", "judge_together", "PATHS", "PASS", "REFUSED", "WRONG", "ABSENT"]


def _outputs(result) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _mismatch(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, terms: int) -> str | None:
    """Why `got` is not torch's `want`, or None."""
    got = torch.as_tensor(got)
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {list(got.shape)}, torch gives {list(want.shape)}"
    if not want.is_floating_point():
        equal = torch.equal(got.to(want.dtype), want)
        return None if equal else f"{int((got.to(want.dtype) != want).sum())} of {want.numel()} elements differ"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, torch gives {want.dtype}"
    if not torch.equal(got.isnan(), want.isnan()):
        return f"NaN at {int((got.isnan() != want.isnan()).sum())} elements where torch has none or the reverse"
    rtol, atol = tolerance(dtype, terms)
    err = max_error(got.double(), want.double())
    bound = rtol * float(want.abs().max()) + atol if want.numel() else 0.0
    return None if err <= bound else f"max|err| {err:.3e} > {bound:.3e}"


def _run(path: str, case: Case, dtype: str, inputs: tuple[torch.Tensor, ...]):
    with tempfile.TemporaryDirectory(prefix="vkx-etcase-") as tmp:
        if path == "vkx":
            pte = Path(tmp) / "m.pte"
            vkx.export_model(case.module(dtype), inputs, str(pte))
        else:
            pte = ET_FILES / f"{case.name}-{dtype}.pte"
        program = vkx.load(str(pte))
        try:
            return program(*inputs)
        finally:
            program.close()


class _Together(torch.nn.Module):
    """Several cases' modules as one: the inputs of each in turn, all their outputs in one tuple."""

    def __init__(self, cases: list[Case], dtype: str):
        super().__init__()
        self.parts = torch.nn.ModuleList(c.module(dtype) for c in cases)
        self.arity = [len(c.inputs) for c in cases]

    def forward(self, *inputs):
        outs, at = [], 0
        for part, n in zip(self.parts, self.arity):
            outs += _outputs(part(*inputs[at:at + n]))
            at += n
        return tuple(outs)


def judge_together(cases: list[Case], dtype: str) -> dict[str, str]:
    """Run `cases` through vkx's exporter as one program (one export, one load); each case's
    mismatch with torch by name (an empty dict: all pass). A refusal raises."""
    inputs = [case.example(dtype) for case in cases]
    with torch.no_grad():
        wants = [_outputs(case.module(dtype)(*x)) for case, x in zip(cases, inputs)]
    flat = tuple(t for x in inputs for t in x)
    with tempfile.TemporaryDirectory(prefix="vkx-etcases-") as tmp:
        pte = Path(tmp) / "m.pte"
        vkx.export_model(_Together(cases, dtype), flat, str(pte))
        program = vkx.load(str(pte))
        try:
            got = list(program(*flat))
        finally:
            program.close()
    wrong = {}
    for case, want in zip(cases, wants):
        mine, got = got[:len(want)], got[len(want):]
        for i, (g, w) in enumerate(zip(mine, want)):
            why = _mismatch(g, w, DTYPES[dtype], case.terms)
            if why is not None:
                wrong[case.name] = f"output {i}: {why}"
    return wrong


def judge(path: str, case: Case, dtype: str) -> tuple[str, str]:
    """(outcome, detail): PASS, REFUSED with vkx's one-line reason, WRONG with the mismatch, or ABSENT."""
    if path == "et" and not (ET_FILES / f"{case.name}-{dtype}.pte").exists():
        return ABSENT, ""
    inputs = case.example(dtype)
    with torch.no_grad():
        want = _outputs(case.module(dtype)(*inputs))
    try:
        got = _outputs(_run(path, case, dtype, inputs))
    except (ValidationError, ShaderError):
        raise
    except VkxError as error:
        return REFUSED, " ".join(line.strip() for line in str(error).splitlines())
    if len(got) != len(want):
        return WRONG, f"{len(got)} outputs, torch gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        why = _mismatch(g, w, DTYPES[dtype], case.terms)
        if why is not None:
            return WRONG, f"output {i}: {why}"
    return PASS, ""
