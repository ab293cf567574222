"""`vkx run` and `vkx.load`: JSON schema, load only, readable tables, upload progress, external data beside the .pte."""
from __future__ import annotations

import json
import re
import shutil
import warnings

import pytest

import vkx as api
from vkx.format.errors import VkxError

from .conftest import ROOT, on_a_terminal, one_error_line, vkx

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

TABLE = re.compile(r"[┃│━╇]")


def test_run_json_has_a_schema_and_exact_bytes(exported):
    done = vkx("run", exported / "mlp.pte", "--json", "--repeat", "3")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema"] == "vkx.run/2" and report["steady_run_seconds"]["runs"] == 2
    assert report["weight_bytes"] == 340008 and isinstance(report["device_peak_total"], int)


def test_repeat_zero_only_loads(exported):
    done = vkx("run", exported / "mlp.pte", "--json", "--repeat", "0")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first_run_seconds"] is None and report["steady_run_seconds"] is None
    assert report["outputs"] == [] and report["load_seconds"] > 0
    human = vkx("run", exported / "mlp.pte", "--repeat", "0")
    assert human.returncode == 0 and "first run" not in human.stdout and "load " in human.stdout


def test_trace_memory_tables_fit_80_columns_in_binary_units(exported):
    done = vkx("run", exported / "mlp.pte", "--trace-memory", "--repeat", "2", COLUMNS="200")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    tables = lines[lines.index("Host memory by phase (MiB; peak = VmHWM since the previous phase)"):]
    tables = tables[:next(i for i, line in enumerate(tables) if line.startswith("device memory in MiB"))]
    assert len(tables) == 2 * 8 and max(map(len, tables)) <= 80, max(tables, key=len)
    assert "Device memory by phase (MiB allocated)" in tables
    assert tables[9].split() == ["phase", "weights", "imported", "state", "activations", "staging", "io"]
    assert "buffers under 4 MiB share blocks" in done.stdout  # why a small model shows whole MiB of device memory
    assert not re.search(r"\d (kB|MB|GB)\b", done.stdout)
    assert "weights 332.0 KiB copied" in " ".join(done.stdout.split())


def _on_a_terminal(*args: str) -> str:
    """stderr of a successful `vkx args` written to a pseudo-terminal (stdout to a pipe)."""
    shown, code = on_a_terminal(*args, timeout=120)
    assert code == 0
    return shown


def test_loading_line_and_upload_bar_on_a_terminal_only(exported):
    shown = _on_a_terminal("run", str(exported / "mlp.pte"), "--repeat", "1")
    assert f"loading {exported / 'mlp.pte'} on " in shown and "weights" in shown and "332.0 KiB" in shown
    assert _on_a_terminal("run", str(exported / "mlp.pte"), "--repeat", "1", "--quiet") == ""
    piped = vkx("run", exported / "mlp.pte", "--repeat", "1")
    assert piped.returncode == 0 and piped.stderr == ""


def test_run_finds_external_data_beside_the_pte(exported, tmp_path):
    for name in ("ext.pte", "ext.ptd"):
        shutil.copy(exported / name, tmp_path / name)
    done = vkx("run", tmp_path / "ext.pte", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"vkx: using external data {tmp_path / 'ext.ptd'} (found beside {tmp_path / 'ext.pte'})\n"
    (tmp_path / "ext.ptd").unlink()
    done = vkx("run", tmp_path / "ext.pte")
    assert done.returncode == 2 and "pass --external-data FILE" in done.stderr


def test_load_reports_upload_progress(exported):
    calls = []
    with api.load(exported / "mlp.pte", progress=lambda done, total: calls.append((done, total))) as program:
        assert program.input_specs
    totals = {total for _, total in calls}
    assert len(calls) == 6 and len(totals) == 1
    assert [done for done, _ in calls] == sorted(done for done, _ in calls) and calls[-1][0] == calls[-1][1] > 0


def test_load_progress_in_the_eager_order(exported):
    calls = []
    api.load(exported / "mlp.pte", schedule="eager", progress=lambda d, t: calls.append((d, t))).close()
    assert len(calls) == 6 and calls[-1][0] == calls[-1][1]


def test_load_uses_and_announces_external_data_beside(exported, tmp_path):
    for name in ("ext.pte", "ext.ptd"):
        shutil.copy(exported / name, tmp_path / name)
    with pytest.warns(UserWarning, match="using external data .*ext.ptd"):
        api.load(tmp_path / "ext.pte").close()
    (tmp_path / "ext.ptd").unlink()
    with pytest.raises(VkxError, match="pass external_data=FILE"):
        api.load(tmp_path / "ext.pte")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a self-contained .pte needs nothing beside it
        api.load(exported / "mlp.pte").close()


def test_missing_file_is_a_file_error_and_an_os_error(tmp_path):
    from vkx.loader.errors import FileError

    with pytest.raises(FileError) as caught:
        api.load(tmp_path / "absent.pte")
    assert isinstance(caught.value, OSError) and isinstance(caught.value, VkxError)


def test_run_takes_inputs_by_name_and_writes_outputs(exported, tmp_path):
    import sys

    import numpy as np
    import torch
    from safetensors.numpy import load_file, save_file

    sys.path.insert(0, str(exported))
    try:
        from mlp import get_model
    finally:
        sys.path.remove(str(exported))
    module, (x,) = get_model()
    save_file({"x": x.numpy()}, tmp_path / "in.safetensors")  # the forward's argument name
    done = vkx("run", exported / "mlp.pte", "--inputs", tmp_path / "in.safetensors", "--output",
               tmp_path / "out.safetensors", "--repeat", "1", "-q")
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        want = module(x).numpy()
    got = load_file(tmp_path / "out.safetensors")["output_0"]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    save_file({"y": x.numpy(), "z": x.numpy()}, tmp_path / "bad.safetensors")
    line = one_error_line(vkx("run", exported / "mlp.pte", "--inputs", tmp_path / "bad.safetensors"))
    assert "expected tensors x (or exactly 1 tensors)" in line


@pytest.mark.parametrize("name, torch_op", [("et_no_delegate", lambda x: x.remainder(0.75)),
                                            ("et_cpu_between", lambda x: x.remainder(0.75) * 2 + 1)])
def test_run_executorch_programs_with_cpu_ops(tmp_path, name, torch_op):
    import numpy as np
    import torch
    from safetensors.numpy import load_file, save_file

    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1)) * 3
    save_file({"x": x.numpy()}, tmp_path / "in.safetensors")
    done = vkx("run", ROOT / f"tests/data/{name}.pte", "--inputs", tmp_path / "in.safetensors", "--output",
               tmp_path / "out.safetensors", "--json", "--repeat", "2")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["outputs"] == [{"shape": [3, 5], "dtype": "float32"}] and report["method"] == "forward"
    got = load_file(tmp_path / "out.safetensors")["output_0"]
    assert np.abs(got - torch_op(x).numpy()).max() <= 1e-5 * 3
    # the header does not give a plan's inputs: its load does, and the tensors are checked after it
    save_file({"a": x.numpy(), "b": x.numpy()}, tmp_path / "two.safetensors")
    line = one_error_line(vkx("run", ROOT / f"tests/data/{name}.pte", "--inputs", tmp_path / "two.safetensors"))
    assert "expected tensors input_0 (or exactly 1 tensors), found ['a', 'b']" in line
    from safetensors.torch import save_file as save_torch
    save_torch({"x": x.to(torch.bfloat16)}, tmp_path / "bf16.safetensors")  # numpy cannot hold it
    line = one_error_line(vkx("run", ROOT / f"tests/data/{name}.pte", "--inputs", tmp_path / "bf16.safetensors"))
    assert "holds a BF16 tensor" in line
