"""Fused paths (loader/build/fuse.py at load; the decode attention kernel) against the unfused ones and
against torch, in fp32, fp16 and bf16, with the fused program's dispatches counted."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vkx
import vkx.loader.build.graph as graph_module
import vkx.loader.ops.attention as attention
from vkx.export import export_model
from vkx.export.quantize import quantize_module
from tests.loader.helpers import baseline_device

from .conftest import EXPORT_DTYPES, assert_close_in, rand

pytestmark = pytest.mark.vulkan
_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


class NormThenScale(torch.nn.Module):
    """transformers' RMSNorm (casts to fp32 and back, weight after) between two other ops."""

    def __init__(self, width: int):
        # imported here, not at collection: transformers' model code (with the torchao it imports)
        # costs about 3.4 s of CPU in every xdist worker, most of which never builds this module
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        super().__init__()
        self.norm = LlamaRMSNorm(width, eps=1e-5)
        torch.nn.init.normal_(self.norm.weight, 1.0, 0.3)

    def forward(self, x):
        return self.norm(x + 1.0) * 3.0


def _export(module, example: tuple, tmp_path, dtype: torch.dtype, **options) -> Path:
    path = tmp_path / "m.pte"
    export_model(module, example, str(path), dtype=_NAMES[dtype], **options)
    return path


def _run(path, inputs, fused: bool, monkeypatch) -> tuple[torch.Tensor, dict]:
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(graph_module, "fuse_chain", lambda graph, *limits: list(graph.chain))
        with vkx.load(str(path)) as program:
            shaders: dict = {}
            for d in program.only._executor.dispatches:
                shaders[d.shader] = shaders.get(d.shader, 0) + 1
            return program(*inputs) if isinstance(inputs, list) else program(inputs), shaders


def _run_both(path, inputs, monkeypatch) -> tuple[torch.Tensor, dict, torch.Tensor, dict]:
    """The fused program's output and dispatch counts by shader, then the unfused program's."""
    return *_run(path, inputs, True, monkeypatch), *_run(path, inputs, False, monkeypatch)


@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("shape", [(1, 1, 64), (3, 5, 96), (2, 7)], ids=lambda s: "x".join(map(str, s)))
def test_rms_norm_fused_against_unfused_and_torch(dtype, shape, tmp_path, monkeypatch):
    module = NormThenScale(shape[-1]).eval()
    x = rand(*shape, seed=1) * 4
    path = _export(module, (x,), tmp_path, dtype)
    xd = x.to(dtype)
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, xd, monkeypatch)
    assert fused_shaders.get("rms_norm") == 1 and "rms_norm" not in unfused_shaders
    assert sum(fused_shaders.values()) == 3  # add, the norm, mul
    with torch.no_grad():
        want = module.to(dtype)(xd)
    assert_close_in(fused, want, dtype, terms=shape[-1])
    assert_close_in(unfused, want, dtype, terms=shape[-1])
    assert_close_in(fused, unfused, dtype, terms=shape[-1])


def test_rms_norm_stays_unfused_when_an_intermediate_is_read_elsewhere(tmp_path):
    class Leaky(torch.nn.Module):
        def forward(self, x):
            r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            return x * r, r

    x = rand(4, 32, seed=2)
    export_model(Leaky(), (x,), str(tmp_path / "m.pte"))
    with vkx.load(str(tmp_path / "m.pte")) as program:
        assert "rms_norm" not in {d.shader for d in program.only._executor.dispatches}
        y, r = program(x)
    want_y, want_r = Leaky()(x)
    assert_close_in(y, want_y, torch.float32, terms=32)
    assert_close_in(r, want_r, torch.float32, terms=32)


class DecodeAttention(torch.nn.Module):
    """One query row per head against a cache of grouped heads, the visible slots a bool mask."""

    def forward(self, q, k, v, visible):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=True)


@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("dims", [(8, 2, 1, 37, 64), (4, 4, 3, 300, 32)], ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("split", [False, True], ids=["one-chunk", "split"])
def test_decode_attention_against_three_dispatches_and_torch(dtype, dims, split, tmp_path, monkeypatch):
    """One workgroup a query row, or (`split`: as many workgroups a row as 64-position chunks, on
    any device) the cache split along its positions, the row's last workgroup merging the partials:
    one dispatch either way."""
    hq, hkv, L, S, E = dims
    monkeypatch.setattr(attention, "DECODE_GROUPS_PER_UNIT", 1 << 16 if split else 0)
    monkeypatch.setattr(attention, "DECODE_SPLIT_CHUNK", attention.DECODE_MIN_CHUNK if split else
                        attention.DECODE_MAX_CHUNK)
    q, k, v = rand(1, hq, L, E, seed=3), rand(1, hkv, S, E, seed=4), rand(1, hkv, S, E, seed=5)
    visible = torch.arange(S)[None, None, None, :] <= torch.tensor([S - 9 + i for i in range(L)])[None, None, :, None]
    path = _export(DecodeAttention(), (q, k, v, visible), tmp_path, dtype)
    inputs = [t.to(dtype) for t in (q, k, v)] + [visible]
    again = [*inputs[:2], inputs[2] + 3]  # the same weights, so every output moves by 3
    with vkx.load(str(path)) as program:
        (decode,) = program.only._executor.dispatches
        fused = program(*inputs)
        # a second call merges again: the first left its rows' counts at zero
        assert_close_in(program(*again, visible), DecodeAttention()(*again, visible), dtype, terms=S)
    with monkeypatch.context() as m:
        m.setattr(attention, "_decode", lambda *args: False)
        unfused, unfused_shaders = _run(path, inputs, True, monkeypatch)
    chunks = -(-S // attention.DECODE_MIN_CHUNK) if split else 1
    assert (decode.shader, decode.groups[0]) == ("attention_decode", chunks)
    assert "attention_decode" not in unfused_shaders
    want = DecodeAttention()(*inputs)
    assert_close_in(fused, want, dtype, terms=S)
    assert_close_in(unfused, want, dtype, terms=S)
    assert_close_in(fused, unfused, dtype, terms=S)


class Rotary(torch.nn.Module):
    """transformers' apply_rotary_pos_emb on q and k, cos/sin from the positions (as its models build them)."""

    def forward(self, q, k, positions):
        inv = 1.0 / (10000 ** (torch.arange(0, q.shape[-1], 2, dtype=torch.float32) / q.shape[-1]))
        angles = positions[:, :, None].float() * inv
        emb = torch.cat((angles, angles), dim=-1)
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # imported when used, as in NormThenScale
        return apply_rotary_pos_emb(q, k, emb.cos().to(q.dtype), emb.sin().to(q.dtype))


@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("dims", [(4, 2, 1, 64), (3, 1, 5, 32)], ids=lambda d: "x".join(map(str, d)))
def test_rotary_fused_against_unfused_and_torch(dtype, dims, tmp_path, monkeypatch):
    hq, hkv, L, D = dims
    q, k = rand(1, hq, L, D, seed=6), rand(1, hkv, L, D, seed=7)
    positions = torch.arange(40, 40 + L)[None]
    path = _export(Rotary(), (q, k, positions), tmp_path, dtype)
    inputs = [q.to(dtype), k.to(dtype), positions]
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, inputs, monkeypatch)
    assert fused_shaders.get("fused_rotary") == 2 and "fused_rotary" not in unfused_shaders
    assert "copy_strided" not in fused_shaders or fused_shaders["copy_strided"] < unfused_shaders["copy_strided"]
    want = Rotary()(*inputs)
    for got in (fused, unfused):
        assert_close_in(got, want, dtype, terms=2)
    assert_close_in(fused, unfused, dtype, terms=2)


class RotaryTables(torch.nn.Module):
    """A rotary module's cos and sin tables of the positions, as transformers writes them: 5.24's
    product of the positions and the inverse frequencies, or 5.17's matrix product; `scale`: its
    attention factor (yarn's 1.14 at a factor of 4)."""

    def __init__(self, form: str, scale: float):
        super().__init__()
        self.register_buffer("inv_freq", 1 / 10000 ** (torch.arange(0, 64, 2).float() / 64), persistent=False)
        self.form, self.scale = form, scale

    def forward(self, x, positions):
        if self.form == "product":
            freqs = positions[:, :, None].float() * self.inv_freq[None, None, :].float()
        else:
            grown = self.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
            freqs = (grown @ positions[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.scale).to(x.dtype), (emb.sin() * self.scale).to(x.dtype)


@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("form,scale", [("product", 1.0), ("matmul", 1.0), ("product", 1.1386), ("matmul", 1.1386)],
                         ids=str)
@pytest.mark.parametrize("positions", [[4093], [0, 1, 2, 700, 2047, 4095, 8191]], ids=["decode", "prefill"])
def test_rotary_tables_in_one_dispatch(dtype, form, scale, positions, tmp_path, monkeypatch):
    """The cast, product, cat, cos, sin, scales and casts of the tables: one dispatch, the unfused
    ops' values exactly (one rounding, the same sin and cos), torch's within the dtype."""
    x, ids = rand(1, len(positions), 64, seed=9), torch.tensor([positions])
    path = _export(RotaryTables(form, scale), (x, ids), tmp_path, dtype)
    inputs = [x.to(dtype), ids]
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, inputs, monkeypatch)
    assert fused_shaders == {"rotary_table": 1} and sum(unfused_shaders.values()) >= 7
    # the export computes as module.to(dtype): its inverse frequencies rounded to dtype, then fp32
    for got, same, want in zip(fused, unfused, RotaryTables(form, scale).to(dtype)(*inputs)):
        assert torch.equal(got, same)
        assert_close_in(got, want, dtype)


class ProductPlusResidual(torch.nn.Module):
    """A decoder layer's o_proj / down_proj and its residual add, the add's operands either way."""

    def __init__(self, k: int, n: int, residual_first: bool):
        super().__init__()
        self.proj = torch.nn.Linear(k, n, bias=False)
        self.residual_first = residual_first

    def forward(self, x, r):
        return r + self.proj(x) if self.residual_first else self.proj(x) + r


_PRODUCT = {None: "matvec", "int4": "matvec_q", "int8": "matvec_q"}


def _reference(module: torch.nn.Module, inputs: list, dtype: torch.dtype, quantize: str | None):
    """torch's output of `module` in `dtype`, quantized as the file is where `quantize` says (the
    products then in fp32, rounded to `dtype`)."""
    module = module.to(dtype)
    with torch.no_grad():
        return (module if quantize is None else quantize_module(module, quantize))(*inputs)


@pytest.mark.parametrize("quantize", [None, "int4", "int8"], ids=str)
@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("residual_first", [False, True], ids=["product-first", "residual-first"])
def test_residual_add_in_the_product_epilogue(quantize, dtype, residual_first, tmp_path, monkeypatch):
    k, n = 256, 96
    module = ProductPlusResidual(k, n, residual_first).eval()
    x, r = rand(1, 1, k, seed=1), rand(1, 1, n, seed=2) * 3
    path = _export(module, (x, r), tmp_path, dtype, quantize=quantize)
    inputs = [x.to(dtype), r.to(dtype)]
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, inputs, monkeypatch)
    assert fused_shaders == {_PRODUCT[quantize]: 1}
    assert unfused_shaders == {_PRODUCT[quantize]: 1, "binary": 1}
    want = _reference(module, inputs, dtype, quantize)
    assert_close_in(fused, want, dtype, terms=k)
    assert_close_in(unfused, want, dtype, terms=k)
    assert_close_in(fused, unfused, dtype, terms=k)


def test_residual_add_of_several_rows_stays_unfused(tmp_path):
    module = ProductPlusResidual(64, 32, False).eval()
    x, r = rand(1, 5, 64, seed=3), rand(1, 5, 32, seed=4)
    export_model(module, (x, r), str(tmp_path / "m.pte"))
    with vkx.load(str(tmp_path / "m.pte")) as program:
        assert "binary" in {d.shader for d in program.only._executor.dispatches}
        got = program(x, r)
    assert_close_in(got, module(x, r), torch.float32, terms=64)


class GatedMLP(torch.nn.Module):
    """A Llama MLP and its residual add: down(silu(gate(x)) * up(x)) + x."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.gate = torch.nn.Linear(width, hidden, bias=False)
        self.up = torch.nn.Linear(width, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return x + self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("quantize", [None, "int4", "int8"], ids=str)
@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("shape", [(1, 1, 64), (1, 3, 64)], ids=["row", "rows"])
def test_swiglu_and_residual_fused_against_unfused_and_torch(quantize, dtype, shape, tmp_path, monkeypatch):
    hidden = 200 if quantize is None else 256  # int4's groups of 32 split the down product's K
    module = GatedMLP(shape[-1], hidden).eval()
    x = rand(*shape, seed=5) * 2
    path = _export(module, (x,), tmp_path, dtype, quantize=quantize)
    xd = x.to(dtype)
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, xd, monkeypatch)
    if shape[1] == 1:  # gate, up, silu, mul, down, add: 6 dispatches become the GLU and the down product
        assert fused_shaders == {_PRODUCT[quantize]: 2} and sum(unfused_shaders.values()) == 6
    else:  # several rows: nothing to fuse
        assert fused_shaders == unfused_shaders
    want = _reference(module, [xd], dtype, quantize)
    assert_close_in(fused, want, dtype, terms=hidden)
    assert_close_in(unfused, want, dtype, terms=hidden)
    assert_close_in(fused, unfused, dtype, terms=hidden)


class Projections(torch.nn.Module):
    """An attention's q, k and v products of one input (grouped heads: k and v narrower), each
    output used on its own; `leak` also returns the input, read by something besides the products."""

    def __init__(self, width: int, leak: bool = False):
        super().__init__()
        self.q = torch.nn.Linear(width, 128, bias=False)
        self.k = torch.nn.Linear(width, 32, bias=False)
        self.v = torch.nn.Linear(width, 32, bias=False)
        self.leak = leak

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        out = (q.view(1, 4, 32).transpose(0, 1) * 2.0, k + 1.0, v)
        return (*out, x * 3.0) if self.leak else out


@pytest.mark.parametrize("quantize", [None, "int4", "int8"], ids=str)
@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
def test_three_products_of_one_row_in_one_dispatch(quantize, dtype, tmp_path, monkeypatch):
    """q, k and v's products: one dispatch writing the three outputs, equal to the three dispatches and torch."""
    width = 96
    module = Projections(width).eval()
    x = rand(1, width, seed=6) * 2
    path = _export(module, (x,), tmp_path, dtype, quantize=quantize)
    xd = x.to(dtype)
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, xd, monkeypatch)
    assert fused_shaders.get(_PRODUCT[quantize]) == 1 and unfused_shaders.get(_PRODUCT[quantize]) == 3
    want = _reference(module, [xd], dtype, quantize)
    assert_close_in(fused, want, dtype, terms=width)
    assert_close_in(unfused, want, dtype, terms=width)
    assert_close_in(fused, unfused, dtype, terms=width)


class NormedProducts(torch.nn.Module):
    """transformers' RMSNorms before the products of a decoder layer and of an LM's head: q, k, v of
    norm(x), the MLP of norm(y) with its residual, the head of norm(z)."""

    def __init__(self, width: int = 64, hidden: int = 200, vocab: int = 96):
        super().__init__()
        self.norms = torch.nn.ModuleList(NormThenScale(width).norm for _ in range(3))
        self.q, self.k, self.v = (torch.nn.Linear(width, n, bias=False) for n in (128, 32, 32))
        self.gate, self.up = (torch.nn.Linear(width, hidden, bias=False) for _ in range(2))
        self.down = torch.nn.Linear(hidden, width, bias=False)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, x, y, z):
        h, m = self.norms[0](x), self.norms[1](y)
        mlp = y + self.down(torch.nn.functional.silu(self.gate(m)) * self.up(m))
        return self.q(h), self.k(h), self.v(h), mlp * 2.0, self.head(self.norms[2](z))


@pytest.mark.parametrize("quantize", [None, "int4", "int8"], ids=str)
@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
def test_rms_norm_folded_into_the_products_of_its_output(quantize, dtype, tmp_path, monkeypatch):
    """Each RMSNorm goes into the products that read it (matvec.comp's and matvec_q.comp's NORM): four
    products in all (the down product with its residual the fourth) and the scale, equal to the
    unfused program and torch."""
    torch.manual_seed(0)
    hidden = 200 if quantize is None else 256  # int4's groups of 32 split the down product's K
    module = NormedProducts(hidden=hidden).eval()
    inputs = [rand(1, 1, 64, seed=s) * 3 for s in (1, 2, 3)]
    path = _export(module, tuple(inputs), tmp_path, dtype, quantize=quantize)
    xs = [x.to(dtype) for x in inputs]
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, xs, monkeypatch)
    assert fused_shaders == {_PRODUCT[quantize]: 4, "binary": 1} and unfused_shaders["reduce_dims"] == 3
    want = _reference(module, xs, dtype, quantize)
    for f, u, w in zip(fused, unfused, want):
        assert_close_in(f, w, dtype, terms=hidden)
        assert_close_in(u, w, dtype, terms=hidden)


@pytest.mark.parametrize("quantize", [None, "int4"], ids=str)
def test_fp32_activations_over_bf16_weights_fuse_as_16_bit_ones(quantize, tmp_path, monkeypatch):
    """A bf16 language model computes in fp32 over its bf16 matrices and norm weights (vkx.export.widen):
    the norms fold into the products and SwiGLU fuses as in a 16-bit model (fp32 x, bf16 W and G), equal
    to the unfused program and to torch computing the same."""
    from vkx.export.widen import widen_bf16

    torch.manual_seed(0)
    module = NormedProducts(hidden=256).eval()
    widen_bf16(module)
    inputs = [rand(1, 1, 64, seed=s) * 3 for s in (1, 2, 3)]
    path = tmp_path / "m.pte"
    export_model(module, tuple(inputs), str(path), quantize=quantize)  # the dtypes as widen_bf16 left them
    with vkx.load(path) as program:
        graph = program.only.graph
        stored = {graph.values[c.args[1]].datatype.name for c in graph.chain if c.name == "aten.linear.default"}
    assert stored == ({"BFLOAT16"} if quantize is None else set())  # the matrices bf16 (or quantized)
    fused, fused_shaders, unfused, _ = _run_both(path, inputs, monkeypatch)
    assert fused_shaders == {_PRODUCT[quantize]: 4, "binary": 1}
    with torch.no_grad():  # as stored: bf16 weights (quantized with bf16 scales), fp32 compute
        want = (module if quantize is None else quantize_module(module, quantize))(*inputs)
    for f, u, w in zip(fused, unfused, want):
        assert_close_in(f, w, torch.float32, terms=256)
        assert_close_in(u, w, torch.float32, terms=256)


@pytest.mark.parametrize("quantize", [None, "int4"], ids=str)
@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
def test_fusion_keeps_within_four_storage_buffers(quantize, dtype, tmp_path):
    """Under the Android baseline (4 storage buffers a stage) a match whose kernel would bind more stays
    unfused, or is fused without its RMSNorm: every dispatch binds at most 4, results equal torch's."""
    torch.manual_seed(0)
    module = NormedProducts(hidden=256).eval()
    inputs = [rand(1, 1, 64, seed=s) * 3 for s in (1, 2, 3)]
    path = _export(module, tuple(inputs), tmp_path, dtype, quantize=quantize)
    xs = [x.to(dtype) for x in inputs]
    with baseline_device() as device, vkx.load(str(path), device=device) as program:
        dispatches = program.only._executor.dispatches
        got = program(*xs)
    assert max(len(d.bindings) for d in dispatches) <= 4
    shaders: dict = {}
    for d in dispatches:
        shaders[d.shader] = shaders.get(d.shader, 0) + 1
    # float: q, k, v apart (7 bindings together), SwiGLU fused without its norm (5 with it), the residual
    # and the head's norm folded (4 each); int4 adds a scales binding to each, so only the norms fuse
    want = {"matvec": 6, "rms_norm": 2, "binary": 1} if quantize is None else \
        {"matvec_q": 7, "rms_norm": 3, "binary": 3, "unary": 1}
    assert shaders == want
    for f, w in zip(got, _reference(module, xs, dtype, quantize)):
        assert_close_in(f, w, dtype, terms=256)


class NormAlsoReturned(torch.nn.Module):
    """An LM head of an RMSNorm's output that is a graph output as well."""

    def __init__(self, width: int = 64, vocab: int = 96):
        super().__init__()
        self.norm = NormThenScale(width).norm
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return self.head(h), h


def test_an_rms_norm_whose_output_is_returned_stays_a_dispatch(tmp_path, monkeypatch):
    """The fold writes no norm output: where the graph returns it, the norm keeps its own dispatch."""
    torch.manual_seed(0)
    module = NormAlsoReturned().eval()
    x = rand(1, 1, 64, seed=4) * 3
    path = _export(module, (x,), tmp_path, torch.float16)
    xd = x.to(torch.float16)
    got, shaders = _run(path, xd, True, monkeypatch)
    assert shaders == {"rms_norm": 1, "matvec": 1}
    for g, w in zip(got, _reference(module, [xd], torch.float16, None)):
        assert_close_in(g, w, torch.float16, terms=64)


def test_products_stay_apart_when_their_input_is_read_elsewhere(tmp_path):
    module = Projections(64, leak=True).eval()
    x = rand(1, 64, seed=7)
    export_model(module, (x,), str(tmp_path / "m.pte"))
    with vkx.load(str(tmp_path / "m.pte")) as program:
        assert [d.shader for d in program.only._executor.dispatches].count("matvec") == 3
        got = program(x)
    with torch.no_grad():
        assert_close_in(got, module(x), torch.float32, terms=64)


class RotaryIntoCache(torch.nn.Module):
    """Rotary on q and k, then k and v written into KV cache buffers at the given positions
    (index_copy_, as export/hf.py's cache layer), the attention reading the caches."""

    def __init__(self, hkv: int, slots: int, d: int):
        super().__init__()
        self.register_buffer("keys", torch.zeros(1, hkv, slots, d))
        self.register_buffer("values", torch.zeros(1, hkv, slots, d))

    def forward(self, q, k, v, positions):
        q, k = Rotary()(q, k, positions)
        rows = positions[0]
        self.keys.index_copy_(2, rows, k)
        self.values.index_copy_(2, rows, v)
        return torch.nn.functional.scaled_dot_product_attention(q, self.keys, self.values, enable_gqa=True)


@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("dims", [(4, 2, 1, 64), (2, 1, 5, 32)], ids=lambda d: "x".join(map(str, d)))
def test_rotary_and_cache_writes_in_one_dispatch(dtype, dims, tmp_path, monkeypatch):
    """q's and k's rotaries, k's and v's cache writes in one dispatch (no index_copy dispatch): the
    attention over the caches, and the caches after two calls, equal the unfused program's and torch's."""
    hq, hkv, L, D = dims
    module = RotaryIntoCache(hkv, 16, D)
    q, k, v = rand(1, hq, L, D, seed=8), rand(1, hkv, L, D, seed=9), rand(1, hkv, L, D, seed=7)
    path = _export(module, (q, k, v, torch.arange(L)[None]), tmp_path, dtype)
    calls = [(rand(1, hq, L, D, seed=10 + i).to(dtype), rand(1, hkv, L, D, seed=20 + i).to(dtype),
              rand(1, hkv, L, D, seed=30 + i).to(dtype), torch.arange(3 * i, 3 * i + L)[None]) for i in range(2)]
    results = {}
    for fused in (True, False):
        with monkeypatch.context() as m:
            if not fused:
                m.setattr(graph_module, "fuse_chain", lambda graph, *limits: list(graph.chain))
            with vkx.load(str(path)) as program:
                shaders = [d.shader for d in program.only._executor.dispatches]
                results[fused] = [program(*call) for call in calls], [program.state(n) for n in program.states]
        assert shaders.count("index_copy") == (0 if fused else 2) and shaders.count("fused_rotary") == fused
    torch_module = RotaryIntoCache(hkv, 16, D).to(dtype)
    want = [torch_module(*call) for call in calls]
    for outs, caches in results.values():
        for got, ref in zip(outs, want):
            assert_close_in(got, ref, dtype, terms=16)
        assert_close_in(caches, [torch_module.keys, torch_module.values], dtype, terms=2)
    assert_close_in(results[True][1], results[False][1], dtype, terms=2)


class RepeatedHeads(torch.nn.Module):
    """transformers' repeat_kv before sdpa (what its sdpa attention does without enable_gqa): the
    key and value heads expanded to the query heads, then attention with a bool mask."""

    def __init__(self, rep: int):
        super().__init__()
        self.rep = rep

    def forward(self, q, k, v, mask):
        b, hkv, s, d = k.shape
        k = k[:, :, None].expand(b, hkv, self.rep, s, d).reshape(b, hkv * self.rep, s, d)
        v = v[:, :, None].expand(b, hkv, self.rep, s, d).reshape(b, hkv * self.rep, s, d)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype", EXPORT_DTYPES, ids=lambda d: _NAMES[d])
@pytest.mark.parametrize("L", [1, 5])
def test_repeated_kv_heads_read_in_place(dtype, L, tmp_path, monkeypatch):
    """repeat_kv's expand + reshape of the key and value (copies of the whole cache) fused away:
    sdpa reads the grouped heads in place; the same values as the unfused copies and torch."""
    hkv, rep, s, d = 2, 3, 40, 32
    q, k, v = rand(1, hkv * rep, L, d, seed=1), rand(1, hkv, s, d, seed=2), rand(1, hkv, s, d, seed=3)
    mask = torch.rand(L, s, generator=torch.Generator().manual_seed(4)) > 0.3
    mask[:, 0] = True
    module = RepeatedHeads(rep)
    path = _export(module, (q, k, v, mask), tmp_path, dtype)
    inputs = [q.to(dtype), k.to(dtype), v.to(dtype), mask]
    fused, fused_shaders, unfused, unfused_shaders = _run_both(path, inputs, monkeypatch)
    assert unfused_shaders.get("copy_strided", 0) >= 2 and "copy_strided" not in fused_shaders
    want = module(*inputs)
    assert_close_in(fused, want, dtype, terms=s)
    assert_close_in(fused, unfused, dtype, terms=s)
