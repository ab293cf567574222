"""Without torch, vkx inspects, validates, runs and loads files (numpy in, numpy out); only export needs it.

Each command runs in a subprocess whose `import torch` fails: a sitecustomize on PYTHONPATH puts a
finder first on sys.meta_path that refuses torch and its submodules. Its folder goes before what
PYTHONPATH already holds (where an environment keeps `vulkan` or vkx itself there, as on the H200).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from .conftest import EXAMPLES, ROOT, one_error_line, vkx

BLOCK = '''
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, NoTorch())
'''

LOAD = '''
import sys
import numpy as np
import vkx
x = np.load(sys.argv[2])
with vkx.load(sys.argv[1]) as program:
    out = program(x)
    named = program(**{program.input_specs[0].name: x})
assert "torch" not in sys.modules
assert type(out) is np.ndarray and np.array_equal(out, named)
np.save(sys.argv[3], out)
'''


def python_path(folder) -> str:
    """PYTHONPATH with `folder` first, then what the environment had there."""
    return os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that cannot import torch (checked)."""
    folder = tmp_path_factory.mktemp("no_torch")
    (folder / "sitecustomize.py").write_text(BLOCK)
    env = {"PYTHONPATH": python_path(folder)}
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True,
                           env={**os.environ, **env})
    assert probe.returncode == 1 and "blocked by the test" in probe.stderr, probe.stderr
    return env


@pytest.mark.vulkan
def test_inspect_validate_run_without_torch(exported, no_torch):
    pte = exported / "mlp.pte"
    inspected = vkx("inspect", pte, "--json", **no_torch)
    assert inspected.returncode == 0, inspected.stderr
    assert [t["names"] for t in json.loads(inspected.stdout)["tensors"]][0] == ["fc1.weight"]
    validated = vkx("validate", pte, **no_torch)
    assert validated.returncode == 0 and validated.stdout.startswith("ok "), validated.stderr
    ran = vkx("run", pte, "--json", "--repeat", "2", **no_torch)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["weight_bytes"] == 340008


@pytest.mark.vulkan
def test_load_and_call_with_numpy_without_torch(exported, no_torch, tmp_path):
    import torch
    sys.path.insert(0, str(EXAMPLES))
    try:
        from mlp import get_model
    finally:
        sys.path.remove(str(EXAMPLES))
    module, (x,) = get_model()
    np.save(tmp_path / "x.npy", x.numpy())
    done = subprocess.run([sys.executable, "-c", LOAD, str(exported / "mlp.pte"), str(tmp_path / "x.npy"),
                           str(tmp_path / "out.npy")], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "VKX_VALIDATION": "1", **no_torch})
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        want = module(x).numpy()
    got = np.load(tmp_path / "out.npy")
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_export_without_torch_says_how_to_get_it(tmp_path, no_torch):
    (tmp_path / "mlp.py").write_bytes((EXAMPLES / "mlp.py").read_bytes())
    line = one_error_line(vkx("export", tmp_path / "mlp.py", **no_torch))
    assert "needs torch" in line and "vkx[export]" in line


def test_cpu_ops_of_an_executorch_program_need_torch(no_torch):
    line = one_error_line(vkx("run", ROOT / "tests/data/et_cumsum.pte", **no_torch))
    assert "torch" in line and "aten::cumsum.out" in line


def test_a_program_with_no_delegate_is_inspected_and_validated_without_torch(no_torch):
    pte = ROOT / "tests/data/et_no_delegate.pte"
    inspected = vkx("inspect", pte, **no_torch)
    assert inspected.returncode == 0, inspected.stderr
    assert "every op of the program is a CPU op" in inspected.stdout
    assert "aten::remainder.Scalar_out" in inspected.stdout
    validated = vkx("validate", pte, **no_torch)
    assert validated.returncode == 0 and validated.stdout.startswith("ok "), validated.stderr
    assert "CPU ops: aten::remainder.Scalar_out" in validated.stdout
