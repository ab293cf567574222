"""`vkx run` end to end (in-process through typer's runner)."""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from vkx.cli import app

from .helpers import relu_add_graph, weights, write_pte

runner = CliRunner()


@pytest.fixture
def model(tmp_path):
    path, _ = write_pte(tmp_path, relu_add_graph(64), [weights(64)])
    return tmp_path, path


def test_run_random_inputs_json(model):
    _, path = model
    r = runner.invoke(app, ["run", path, "--json", "--repeat", "2", "--trace-memory"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["outputs"] == [{"shape": [64], "dtype": "float32"}]
    assert [p["name"] for p in rep["phases"]][-1] == "after execute"
    assert rep["steady_run_seconds"]["runs"] == 1  # --repeat 2: the first run, then one steady run


def test_run_inputs_and_output(model):
    tmp, path = model
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    save_file({"input_0": x}, str(tmp / "in.safetensors"))
    r = runner.invoke(app, ["run", path, "--inputs", str(tmp / "in.safetensors"),
                            "--output", str(tmp / "out.safetensors"), "--schedule", "eager", "--trace-memory"])
    assert r.exit_code == 0, r.output
    assert "after prepack" in r.stdout
    out = load_file(str(tmp / "out.safetensors"))["output_0"]
    np.testing.assert_array_equal(out, np.maximum(x, 0) + weights(64))


def test_run_errors_are_one_line(tmp_path):
    r = runner.invoke(app, ["run", str(tmp_path / "missing.pte")])
    assert r.exit_code == 2
    assert "vkx: error:" in r.output and "Traceback" not in r.output
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"x" * 100)
    r = runner.invoke(app, ["run", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = runner.invoke(app, ["run", str(bad), "--schedule", "later"])
    assert r.exit_code == 2
