"""Building a model from a checkpoint folder, and exporting it, hold its weights once (measured
from /proc in a fresh process: the peak over the RSS once transformers' modules are imported)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llm.families import config, write_folder

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

MIB = 1 << 20
FIXED = 64 * MIB  # what the process grows by besides the weights (measured: ~10 MiB to build and run, ~50 to export)

CHILD = r"""
import json, sys
import torch
from vkx.export import hf

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

folder = hf.read_folder(sys.argv[1])
with torch.device("meta"):  # warm-up: transformers' lazy imports and its modeling module are fixed costs
    hf.AutoModelForCausalLM.from_config(hf.load_config(folder))
torch.ones(4) @ torch.ones(4)
base = status("VmRSS")
if sys.argv[2:]:
    hf.export_folder(folder.path, sys.argv[2], max_seq_len=32, prefill_len=8)
else:
    model = hf.build_model(folder)
    with torch.no_grad():
        sum(float(p.sum()) for p in model.parameters())  # every weight page read
        model(torch.tensor([[1, 2, 3]]))
print(json.dumps({"base": base, "hwm": status("VmHWM")}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, int]:
    """A Llama checkpoint folder of about 170 MB (fp32, untied) and its weight bytes."""
    folder = tmp_path_factory.mktemp("ckpt")
    cfg = config("llama", vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=2,
                 num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False)
    write_folder(folder, "llama", weights=True, cfg=cfg)
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    assert weights > 100 * MIB
    return folder, weights


def peak_over_base(*args: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return report["hwm"] - report["base"]


def test_build_peak_is_the_weights_once(checkpoint):
    folder, weights = checkpoint
    grew = peak_over_base(str(folder))
    assert grew <= 1.1 * weights + FIXED, (grew / MIB, weights / MIB)


def test_export_peak_is_the_weights_once(checkpoint, tmp_path):
    folder, weights = checkpoint
    grew = peak_over_base(str(folder), str(tmp_path / "lm.pte"))
    assert (tmp_path / "lm.pte").stat().st_size > weights  # the weights were written
    assert grew <= 1.1 * weights + FIXED, (grew / MIB, weights / MIB)
