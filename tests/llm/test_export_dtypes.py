"""An LLM folder exported in each 16-bit and quantized dtype runs on the device with the prebuilt
shaders only (prefill through the tiled GEMM, decode through the matvecs), against torch: in fp32
for the 16-bit dtypes, computing with the same quantized weights for int8/int4.

The width (256) and prefill length (16) are the smallest that choose the kernels a real model's
prefill and decode use; the fp32 families of test_vkx.py are narrower and choose others.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import vkx
from tests.llm.families import config, write_folder
from vkx.export import hf
from vkx.export.quantize import quantize_module
from vkx.format import ProgramFile, dtypes, resolve_constants
from vkx.format.methods import methods
from vkx.loader.generate import ProgramDecoder

pytestmark = pytest.mark.vulkan

PREFILL, MAX_SEQ, PROMPT = 16, 64, 11
POSITIONS = [*range(PROMPT, PREFILL), *range(PROMPT)]
# Largest logit error against torch, in units of the logits' standard deviation (about 1): the
# 16-bit dtypes' rounding over two layers; fp32 arithmetic for the quantized ones (torch computes
# with the same quantized weights). Far below what a wrong kernel gives (errors of order 1).
TOLERANCE = {"bf16": 0.08, "fp16": 0.02, "int8": 2e-3, "int4": 2e-3}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama256")
    write_folder(path, "llama", cfg=config("llama", hidden_size=256, intermediate_size=512, vocab_size=512))
    return path


def expected(folder, dtype: str):
    """torch's fp32 logits (with `dtype`'s quantized weights for int8/int4): the prefill's last
    prompt position, then three decode steps."""
    lm = hf.CausalLM(hf.build_model(hf.read_folder(folder), torch.float32), MAX_SEQ)
    if dtype.startswith("int"):
        lm = quantize_module(lm, dtype)
    ids = torch.zeros(1, PREFILL, dtype=torch.long)  # padded in front, at the positions after the prompt's
    ids[0, PREFILL - PROMPT:] = torch.arange(3, 3 + PROMPT) * 37 % 512
    with torch.no_grad():
        steps = [lm(ids, torch.tensor(POSITIONS))[0, -1]]
        token = int(steps[-1].argmax())
        for position in range(PROMPT, PROMPT + 3):
            steps.append(lm(torch.tensor([[token]]), torch.tensor([position]))[0, 0])
            token = int(steps[-1].argmax())
    return ids.numpy(), [s.numpy() for s in steps]


@pytest.mark.parametrize("dtype", TOLERANCE)
def test_each_export_dtype_runs_prefill_and_decode(tmp_path, folder, dtype):
    pte = tmp_path / f"{dtype}.pte"
    options = {"quantize": dtype} if dtype.startswith("int") else {"dtype": dtype}
    hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL, **options)
    ids, reference = expected(folder, dtype)
    with vkx.load(pte) as program:
        decoder = ProgramDecoder(program)
        steps = [decoder.prefill(ids, np.array(POSITIONS))[0, -1]]
        for position in range(PROMPT, PROMPT + 3):
            token = int(np.argmax(reference[position - PROMPT]))  # torch's token: the same inputs
            steps.append(decoder.decode(np.array([[token]]), np.array([position]))[0, 0])
    scale = float(np.std(reference[0]))
    for step, (ours, theirs) in enumerate(zip(steps, reference)):
        err = float(np.abs(np.asarray(ours, np.float32) - theirs).max())
        assert err < TOLERANCE[dtype] * scale, (dtype, step, err, scale)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16_bit_exports_keep_the_rotary_frequencies_fp32(tmp_path, folder, dtype):
    """As transformers' own 16-bit models do: rounded to 16 bits, they turn a position in the
    thousands by a wrong angle. The decode method's one fp32 constant is transformers' fp32
    inverse frequencies, bit for bit."""
    pte = tmp_path / f"{dtype}.pte"
    hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL, dtype=dtype)
    want = hf.build_model(hf.read_folder(folder), torch.float32).model.rotary_emb.inv_freq
    with ProgramFile.open(pte) as pf:
        decode = methods(pf)[1]
        ranges = resolve_constants(pf, (), decode)
        fp32 = [np.frombuffer(bytes(pf.read_range(ranges[v.constant_id])), np.float32)
                for v in decode.graph.values if getattr(v, "constant_id", -1) >= 0
                and dtypes.of(v.datatype) is dtypes.FLOAT32]
    assert len(fp32) == 1 and np.array_equal(fp32[0], want.numpy())
