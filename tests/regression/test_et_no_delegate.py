"""ExecuTorch programs whose Vulkan partitioner left an op on the CPU (tests/data/make_et_no_delegate_files.py):
with no Vulkan delegate at all the file validates and runs its CPU op, as torch computes it; one whose CPU op
vkx cannot run is refused for that reason in one line; with a delegate after the CPU op it runs, CPU op and
delegate, as torch computes it."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vkx
from vkx.format import ProgramFile, validate
from vkx.loader.errors import UnsupportedOpError

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = pytest.mark.vulkan


def _run(path: Path, x: torch.Tensor) -> torch.Tensor:
    program = vkx.load(str(path))
    try:
        return program(x)
    finally:
        program.close()


def _x() -> torch.Tensor:
    return torch.randn(3, 5, generator=torch.Generator().manual_seed(0)) * 3


def test_no_delegate_runs_its_cpu_op():
    path = DATA / "et_no_delegate.pte"
    with ProgramFile.open(path) as program:  # one empty segment and no extended header: valid
        assert [s.size for s in program.segments] == [0]
        assert not program.vulkan_delegates
    report = validate(path)
    assert (report.delegates, report.cpu_ops) == (0, ["aten::remainder.Scalar_out"])
    x = _x()
    torch.testing.assert_close(_run(path, x), torch.remainder(x, 0.75), rtol=0, atol=0)


def test_no_delegate_with_a_cpu_op_vkx_cannot_run_is_refused_for_that_reason(tmp_path):
    data = (DATA / "et_no_delegate.pte").read_bytes()
    assert data.count(b"remainder") == 1
    path = tmp_path / "unknown_op.pte"
    path.write_bytes(data.replace(b"remainder", b"remaindex"))  # same length: the FlatBuffer stays valid
    validate(path)  # a well-formed file: only running it needs the op
    with pytest.raises(UnsupportedOpError) as info:
        vkx.load(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert "CPU ops vkx cannot run: aten::remaindex.Scalar_out (no such torch op)" in message
    assert "no VulkanBackend delegate" in message


def test_cpu_op_then_delegate_runs():
    x = _x()
    torch.testing.assert_close(_run(DATA / "et_cpu_between.pte", x), torch.remainder(x, 0.75) * 2 + 1,
                               rtol=1e-5, atol=1e-5)
