"""`vkx export` on the command line: outputs, options, the progress display, --weights."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from .export_helpers import EXAMPLES, check_file
from safetensors.torch import save_file
from typer.testing import CliRunner

from vkx.cli import app
from vkx.export import load_model_file
from vkx.format import ExternalData, ProgramFile, dtypes, resolve_constants
from vkx.format.vkgraph import Tensor


def run(*args):
    result = CliRunner().invoke(app, ["export", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


def test_quiet_prints_one_line(tmp_path):
    result = run(EXAMPLES / "mlp.py", "-o", tmp_path / "mlp.pte", "--quiet")
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"wrote {tmp_path / 'mlp.pte'}: ") and " 5 ops, 6 constants " in line
    check_file(tmp_path / "mlp.pte")


def test_json_prints_the_report(tmp_path):
    result = run(EXAMPLES / "mlp.py", "-o", tmp_path / "mlp.pte", "--json")
    report = json.loads(result.stdout)
    assert report["path"] == str(tmp_path / "mlp.pte") and report["operators"] == 5
    assert report["file_bytes"] == (tmp_path / "mlp.pte").stat().st_size
    assert report["activations"]["bytes"] >= report["activations"]["peak_live_bytes"] > 0
    assert set(report["stage_seconds"]) == {"import", "torch.export", "lower", "plan", "write"}


def test_default_output_is_beside_the_model_and_progress_shows_stages(tmp_path):
    shutil.copy(EXAMPLES / "cnn.py", tmp_path / "cnn.py")
    result = run(tmp_path / "cnn.py")
    for stage in ("load", "torch.export", "lower", "plan", "write"):
        assert stage in result.stdout
    check_file(tmp_path / "cnn.pte")


def test_a_failed_export_leaves_the_next_ones_progress_alone(tmp_path):
    """A failure hides its own progress rows; the CLI run in-process again (a script, a test) still shows them."""
    (tmp_path / "broken.py").write_text("def get_model():\n    raise RuntimeError('no model here')\n")
    failed = CliRunner().invoke(app, ["export", str(tmp_path / "broken.py"), "-o", str(tmp_path / "b.pte")])
    assert failed.exit_code == 2 and "load" not in failed.stdout
    shutil.copy(EXAMPLES / "cnn.py", tmp_path / "cnn.py")
    assert "torch.export" in run(tmp_path / "cnn.py").stdout


def test_external_data_and_fp16(tmp_path):
    run(EXAMPLES / "transformer.py", "-o", tmp_path / "t.pte", "--external-data", tmp_path / "t.safetensors",
        "--dtype", "fp16", "--alignment", "64", "-q")
    check_file(tmp_path / "t.pte", tmp_path / "t.safetensors")
    run(EXAMPLES / "transformer.py", "-o", tmp_path / "u.pte", "--external-data", tmp_path / "u.ptd", "-q")
    check_file(tmp_path / "u.pte", tmp_path / "u.ptd")


@pytest.mark.parametrize("option, dtype", [("fp32", dtypes.FLOAT32), ("fp16", dtypes.FLOAT16),
                                           ("bf16", dtypes.BFLOAT16), ("keep", dtypes.FLOAT32)])
def test_dtype_option(option, dtype, tmp_path):
    run(EXAMPLES / "mlp.py", "-o", tmp_path / "m.pte", "--dtype", option, "-q")
    graph = check_file(tmp_path / "m.pte")
    assert {dtypes.of(v.datatype) for v in graph.values if isinstance(v, Tensor)} == {dtype}


def test_weights_are_loaded_before_export(tmp_path):
    module, _ = load_model_file(EXAMPLES / "mlp.py")
    state = {name: torch.full_like(tensor, 0.25) for name, tensor in module.state_dict().items()}
    save_file(state, tmp_path / "ckpt.safetensors")
    run(EXAMPLES / "mlp.py", "-o", tmp_path / "mlp.pte", "--weights", tmp_path / "ckpt.safetensors", "-q")
    with ProgramFile.open(tmp_path / "mlp.pte") as program:
        for where in resolve_constants(program):
            values = np.frombuffer(program.read_range(where), dtype=np.float32)
            assert (values == 0.25).all()


def test_external_weights_resolve(tmp_path):
    run(EXAMPLES / "mlp.py", "-o", tmp_path / "m.pte", "--external-data", tmp_path / "m.ptd", "-q")
    with ProgramFile.open(tmp_path / "m.pte") as program, ExternalData.open(tmp_path / "m.ptd") as weights:
        assert {where.path for where in resolve_constants(program, [weights])} == {str(tmp_path / "m.ptd")}


def test_python_dash_m_vkx(tmp_path):
    done = subprocess.run([sys.executable, "-m", "vkx", "export", str(EXAMPLES / "mlp.py"), "-o",
                           str(tmp_path / "m.pte"), "-q"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
