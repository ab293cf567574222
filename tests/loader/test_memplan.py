"""A memory plan the loader accepts gives the answers of the file's own plan; any other is refused.

Plan-only mutants (tests/format/plan_mutants.py) of ExecuTorch-made files and of vkx's own
exports are loaded and run: each either ends in a typed FormatError naming tensors and ops
(before any Vulkan object exists), or gives exactly the outputs of the unmutated graph. Before
the plan was checked, 42 of 73 such mutants ran with wrong outputs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.format.plan_mutants import graph_and_constants, plan_mutants, redirect_delegate_arg
from vkx.format import FormatError
from vkx.format import vkgraph as g
from vkx.loader import load_graph
from vkx.loader.errors import ProgramFormatError

pytestmark = pytest.mark.vulkan

ROOT = Path(__file__).resolve().parents[2]


def _inputs(graph: g.VkGraph) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for vid in graph.input_ids:
        t = graph.values[vid]
        shape = tuple(t.dims)
        if t.dtype.is_float:
            out.append(rng.standard_normal(shape).astype(t.dtype.name if t.dtype.name != "bfloat16" else np.float32))
        else:
            # distinct, ascending: an index_copy given one position twice has no defined result
            # (torch's neither), so repeated positions would make the answer depend on the device
            out.append(np.arange(t.numel, dtype=np.int32).reshape(shape))
    return out


def _run(graph: g.VkGraph, constants, inputs) -> list[np.ndarray]:
    with load_graph(graph, constants) as program:
        return [np.array(o) for o in program.run_numpy(*inputs)]


@pytest.fixture(scope="module")
def vkx_files(tmp_path_factory):
    import vkx
    from vkx.export.model_file import load_model_file
    out = {}
    for name in ("mlp", "transformer", "kv_decoder"):
        module, inputs = load_model_file(ROOT / "examples" / f"{name}.py")
        out[name] = tmp_path_factory.mktemp("plan") / f"{name}.pte"
        vkx.export_model(module, inputs, str(out[name]))
    return out


@pytest.mark.parametrize("name", ["et_cnn", "et_q8_lm", "et_vocab_shape", "et_vocab_vit", "vkx:mlp",
                                  "vkx:transformer", "vkx:kv_decoder"])
def test_plan_mutants_are_refused_or_give_the_same_answers(name, vkx_files):
    path = vkx_files[name[4:]] if name.startswith("vkx:") else ROOT / "tests" / "data" / f"{name}.pte"
    graph, constants = graph_and_constants(path)
    inputs = _inputs(graph)
    want = _run(graph, constants, inputs)
    refused = 0
    for what, mutant in plan_mutants(graph):
        try:
            got = _run(mutant, constants, inputs)
        except ProgramFormatError as error:
            assert isinstance(error, FormatError) and "value" in str(error), f"{name}, {what}: {error}"
            refused += 1
            continue
        for a, b in zip(want, got):
            np.testing.assert_array_equal(a, b, err_msg=f"{name}, {what}: accepted, but the answer changed")
    assert refused >= 4, name


def test_a_delegate_output_into_a_tensor_of_another_shape_is_not_loaded(tmp_path):
    """The loader refuses it as validate does (it used to fail in torch's copy_ with a traceback)."""
    import vkx
    bad = tmp_path / "bad.pte"
    redirect_delegate_arg(ROOT / "tests" / "data" / "et_vocab_res.pte", bad, 0, 1, 3)
    with pytest.raises(ProgramFormatError, match=r"args\[1\]: value 3 is a tensor of shape \[1, 8\]"):
        vkx.load(bad)
