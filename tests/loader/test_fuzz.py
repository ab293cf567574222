"""Loader fuzz: semantic mutations of valid VkGraphs, each loaded and run.

Every mutated graph is still a well-formed VkGraph (the flatbuffer layer is fuzzed in
tests/format); what changes is its meaning: a tensor's dims or dtype, an op's argument
ids, an argument's kind, a constant id, an op's name. Each case must end in success
with outputs of the declared shapes, or in a typed vkx error, within a time bound;
and whenever the contract check (what `vkx validate` runs) accepts a graph, the load
must succeed. Memory-plan and chain mutants are refused or give the unmutated answers. The CI corpus is small and seeded; `VKX_FUZZ_CASES=5000` runs more by
hand, and `VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT` adds the
layer's out-of-bounds checks of every shader access.
"""
from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path

import numpy as np
import pytest

from tests.format.plan_mutants import plan_mutants
from vkx.format import ProgramFile, contract, opset, resolve_constants
from vkx.format.errors import FormatError, VkxError
from vkx.format import vkgraph as g
from vkx.loader import load_graph

pytestmark = pytest.mark.vulkan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CASES = int(os.environ.get("VKX_FUZZ_CASES", "240"))
CASE_SECONDS = 20.0
DATATYPES = list(g.DataType)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(graph, constant bytes) of each example, exported once."""
    import vkx
    from vkx.export.model_file import load_model_file
    out = []
    for name in ("mlp", "cnn", "transformer"):
        module, inputs = load_model_file(EXAMPLES / f"{name}.py")
        path = tmp_path_factory.mktemp("fuzz") / f"{name}.pte"
        vkx.export_model(module, inputs, str(path))
        with ProgramFile.open(path) as pf:
            ranges = resolve_constants(pf, [])
            data = [bytes(pf.read_range(r)) for r in ranges]
            out.append((name, pf.vulkan.graph, data))
    return out


def _mutate(graph: g.VkGraph, rng: random.Random) -> tuple[str, g.VkGraph]:
    values, chain = list(graph.values), list(graph.chain)
    tensors = [i for i, v in enumerate(values) if isinstance(v, g.Tensor)]
    kind = rng.choice(["dims", "datatype", "arg id", "arg kind", "constant id", "op name", "output dims"])
    if kind in ("dims", "output dims"):
        vid = rng.choice(graph.output_ids if kind == "output dims" else tensors)
        t = values[vid]
        dims = list(t.dims) or [1]
        d = rng.randrange(len(dims))
        dims[d] = rng.choice([0, 1, 2, dims[d] + 1, dims[d] * 2, max(dims[d] - 1, 0), 10**6, 2**31])
        values[vid] = dataclasses.replace(t, dims=tuple(dims))
        what = f"value {vid} dims -> {dims}"
    elif kind == "datatype":
        vid = rng.choice(tensors)
        dt = rng.choice(DATATYPES)
        values[vid] = dataclasses.replace(values[vid], datatype=dt)
        what = f"value {vid} datatype -> {dt.name}"
    elif kind == "arg id":
        i = rng.randrange(len(chain))
        args = list(chain[i].args)
        j = rng.randrange(len(args))
        args[j] = rng.choice([rng.randrange(len(values)), len(values) + 3, -1])
        chain[i] = dataclasses.replace(chain[i], args=tuple(args))
        what = f"node {i} arg {j} -> {args[j]}"
    elif kind == "arg kind":
        scalars = [i for i, v in enumerate(values) if not isinstance(v, g.Tensor)]
        vid = rng.choice(scalars or tensors)
        values[vid] = rng.choice([g.Null(), g.String("x"), g.Int(2**40), g.Double(1e308), g.Double(float("nan")),
                                  g.IntList((1, -1)), g.IntList(()), g.Bool(True), g.ValueList((0,))])
        what = f"value {vid} -> {values[vid]}"
    elif kind == "constant id":
        consts = [i for i in tensors if values[i].constant_id >= 0] or tensors
        vid = rng.choice(consts)
        cid = rng.choice([-1, 0, len(graph.constants) - 1, len(graph.constants) + 5])
        values[vid] = dataclasses.replace(values[vid], constant_id=cid)
        what = f"value {vid} constant_id -> {cid}"
    else:
        i = rng.randrange(len(chain))
        name = rng.choice([*opset.OPS, "aten.nope.default"])
        chain[i] = dataclasses.replace(chain[i], name=name)
        what = f"node {i} -> {name}"
    return what, dataclasses.replace(graph, values=values, chain=chain)


def _inputs(graph: g.VkGraph, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for vid in graph.input_ids:
        t = graph.values[vid]
        dtype = t.dtype
        shape = tuple(t.dims)
        if dtype.is_float:
            out.append(rng.standard_normal(shape).astype(np.float32))
        else:
            out.append(rng.integers(0, 2, shape).astype(np.int32))
    return out


def test_semantic_mutations_end_in_success_or_a_typed_error(corpus):
    rng = random.Random(1234)
    nprng = np.random.default_rng(0)
    outcomes = {"ran": 0, "refused": 0}
    for case in range(CASES):
        name, graph, data = corpus[case % len(corpus)]
        what, mutated = _mutate(graph, rng)
        label = f"case {case} ({name}: {what})"
        try:
            opset.check_graph(mutated)
            accepted = True
        except contract.ContractError:
            accepted = False
        start = time.perf_counter()
        try:
            with load_graph(mutated, data) as program:
                outputs = program.run_numpy(*_inputs(mutated, nprng))
                for vid, out in zip(mutated.output_ids, outputs):
                    assert out.shape == tuple(mutated.values[vid].dims), label
            outcomes["ran"] += 1
        except VkxError as error:
            outcomes["refused"] += 1
            # A graph the contract accepts may still be refused for reasons the contract does not
            # cover (an input of an unsupported dtype, bytes that do not match a constant), but never
            # for an op whose shapes disagree: that is what the contract exists to catch first.
            if accepted:
                assert "the op gives" not in str(error), f"{label}: the loader caught what validation missed"
        except Exception as error:  # pragma: no cover - the message is the point
            pytest.fail(f"{label}: {type(error).__name__}: {error}")
        assert time.perf_counter() - start < CASE_SECONDS, f"{label}: too slow"
    print(f"fuzz: {outcomes}")
    assert outcomes["ran"] and outcomes["refused"], outcomes


def test_plan_and_chain_mutations_are_refused_or_change_nothing(corpus):
    """Memory-plan and chain mutants (tests/format/plan_mutants.py: objects moved or merged, ops
    swapped, the chain reversed or cut, outputs redirected, an output's writer removed), drawn with
    random seeds: each is refused with a typed FormatError before anything runs, or gives exactly the
    unmutated graph's outputs (a plan that validates never gives another answer)."""
    rng = random.Random(4321)
    nprng = np.random.default_rng(1)
    want = []
    for name, graph, data in corpus:
        inputs = _inputs(graph, nprng)
        with load_graph(graph, data) as program:
            want.append((inputs, program.run_numpy(*inputs)))
    outcomes = {"same": 0, "refused": 0}
    for case in range(max(CASES // 4, 30)):
        index = case % len(corpus)
        name, graph, data = corpus[index]
        what, mutated = rng.choice(list(plan_mutants(graph, seed=rng.randrange(2**31), per_kind=2)))
        label = f"case {case} ({name}: {what})"
        inputs, expected = want[index]
        start = time.perf_counter()
        try:
            with load_graph(mutated, data) as program:
                got = program.run_numpy(*inputs)
        except FormatError as error:
            outcomes["refused"] += 1
            assert "value" in str(error), label
        else:
            outcomes["same"] += 1
            for a, b in zip(expected, got):
                np.testing.assert_array_equal(a, b, err_msg=f"{label}: accepted, but the answer changed")
        assert time.perf_counter() - start < CASE_SECONDS, f"{label}: too slow"
    print(f"plan fuzz: {outcomes}")
    assert outcomes["refused"], outcomes
