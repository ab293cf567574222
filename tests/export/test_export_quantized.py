"""`vkx export --quantize int8|int4` on the examples: the file loads and matches torch running the
same module with the same dequantized weights (the quantized module's CPU kernels)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vkx
from tests.cli.conftest import vkx_here
from vkx.export.model_file import load_model_file
from vkx.export.quantize import quantize_module

pytestmark = pytest.mark.vulkan
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("scheme", ["int8", "int4"])
@pytest.mark.parametrize("name", ["transformer", "llama_block", "mlp"])
def test_quantized_example_matches_its_dequantized_reference(tmp_path, name, scheme):
    module, inputs = load_model_file(EXAMPLES / f"{name}.py")
    if name == "llama_block":  # the example's MLP width (172) is deliberately odd; int4 groups need 32s
        torch.manual_seed(0)
        module = type(module)(hidden=192).eval()
    path = tmp_path / f"{name}-{scheme}.pte"
    report = vkx.export_model(module, inputs, path, quantize=scheme)
    with torch.no_grad():
        want = quantize_module(module.eval(), scheme)(*inputs)
        full = module(*inputs)
    with vkx.load(path) as program:
        got = program(*inputs)
        assert program.weight_bytes == report.constant_bytes  # packed bytes go to the device as they are
    scale = float(want.abs().max())
    assert scale > 0.1
    assert float((got - want).abs().max()) <= 1e-4 * scale
    fp32 = vkx.export_model(module, inputs, tmp_path / "fp32.pte").constant_bytes
    print(f"\n{name} {scheme}: {report.constant_bytes / fp32:.3f} of the fp32 bytes, quantization error "
          f"{float((want - full).abs().max()) / float(full.abs().max()):.3g} of the output scale")
    assert report.constant_bytes < fp32 * (0.5 if scheme == "int8" else 0.35)


def test_cli_quantize_and_group_size(tmp_path):
    vkx_cli = [sys.executable, "-m", "vkx"]  # not the console script: a machine without an install has none
    out = tmp_path / "t.pte"
    done = vkx_here("export", EXAMPLES / "transformer.py", "-o", out, "--quantize", "int4", "--group-size", "64", "-q")
    assert done.returncode == 0, done.stderr
    assert "vkx.linear_q.default" in subprocess.run([*vkx_cli, "inspect", out, "--json"], capture_output=True,
                                                    text=True).stdout
    bad = subprocess.run([*vkx_cli, "export", EXAMPLES / "transformer.py", "-o", out, "--group-size", "48"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("vkx: error: --group-size 48")
