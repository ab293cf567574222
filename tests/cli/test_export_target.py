"""`vkx export --target executorch`: a file ExecuTorch's Vulkan runtime can run, that `vkx run` runs too;
a model it cannot run is one `vkx: error:` line naming the ops."""
from __future__ import annotations

import json

import pytest

from vkx.format import ProgramFile

from ..export.et_registry import check_against_registry
from .conftest import EXAMPLES, one_error_line, vkx


@pytest.mark.vulkan
def test_target_executorch_writes_a_file_the_registry_accepts_and_vkx_runs(tmp_path):
    done = vkx("export", EXAMPLES / "cnn.py", "-o", tmp_path / "cnn.pte", "--target", "executorch", "-q")
    assert done.returncode == 0, done.stderr
    with ProgramFile.open(tmp_path / "cnn.pte") as program:
        assert "aten.convolution.default" in check_against_registry(program.vulkan.graph)
    ran = vkx("run", tmp_path / "cnn.pte", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["outputs"]


def test_what_the_runtime_lacks_is_one_error_line(tmp_path):
    done = vkx("export", EXAMPLES / "mlp.py", "-o", tmp_path / "m.pte", "--target", "executorch", "--quantize", "int8",
               "-q")
    assert "ExecuTorch's Vulkan runtime cannot run 1 op(s): vkx.linear_q.default" in one_error_line(done)
    assert not (tmp_path / "m.pte").exists()


def test_unknown_target_is_a_usage_error(tmp_path):
    assert "--target" in one_error_line(vkx("export", EXAMPLES / "mlp.py", "--target", "phone"))
