"""ExecuTorch 1.5.1's Vulkan op cases (tests/data/et_op_cases.py), each run on vkx through vkx's own
exporter and from ExecuTorch's own export, against torch eager (tests/ops/et_op_run.py). Every
outcome is pinned: every case passes through vkx's exporter (all of a dtype's cases as one program:
one export keeps the suite quick); ExecuTorch's file of a case passes (those with no Vulkan delegate,
where ExecuTorch left the op on the CPU, too: vkx runs their CPU ops) unless it is listed below as one
ExecuTorch itself does not export; no case may give a wrong answer.
docs/executorch-ops.md is the table (bench/et_op_cases.py)."""
from __future__ import annotations

import pytest

from .et_op_run import ABSENT, CASES, DTYPES, PASS, judge, judge_together, runs

pytestmark = pytest.mark.vulkan

NOT_MADE_BY_ET = {"weight_int8pack_mm"}
"""Cases ExecuTorch 1.5.1 itself does not export (tests/data/et_op_cases/refused.txt)."""


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_vkx_exports_the_cases_right(dtype):
    cases = [c for c in CASES if dtype in c.dtypes]
    assert judge_together(cases, dtype) == {}


@pytest.mark.parametrize("run_id", sorted(runs()))
def test_executorch_file(run_id):
    case, dtype = runs()[run_id]
    outcome, detail = judge("et", case, dtype)
    if case.name in NOT_MADE_BY_ET:
        assert outcome == ABSENT, f"ExecuTorch now exports {run_id}: pin its outcome"
    else:
        assert outcome == PASS, f"{outcome} {detail}"
