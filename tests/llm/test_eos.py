"""Generation stops at the model's EOS token(s), recorded at export; `vkx generate` and
`program.generate` run without torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.cli.conftest import ROOT, VKX, vkx, vkx_here
from tests.cli.test_no_torch import BLOCK, python_path
from tests.llm.families import config, write_folder
from vkx.export import hf

PROMPT = [3, 14, 15, 92, 65]
NEW = 16

GENERATE = '''
import json, sys
import vkx
with vkx.load(sys.argv[1]) as program:
    tokens = list(program.generate(json.loads(sys.argv[2]), int(sys.argv[3])))
assert "torch" not in sys.modules
print(json.dumps(tokens))
'''


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """(root, greedy, k): a Llama checkpoint whose config's EOS ids are [greedy[k], an id greedy never
    gives], exported by reference to root/lm.pte; `greedy`: transformers' tokens without a stop."""
    root = tmp_path_factory.mktemp("eos")
    folder = root / "llama"
    model = write_folder(folder, "llama", weights=True)
    out = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                         eos_token_id=None)
    greedy = out[0, len(PROMPT):].tolist()
    # the first step past the first to give a token not seen before (else the first step)
    k = next((i for i in range(1, NEW) if greedy[i] not in greedy[:i]), 0)  # 12 with these weights
    never = next(t for t in range(model.config.vocab_size) if t not in greedy)
    settings = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, "eos_token_id": [greedy[k], never]}))
    done = vkx_here("export", folder, "-o", root / "lm.pte", "--external-data", folder, "--max-seq-len", 64,
               "--prefill-len", 8, "-q")
    assert done.returncode == 0, done.stderr
    return root, greedy, k


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("no_torch")
    (folder / "sitecustomize.py").write_text(BLOCK)
    return {**os.environ, "PYTHONPATH": python_path(folder), "VKX_VALIDATION": "1"}


def test_the_program_records_the_eos_ids(lm):
    root, greedy, k = lm
    d = json.loads(vkx("inspect", root / "lm.pte", "--json").stdout)
    assert d["metadata"]["eos_token_ids"][0] == greedy[k] and len(d["metadata"]["eos_token_ids"]) == 2


@pytest.mark.vulkan
def test_vkx_generate_stops_at_eos_without_torch(lm, no_torch):
    root, greedy, k = lm
    done = subprocess.run([str(VKX), "generate", str(root / "lm.pte"), "--prompt-ids", ",".join(map(str, PROMPT)),
                           "--max-new-tokens", str(NEW), "--json"], capture_output=True, text=True, env=no_torch)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tokens"] == greedy[:k + 1] and report["stop"] == "eos"
    # a limit before the EOS token: all of it
    short = json.loads(vkx("generate", root / "lm.pte", "--prompt-ids", ",".join(map(str, PROMPT)),
                           "--max-new-tokens", k or 1, "--json").stdout)
    assert short["tokens"] == greedy[:k or 1] and short["stop"] == ("eos" if k == 0 else "max_new_tokens")


@pytest.mark.vulkan
def test_program_generate_stops_at_eos_without_torch(lm, no_torch):
    root, greedy, k = lm
    done = subprocess.run([sys.executable, "-c", GENERATE, str(root / "lm.pte"), json.dumps(PROMPT), str(NEW)],
                          capture_output=True, text=True, cwd=ROOT, env=no_torch)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == greedy[:k + 1]


@pytest.mark.parametrize("in_config, in_generation, expected", [
    (7, None, (7,)), ([7, 9, 7], None, (7, 9)), (None, 5, (5,)), (None, [5, 6], (5, 6)), (None, None, ())])
def test_eos_ids_come_from_the_config_else_the_generation_config(tmp_path, in_config, in_generation, expected):
    write_folder(tmp_path, "qwen2", cfg=config("qwen2", eos_token_id=in_config))
    (tmp_path / "generation_config.json").unlink(missing_ok=True)
    if in_generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": in_generation}))
    folder = hf.read_folder(tmp_path)
    assert hf.eos_token_ids(folder, hf.load_config(folder)) == expected
