"""Shared helpers for op tests (elementwise/reduce/shape here; matmul/conv/attention too).

Two ways to run an op on the Vulkan device and compare with torch:

* `run_vkx(module, inputs, dtype=None)`: export a tiny `nn.Module` with
  `vkx.export_model` to a temporary `.pte`, load it with `vkx.load`, call it.
* `run_graph(name, args, out)`: hand-build a single-op VkGraph (op contract of
  docs/architecture.md) and run it through `vkx.loader.load_graph`. Arguments:
  torch tensors are graph inputs, `Const(t)` a constant, Python scalars and
  lists become Int/Double/Bool/String/Null/IntList values, `Values([...])` a
  ValueList of tensors. `out` is a shape, a `(shape, torch.dtype)` pair, or a
  list of those for a multi-output op (a ValueList output).

`assert_close(vkx_out, torch_out, rtol=1e-4, atol=1e-5)` compares element by element
and reports the max error; `assert_close_in(got, want, dtype, terms)` compares with
torch computing in the same dtype (`each=True`: element by element, NaN and inf included),
and the summary prints the largest error per test file and dtype. Every test module using the device
is marked `vulkan` (`pytestmark = pytest.mark.vulkan`); without a device the session fails at start
(tests/conftest.py); any validation message fails the test.

Import in a test module with `from .conftest import run_vkx, run_graph, ...`,
or use the fixtures of the same names.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
import torch

from tests.conftest import record_error
from tests.loader.helpers import scalar_value
from vkx.loader.build.graph import GraphBuilder
from tests.data.et_op_cases import Fn  # the ExecuTorch op cases' module around a function, for every op test

__all__ = ["Const", "Values", "Fn", "run_graph", "run_vkx", "assert_close", "assert_norm_close", "max_error",
           "rand", "rand_of", "FLOAT_DTYPES", "EXPORT_DTYPES", "assert_close_in", "tolerance", "record_dispatches",
           "assert_linear_propagates_nan_and_inf"]


# --------------------------------------------------------------------------- comparing

def rand(*shape, seed: int = 0, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=g) * scale).to(dtype)


def rand_of(shape, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random values of real magnitude in any dtype: floats ~3σ, bools half true, ints over their range."""
    x = rand(*shape, seed=seed, scale=3.0)
    if dtype == torch.bool:
        return x > 0
    if dtype.is_floating_point:
        return x.to(dtype)
    return (x * 40).clamp(0 if dtype == torch.uint8 else -128, 127).to(dtype)


def max_error(got, want) -> float:
    got = torch.as_tensor(got).detach().double()
    want = torch.as_tensor(want).detach().double()
    if got.numel() == 0:
        return 0.0
    diff = (got - want).abs()
    return float(torch.where(got == want, 0.0, diff).nan_to_num(0.0).max())  # inf == inf, NaN vs NaN: 0


_KINDS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
"""The tolerance class of a compared dtype (record_error; assert_close without one: `_kind`)."""


def _kind(rtol: float) -> str:
    return "fp32" if rtol < 1e-3 else "fp16"


def assert_close(vkx_out, torch_out, rtol: float = 1e-4, atol: float = 1e-5, kind: str | None = None) -> float:
    """Compare one output (or a tuple/list of them) element by element (NaN equals NaN);
    returns the max absolute error."""
    if isinstance(torch_out, (tuple, list)):
        assert isinstance(vkx_out, (tuple, list)) and len(vkx_out) == len(torch_out), \
            f"expected {len(torch_out)} outputs, got {type(vkx_out).__name__}"
        return max([assert_close(v, t, rtol, atol, kind) for v, t in zip(vkx_out, torch_out)], default=0.0)
    got = torch.as_tensor(vkx_out).detach()
    want = torch.as_tensor(torch_out).detach()
    assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    if want.is_floating_point():
        torch.testing.assert_close(got.to(want.dtype), want, rtol=rtol, atol=atol, equal_nan=True)
        finite = torch.isfinite(want) & torch.isfinite(got.to(want.dtype))
        if finite.any():
            diff = (got.double() - want.double()).abs()[finite]
            record_error(kind or _kind(rtol), float(diff.max()),
                    float((diff / want.double().abs()[finite].clamp_min(1e-3)).max()))
    else:
        assert torch.equal(got.to(want.dtype), want), f"{got} != {want}"
    return max_error(got, want)


FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""The floating types a device tensor may hold: every op is tested in each."""

EXPORT_DTYPES = FLOAT_DTYPES
"""FLOAT_DTYPES for tests through `run_vkx`."""

ALL_DTYPES = (*FLOAT_DTYPES, torch.int32, torch.int8, torch.uint8, torch.bool)
"""Every dtype a device tensor may hold: ops that move elements are tested in each."""


def assert_equal(got, want) -> None:
    """The same dtype, shape and elements (NaN where torch has NaN): ops that move elements are exact."""
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.equal(got, want) or (want.is_floating_point() and torch.equal(got.isnan(), want.isnan())
                                      and torch.equal(got.nan_to_num(), want.nan_to_num())), f"{got} != {want}"


def tolerance(dtype: torch.dtype, terms: int = 1) -> tuple[float, float]:
    """(rtol, atol) for comparing vkx with torch computing in `dtype` on the CPU.

    vkx widens 16-bit operands to fp32, computes in fp32 and rounds once when it
    stores; torch's CPU kernels round their result to `dtype` too, but some round
    intermediates as well. So the two may differ by a few units in the last place
    of the output dtype (eps: 2^-10 for fp16, 2^-7 for bf16), growing with the
    number of rounded terms a result sums (`terms`, e.g. K for a matmul; the
    error of a sum of K roundings grows like sqrt(K)). fp32 keeps the suite's
    1e-4 relative tolerance.
    """
    if dtype == torch.float32:
        return 1e-4, 1e-5
    eps = torch.finfo(dtype).eps
    k = 4 * max(1.0, terms ** 0.5)
    return k * eps, k * eps


def assert_close_in(got, want, dtype: torch.dtype, terms: int = 1, each: bool = False) -> float:
    """assert_norm_close with `tolerance(dtype, terms)`, relative to the reference's magnitude
    (`each`: assert_close, element by element, NaN and inf where torch has them); checks that
    `got` has `dtype`."""
    if isinstance(want, (tuple, list)):
        return max(assert_close_in(g_, w_, dtype, terms, each) for g_, w_ in zip(got, want))
    got = torch.as_tensor(got)
    assert got.dtype == dtype, f"output dtype {got.dtype}, expected {dtype}"
    rtol, atol = tolerance(dtype, terms)
    if each:
        return assert_close(got.double(), torch.as_tensor(want).double(), rtol, atol, _KINDS[dtype])
    return assert_norm_close(got.double(), torch.as_tensor(want).double(), rtol, atol, _KINDS[dtype])


def assert_norm_close(got, want, rtol: float = 1e-4, atol: float = 1e-5, kind: str | None = None) -> float:
    """max|err| <= rtol * max|ref| + atol (the check for sums of many products)."""
    got, want = torch.as_tensor(got).detach(), torch.as_tensor(want).detach()
    assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    err = max_error(got, want)
    peak = float(want.abs().max()) if want.numel() else 0.0
    bound = rtol * peak + atol
    assert err <= bound, f"max|err| {err:.3e} > {bound:.3e} (max|ref| {peak:.3e})"
    if want.numel():
        record_error(kind or _kind(rtol), err, err / max(peak, 1e-3))
    return err


# --------------------------------------------------------------------------- through the exporter

def run_vkx(module: torch.nn.Module, inputs: Sequence[torch.Tensor], dtype: str | None = None,
            path: str | os.PathLike | None = None, **export_kwargs: Any):
    """Export `module` with vkx.export_model to a temporary .pte, load it with vkx.load, run it.

    `dtype` (e.g. "fp16") is passed to export_model as `dtype=`; the program then
    takes its floating inputs in that dtype, so they are cast for the call. Returns
    what the loaded program returns (a tensor, or a tuple for several outputs).
    """
    import vkx
    module = module.eval()
    inputs = tuple(inputs)
    call_inputs = inputs
    if dtype is not None and dtype != "keep":
        export_kwargs["dtype"] = dtype
        torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        call_inputs = tuple(x.to(torch_dtype) if x.is_floating_point() else x for x in inputs)
    with tempfile.TemporaryDirectory(prefix="vkx-op-") as tmp:
        pte = Path(path) if path is not None else Path(tmp) / "model.pte"
        vkx.export_model(module, inputs, str(pte), **export_kwargs)
        program = vkx.load(str(pte))
        try:
            out = program(*call_inputs)
        finally:
            close = getattr(program, "close", None)
            if close is not None:
                close()
    return out


# --------------------------------------------------------------------------- hand-built graphs

@dataclass(frozen=True)
class Const:
    """A constant tensor argument (stored in the graph's constants)."""
    tensor: torch.Tensor


@dataclass(frozen=True)
class Values:
    """A ValueList argument of tensors (inputs or Const)."""
    items: tuple

    def __init__(self, items):
        object.__setattr__(self, "items", tuple(items))


def _datatype(dtype: torch.dtype):
    from vkx.format import dtypes
    return dtypes.named(str(dtype).removeprefix("torch.")).datatype


def _bytes(t: torch.Tensor) -> bytes:
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def run_graph(name: str, args: Sequence[Any], out: Any, **load_kwargs: Any):
    """Run one op `name` with `args` (op contract order, without the output) through load_graph.

    Returns one torch tensor, or a tuple for a list-of-outputs `out`.
    """
    from vkx.format import vkgraph as g
    from vkx.loader import load_graph

    values: list = []
    inputs: list[torch.Tensor] = []
    input_ids: list[int] = []
    constants: list[bytes] = []
    refs: list = []

    def add(v) -> int:
        values.append(v)
        return len(values) - 1

    def add_tensor(t: torch.Tensor, const: bool) -> int:
        t = t.detach().contiguous()
        dt = _datatype(t.dtype)
        if const:
            data = _bytes(t)
            constants.append(data)
            refs.append(g.ConstantRef(g.NAMED_OFFSET, len(data), f"c{len(refs)}"))
            return add(g.Tensor(dt, tuple(t.shape), constant_id=len(refs) - 1))
        vid = add(g.Tensor(dt, tuple(t.shape)))
        inputs.append(t)
        input_ids.append(vid)
        return vid

    def add_arg(a) -> int:
        if isinstance(a, torch.Tensor):
            return add_tensor(a, const=False)
        if isinstance(a, Const):
            return add_tensor(a.tensor, const=True)
        if isinstance(a, Values):
            return add(g.ValueList(tuple(add_arg(x) for x in a.items)))
        return add(scalar_value(a))

    def out_tensor(spec) -> int:
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], torch.dtype):
            shape, dtype = spec
        else:
            shape, dtype = spec, torch.float32
        return add(g.Tensor(_datatype(dtype), tuple(int(d) for d in shape)))

    arg_ids = [add_arg(a) for a in args]
    if isinstance(out, list):
        out_ids = [out_tensor(s) for s in out]
        arg_ids.append(add(g.ValueList(tuple(out_ids))))
    else:
        out_ids = [out_tensor(out)]
        arg_ids.append(out_ids[0])
    graph = g.VkGraph(chain=[g.OperatorCall(0, name, tuple(arg_ids))], values=values,
                      input_ids=input_ids, output_ids=out_ids, constants=refs)
    program = load_graph(graph, constants, **load_kwargs)
    try:
        res = program(*inputs)
    finally:
        program.close()
    res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
    if not inputs:  # a graph of no inputs returns numpy (bf16 as float32 values): torch like the rest
        dts = [s[1] if isinstance(s, tuple) and len(s) == 2 and isinstance(s[1], torch.dtype) else torch.float32
               for s in (out if isinstance(out, list) else [out])]
        res = tuple(torch.from_numpy(r).to(d) for r, d in zip(res, dts))
    return res if isinstance(out, list) else res[0]


def assert_linear_propagates_nan_and_inf(dtype: torch.dtype) -> None:
    """A linear of `dtype` with a NaN in x and an inf in W: NaN and inf where torch has them, the
    rest close."""
    x, w = rand(40, 24, seed=1, dtype=dtype), rand(50, 24, seed=2, dtype=dtype)
    x[7, 3] = float("nan")
    w[44, 5] = float("inf")
    got = run_graph("aten.linear.default", [x, Const(w), None], ((40, 50), dtype))
    want = torch.nn.functional.linear(x, w)
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
    assert torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    assert_close_in(got[finite], want[finite], dtype, terms=24)


def record_dispatches(monkeypatch, entry: Callable[[str, dict, tuple], Any], only: str | None = None) -> list:
    """The list, filled while the test runs, of `entry(shader, defines, spec)` for every dispatch the
    graph builder records (of shader `only`, when given)."""
    seen: list = []
    dispatch = GraphBuilder.dispatch

    def recording(self, shader, bindings, push, groups, defines=None, spec=()):
        if only is None or shader == only:
            seen.append(entry(shader, dict(defines or {}), tuple(spec)))
        return dispatch(self, shader, bindings, push, groups, defines, spec)

    monkeypatch.setattr(GraphBuilder, "dispatch", recording)
    return seen


# --------------------------------------------------------------------------- fixtures

@pytest.fixture
def dispatches(monkeypatch) -> list[tuple[str, dict, tuple]]:
    """(shader, defines, spec) of every dispatch recorded while the test runs."""
    return record_dispatches(monkeypatch, lambda shader, defines, spec: (shader, defines, spec))


@pytest.fixture
def shaders(monkeypatch) -> list[str]:
    """The shader of every dispatch recorded while the test runs."""
    return record_dispatches(monkeypatch, lambda shader, defines, spec: shader)


@pytest.fixture(name="run_graph")
def _run_graph_fixture():
    return run_graph


@pytest.fixture(name="run_vkx")
def _run_vkx_fixture():
    return run_vkx


@pytest.fixture(name="assert_close")
def _assert_close_fixture():
    return assert_close
