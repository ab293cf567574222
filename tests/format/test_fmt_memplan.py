"""validate() proves the memory plan: reads after writes, outputs written, live tensors never sharing bytes."""
from __future__ import annotations

import dataclasses

import pytest

from .conftest import DATA, GOLDEN
from .fmt_tiny import tiny_constants, tiny_graph
from .plan_mutants import graph_and_constants, plan_mutants, redirect_delegate_arg, write_graph
from vkx.format import FormatError, ProgramFile, validate
from vkx.format.memplan import MemoryPlanError, check_memory_plan

ALL = sorted(DATA.glob("*.pte")) + sorted(GOLDEN.glob("*.pte"))


def _external(pte):
    return [p for p in (pte.with_suffix(".ptd"), pte.with_suffix(".safetensors")) if p.exists()]


@pytest.mark.parametrize("pte", ALL, ids=lambda p: p.name)
def test_every_shipped_file_has_a_sound_plan(pte):
    validate(pte, _external(pte))


def _refused(tmp_path, graph, constants) -> MemoryPlanError:
    path = write_graph(tmp_path / "m.pte", graph, constants)
    with pytest.raises(MemoryPlanError) as caught:
        validate(path)
    return caught.value


def test_tiny_mutants_are_refused_with_the_tensors_and_ops_named(tmp_path):
    graph, constants = tiny_graph(), tiny_constants()
    validate(write_graph(tmp_path / "ok.pte", graph, constants))
    moved = dataclasses.replace(graph, values=list(graph.values))
    moved.values[3] = dataclasses.replace(moved.values[3], mem_obj_id=1)  # x into the linear's object
    error = _refused(tmp_path, moved, constants)
    assert isinstance(error, FormatError) and "values 3 and 4 share memory object 1" in str(error)
    assert "chain[1] (aten.linear.default)" in str(error)
    chain = graph.chain
    error = _refused(tmp_path, dataclasses.replace(graph, chain=chain[::-1]), constants)
    assert "vkgraph.chain[0]: aten.add.Tensor reads value 5, which no earlier op writes" in str(error)
    redirected = [*chain[:2], dataclasses.replace(chain[2], args=(4, 8)), chain[3]]
    assert "reads value 5" in str(_refused(tmp_path, dataclasses.replace(graph, chain=redirected), constants))
    error = _refused(tmp_path, dataclasses.replace(graph, chain=chain[:3]), constants)
    assert "vkgraph.output_ids[0]: value 8 is written by no op" in str(error)


MUST_REFUSE = ("every activation in object 0", "chain reversed", "chain cut")


@pytest.mark.parametrize("name", ["et_cnn", "et_mlp", "et_q8_lm", "et_vocab_vit", "et_vocab_rope"])
def test_broken_plans_of_executorch_files_are_refused(tmp_path, name):
    graph, constants = graph_and_constants(DATA / f"{name}.pte")
    for what, mutant in plan_mutants(graph):
        if what.startswith(MUST_REFUSE) or what.endswith("removed"):
            with pytest.raises(MemoryPlanError):
                check_memory_plan(mutant)
    # the file-level path: one of them written out and validated
    _refused(tmp_path, dict(plan_mutants(graph))["every activation in object 0"], constants)



def test_a_delegate_output_into_a_tensor_of_another_shape_is_refused(tmp_path):
    """et_vocab_res: delegate 0 writes value 2 [1, 8, 4, 4]; pointed at value 3 [1, 8] instead, the
    loader used to fail in torch's copy_ with a traceback."""
    bad = tmp_path / "bad.pte"
    redirect_delegate_arg(DATA / "et_vocab_res.pte", bad, 0, 1, 3)
    with pytest.raises(FormatError, match=r"instructions\[0\]\.args\[1\]: value 3 is a tensor of shape \[1, 8\]; "
                                          r"the delegate's output \(value \d+\) has shape \[1, 8, 4, 4\]"):
        validate(bad)
