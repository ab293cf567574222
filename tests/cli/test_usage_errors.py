"""One error contract: every usage error is one `vkx: error:` line and exit 2, before torch is imported."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import EXAMPLES, one_error_line, vkx

BOX = ("╭", "│", "╰")


def test_directory_as_file(tmp_path):
    for command in ("inspect", "validate", "run"):
        line = one_error_line(vkx(command, tmp_path))
        assert "is a directory" in line, line
    assert "vkx export takes a .py file" in one_error_line(vkx("export", tmp_path))


def test_negative_repeat_is_one_line(exported):
    line = one_error_line(vkx("run", exported / "mlp.pte", "--repeat", "-1"))
    assert "--repeat" in line and not any(b in line for b in BOX)


@pytest.mark.parametrize("args, says", [
    (["run", "x.pte", "--bogus"], "No such option: --bogus"),
    (["run", "x.pte", "--schedule", "later"], "--schedule: later is not one of lazy, eager"),
    (["run", "x.pte", "--upload", "sideways"], "--upload: sideways is not one of auto, staging, direct, import"),
    (["export", "m.py", "--dtype", "fp64"], "fp64 is not one of keep, fp32, fp16, bf16"),
    (["frobnicate"], "No such command"),
    (["run"], "Missing argument 'FILE'"),
])
def test_typer_usage_errors_are_one_line(args, says):
    assert says in one_error_line(vkx(*args))


@pytest.mark.parametrize("name", ["model.pt", "model.safetensors", "ckpt.pth"])
def test_export_given_a_checkpoint(tmp_path, name):
    (tmp_path / name).write_bytes(b"\0" * 64)
    line = one_error_line(vkx("export", tmp_path / name))
    assert "vkx export takes a .py file defining get_model(); for a checkpoint use --weights" in line


@pytest.mark.parametrize("command", ["run", "inspect", "validate"])
def test_program_commands_given_the_wrong_kind(exported, command):
    assert "is a model file: run vkx export first" in one_error_line(vkx(command, exported / "mlp.py"))
    assert "is a .ptd (external data), not a program: pass it with --external-data" in one_error_line(
        vkx(command, exported / "ext.ptd"))


def test_run_names_the_backend_of_another_backends_pte(exported, tmp_path):
    # Same-length id, so the FlatBuffer stays valid: a .pte for another backend, as ExecuTorch writes them.
    data = (exported / "mlp.pte").read_bytes()
    assert data.count(b"VulkanBackend") == 1
    (tmp_path / "other.pte").write_bytes(data.replace(b"VulkanBackend", b"CoreMLBackend"))
    line = one_error_line(vkx("run", tmp_path / "other.pte"))
    assert "no VulkanBackend delegate (found CoreMLBackend)" in line


def test_output_must_be_a_pte(exported):
    line = one_error_line(vkx("export", exported / "mlp.py", "-o", exported / "model.onnx"))
    assert "the output (a program) must be a .pte file, for example model.pte" in line
    assert not (exported / "model.onnx").exists()


def test_output_that_is_the_model_is_refused(tmp_path):
    model = tmp_path / "m.py"
    model.write_bytes((EXAMPLES / "mlp.py").read_bytes())
    before = model.read_bytes()
    one_error_line(vkx("export", model, "-o", model))
    one_error_line(vkx("export", model, "--external-data", model))
    assert model.read_bytes() == before


def test_output_that_is_an_input_by_inode_is_refused(tmp_path):
    (tmp_path / "w.safetensors").write_bytes(b"\0" * 16)
    os.link(tmp_path / "w.safetensors", tmp_path / "same.safetensors")
    line = one_error_line(vkx("export", EXAMPLES / "mlp.py", "-o", tmp_path / "m.pte",
                              "--weights", tmp_path / "w.safetensors",
                              "--external-data", tmp_path / "same.safetensors"))
    assert "an input of this command" in line
    assert (tmp_path / "w.safetensors").read_bytes() == b"\0" * 16 and not (tmp_path / "m.pte").exists()


def test_external_data_that_is_the_output(tmp_path):
    line = one_error_line(vkx("export", EXAMPLES / "mlp.py", "-o", tmp_path / "m.pte",
                              "--external-data", tmp_path / "m.pte"))
    assert "--external-data" in line


# Runs the CLI in-process and reports whether torch was imported by the time it exited.
NO_TORCH = """
import sys
from vkx.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    print("TORCH=" + str("torch" in sys.modules), file=sys.stderr)
    sys.exit(e.code)
"""


@pytest.mark.parametrize("args", [
    ["export", "missing.py"],
    ["export", "{examples}/mlp.py", "-o", "{tmp}/m.onnx"],
    ["export", "{examples}/mlp.py", "-o", "{tmp}/nofolder/m.pte"],
    ["export", "{examples}/mlp.py", "-o", "{tmp}/m.pte", "--alignment", "3"],
    ["export", "{examples}/mlp.py", "-o", "{tmp}/m.pte", "--layout", "legacy", "--external-data", "{tmp}/m.ptd"],
    ["export", "{examples}/mlp.py", "-o", "{tmp}/m.pte", "--weights", "{tmp}/absent.safetensors"],
])
def test_export_checks_paths_and_options_before_importing_torch(tmp_path, args):
    args = [a.format(examples=EXAMPLES, tmp=tmp_path) for a in args]
    done = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1] == "TORCH=False" and len(lines) == 2 and lines[0].startswith("vkx: error: "), done.stderr


@pytest.mark.parametrize("setup, args, says", [
    (lambda t: (t / "in.txt").write_text("not tensors"), ["--inputs", "{tmp}/in.txt"], "not a safetensors file"),
    (lambda t: None, ["--inputs", "{tmp}/absent.safetensors"], "no such file"),
    (lambda t: None, ["--output", "{tmp}"], "output is a directory"),
    (lambda t: None, ["--output", "{tmp}/nofolder/x.safetensors"], "does not exist"),
    (lambda t: None, ["--output", "{tmp}/x.npy"], "must be a .safetensors file"),
    (lambda t: None, ["--output", "{tmp}/x.safetensors", "--repeat", "0"], "--repeat 0 only loads"),
])
def test_run_checks_inputs_and_output_first(exported, tmp_path, setup, args, says):
    setup(tmp_path)
    done = vkx("run", exported / "mlp.pte", *[a.format(tmp=tmp_path) for a in args])
    assert says in one_error_line(done)


def test_run_output_that_is_its_inputs_is_refused(exported, tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"input_0": np.ones((4, 64), np.float32)}, str(tmp_path / "io.safetensors"))
    before = (tmp_path / "io.safetensors").read_bytes()
    line = one_error_line(vkx("run", exported / "mlp.pte", "--inputs", tmp_path / "io.safetensors",
                              "--output", tmp_path / "io.safetensors"))
    assert "an input of this command" in line and (tmp_path / "io.safetensors").read_bytes() == before


@pytest.mark.parametrize("tensors, says", [
    ({"y": ("float32", (4, 64)), "z": ("float32", (4, 64))},
     "expected tensors x (or exactly 1 tensors), found ['y', 'z']"),
    ({"x": ("float32", (4, 32))}, "tensor 'x' (input 0 of forward) has shape [4, 32], expected [4, 64]"),
    ({"input_0": ("float64", (4, 64))}, "tensor 'input_0' (input 0 of forward) is float64, expected float32"),
])
def test_run_checks_the_inputs_tensors_before_loading(exported, tmp_path, tensors, says):
    import numpy as np
    from safetensors.numpy import save_file

    save_file({k: np.zeros(shape, dtype) for k, (dtype, shape) in tensors.items()}, str(tmp_path / "in.safetensors"))
    # --device 7 names no device: a check made once the device is open (or the model loaded) would say so
    done = subprocess.run([sys.executable, "-c", NO_TORCH, "run", exported / "mlp.pte", "--inputs",
                           tmp_path / "in.safetensors", "--device", "7"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1] == "TORCH=False" and len(lines) == 2 and lines[0].startswith("vkx: error: --inputs "), done.stderr
    assert says in lines[0]


BAD_EXPORT = """
import torch
class M(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.export fails and prints its graph
            return x + 1
        return x - 1
def get_model():
    return M(), (torch.randn(4),)
"""

RAISES = """
def build():
    raise ValueError("no weights here")

def get_model():
    return build()
"""


def test_torch_export_failure_is_one_line(tmp_path):
    (tmp_path / "bad.py").write_text(BAD_EXPORT)
    line = one_error_line(vkx("export", tmp_path / "bad.py", "-q"))
    assert "torch.export failed" in line
    assert not (tmp_path / "bad.pte").exists()


def test_verbose_shows_the_users_traceback(tmp_path):
    (tmp_path / "raises.py").write_text(RAISES)
    line = one_error_line(vkx("export", tmp_path / "raises.py", "-q"))
    assert "get_model() raised ValueError: no weights here" in line
    done = vkx("export", tmp_path / "raises.py", "-q", "--verbose")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert 'line 6, in get_model' in done.stderr and 'line 3, in build' in done.stderr
    assert "model_file.py" not in done.stderr  # vkx's own frames are not the user's business
    assert lines[-2] == "ValueError: no weights here" and lines[-1].startswith("vkx: error: ")
