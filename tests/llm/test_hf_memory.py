"""Building a model from a checkpoint folder holds its weights once (measured from /proc in a fresh process)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.llm.families import config, write_folder

MIB = 1 << 20
FIXED = 64 * MIB  # the interpreter's own growth while it builds the module and runs it once (measured: ~10 MiB)

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
model = hf.build_model(folder)
with torch.no_grad():
    touched = sum(float(p.sum()) for p in model.parameters())  # every weight page read
    model(torch.tensor([[1, 2, 3]]))
print(json.dumps({"base": base, "hwm": status("VmHWM"), "touched": touched}))
"""


def test_build_peak_is_the_weights_once(tmp_path):
    cfg = config("llama", vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=2,
                 num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False)
    write_folder(tmp_path, "llama", weights=True, cfg=cfg)
    weights = sum(p.stat().st_size for p in Path(tmp_path).glob("*.safetensors"))
    assert weights > 100 * MIB
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    report = json.loads(out.stdout.strip().splitlines()[-1])
    grew = report["hwm"] - report["base"]
    assert grew <= 1.1 * weights + FIXED, (grew / MIB, weights / MIB)
