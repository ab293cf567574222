"""ExecuTorch programs whose Vulkan partitioner left an op on the CPU (tests/data/make_et_no_delegate_files.py):
with no Vulkan delegate at all the file is read (not called malformed) and refused for that reason
in one line; with a delegate after the CPU op it runs, CPU op and delegate, as torch computes it."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vkx
from vkx.format import ProgramFile
from vkx.loader.errors import LoadError

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = pytest.mark.vulkan


def test_no_delegate_is_read_and_refused_for_that_reason():
    path = DATA / "et_no_delegate.pte"
    with ProgramFile.open(path) as program:  # one empty segment and no extended header: valid
        assert [s.size for s in program.segments] == [0]
        assert not program.vulkan_delegates
    with pytest.raises(LoadError, match="no VulkanBackend delegate") as info:
        vkx.load(str(path))
    assert "\n" not in str(info.value) and "segment" not in str(info.value)


def test_cpu_op_then_delegate_runs():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)) * 3
    program = vkx.load(str(DATA / "et_cpu_between.pte"))
    try:
        got = program(x)
    finally:
        program.close()
    torch.testing.assert_close(got, torch.remainder(x, 0.75) * 2 + 1, rtol=1e-5, atol=1e-5)
