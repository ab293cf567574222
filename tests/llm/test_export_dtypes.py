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
from vkx.loader.lm.decoders import ProgramDecoder

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


def expected(folder, dtype: str, group_size: int | None = None):
    """torch's fp32 logits (with `dtype`'s quantized weights for int8/int4, in groups of `group_size`):
    the prefill's last prompt position, then three decode steps."""
    lm = hf.CausalLM(hf.build_model(hf.read_folder(folder), torch.float32), MAX_SEQ)
    if dtype.startswith("int"):
        lm = quantize_module(lm, dtype, group_size)
    ids = torch.zeros(1, PREFILL, dtype=torch.long)  # padded in front, at the positions after the prompt's
    ids[0, PREFILL - PROMPT:] = torch.arange(3, 3 + PROMPT) * 37 % 256
    with torch.no_grad():
        steps = [lm(ids, torch.tensor(POSITIONS))[0, -1]]
        token = int(steps[-1].argmax())
        for position in range(PROMPT, PROMPT + 3):
            steps.append(lm(torch.tensor([[token]]), torch.tensor([position]))[0, 0])
            token = int(steps[-1].argmax())
    return ids.numpy(), [s.numpy() for s in steps]


def check_against_torch(pte, folder, dtype: str, group_size: int | None = None) -> None:
    """The file's prefill and three decode steps against `expected`, within TOLERANCE."""
    ids, reference = expected(folder, dtype, group_size)
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


@pytest.mark.parametrize("dtype", TOLERANCE)
def test_each_export_dtype_runs_prefill_and_decode(tmp_path, folder, dtype):
    pte = tmp_path / f"{dtype}.pte"
    options = {"quantize": dtype} if dtype.startswith("int") else {"dtype": dtype}
    hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL, **options)
    check_against_torch(pte, folder, dtype)


HIDDEN_HEADS = {576: (9, 3), 960: (15, 5), 1536: (12, 2), 2048: (32, 8)}
"""Hidden sizes of small real models (SmolLM-135M, SmolLM-360M / Qwen2-0.5B's 896 aside, Qwen2-1.5B,
Llama 3.2 1B) and their attention and key/value heads."""


@pytest.fixture(scope="module")
def wide_folders(tmp_path_factory):
    """One single-layer Llama folder a hidden size (intermediate = hidden, vocabulary 256), made once."""
    made: dict[int, object] = {}

    def folder(hidden: int):
        if hidden not in made:
            heads, kv = HIDDEN_HEADS[hidden]
            made[hidden] = tmp_path_factory.mktemp(f"llama{hidden}")
            write_folder(made[hidden], "llama", cfg=config(
                "llama", hidden_size=hidden, intermediate_size=hidden, vocab_size=256, num_hidden_layers=1,
                num_attention_heads=heads, num_key_value_heads=kv))
        return made[hidden]
    return folder


@pytest.mark.parametrize("group", [32, 64, 128, 256])
@pytest.mark.parametrize("hidden", HIDDEN_HEADS)
def test_int4_exports_every_hidden_size_at_every_group_size(tmp_path, wide_folders, hidden, group):
    """576 and 960 take groups of 128 and 256 with a shorter last group (issue 39): the file runs and
    computes what torch computes with the same quantized weights."""
    folder = wide_folders(hidden)
    pte = tmp_path / "int4.pte"
    hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL, quantize="int4", group_size=group)
    check_against_torch(pte, folder, "int4", group)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16_bit_exports_keep_the_rotary_frequencies_fp32(tmp_path, folder, dtype):
    """As transformers' own 16-bit models do: rounded to 16 bits, they turn a position in the
    thousands by a wrong angle. The decode method's one fp32 constant is transformers' fp32 inverse
    frequencies, bit for bit (a bf16 model's norms stay bf16: vkx.export.widen)."""
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


def test_16_bit_logits_are_fp32_and_the_head_reads_its_weight_as_stored(tmp_path, folder):
    """The head's product takes fp32 activations and writes fp32 logits from the bf16 weight itself: no cast
    of the weight (a second, fp32 copy a call), one stored tensor read by the embedding and the head."""
    pte = tmp_path / "bf16.pte"
    hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL, dtype="bf16")
    with ProgramFile.open(pte) as pf:
        for delegate in methods(pf):
            g = delegate.graph
            (out,) = g.output_ids
            (head,) = [op for op in g.chain if op.args[-1] == out]
            x, weight = (g.values[i] for i in head.args[:2])
            assert head.name == "aten.linear.default"
            assert (x.datatype, weight.datatype, g.values[out].datatype) == \
                (dtypes.FLOAT32.datatype, dtypes.BFLOAT16.datatype, dtypes.FLOAT32.datatype)
            casts = [op for op in g.chain if op.name == "aten._to_copy.default"]
            assert all(g.values[op.args[0]].constant_id < 0 for op in casts)
    with vkx.load(pte) as program:
        (shape, dtype), = program["decode"].output_specs
        assert dtype == "float32"


def test_bf16_decodes_in_as_few_dispatches_as_fp16(tmp_path, folder):
    """bf16 computes in fp32 over its bf16 weights (vkx.export.widen), and the fused row kernels take that
    pair (vkx.loader.ops.gemm.one_dtype): its decode call fuses as fp16's does, norms folded in."""
    counts = {}
    for dtype in ("fp16", "bf16"):
        pte = tmp_path / f"{dtype}.pte"
        hf.export_folder(folder, pte, max_seq_len=MAX_SEQ, prefill_len=PREFILL, dtype=dtype)
        with vkx.load(pte, methods=["decode"]) as program:
            counts[dtype] = program["decode"].dispatch_count
    assert counts["bf16"] <= counts["fp16"], counts
