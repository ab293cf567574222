"""Activation memory planning: lifetimes, sharing, dedicated prepack outputs, the 10% bound."""
from __future__ import annotations

import pytest
import torch
from .export_helpers import EXAMPLES, Fn, randn
from torch import nn

from vkx.export import load_model_file
from vkx.export.lower import lower
from vkx.export.plan import plan_memory
from vkx.format.liveness import Lifetime, lifetimes, peak_live_bytes
from vkx.export.trace import trace


def planned(module, inputs):
    graph = lower(trace(module, inputs)).graph
    return graph, plan_memory(graph)


def test_peak_of_live_bytes():
    spans = [Lifetime(0, 10, 0, 1), Lifetime(1, 20, 1, 2), Lifetime(2, 5, 2, 3), Lifetime(3, 7, 4, 4)]
    assert peak_live_bytes(spans) == 30


def test_a_chain_ping_pongs_between_two_objects():
    layers = nn.Sequential(*[nn.Linear(16, 16) for _ in range(6)])
    graph, plan = planned(layers, (randn(4, 16),))
    # the input lives throughout; the five intermediates and the output alternate between two objects
    assert plan.object_nbytes == [256] * 3 and plan.total_nbytes == plan.peak_live_nbytes
    middle = [span.value_id for span in lifetimes(graph)
              if span.value_id not in graph.input_ids + graph.output_ids]
    assert len({plan.mem_obj_ids[v] for v in middle}) == 2


def test_inputs_keep_their_object_and_prepack_outputs_are_dedicated():
    module = Fn(lambda m, x: torch.relu(x * 2 + m.b) + 1, b=nn.Parameter(randn(8)))
    graph, plan = planned(module, (randn(8),))
    prepacked = {call.args[-1] for call in graph.chain if call.name == "et_vk.prepack.default"}
    assert len(prepacked) == 1 and all(graph.values[v].mem_obj_id == -1 for v in prepacked)  # b; 2 and 1 are immediates
    spans = {span.value_id: span for span in lifetimes(graph)}
    (x,), (y,) = graph.input_ids, graph.output_ids
    assert (spans[x].first, spans[x].last) == (-1, len(graph.chain))
    assert spans[y].last == len(graph.chain)
    assert list(plan.mem_obj_ids.values()).count(plan.mem_obj_ids[x]) == 1


def test_objects_never_hold_overlapping_lifetimes():
    module, inputs = load_model_file(EXAMPLES / "transformer.py")
    graph, plan = planned(module, inputs)
    by_object: dict[int, list[Lifetime]] = {}
    for span in lifetimes(graph):
        by_object.setdefault(plan.mem_obj_ids[span.value_id], []).append(span)
        assert span.nbytes <= plan.object_nbytes[plan.mem_obj_ids[span.value_id]]
    for spans in by_object.values():
        spans.sort(key=lambda s: s.first)
        assert all(a.last < b.first for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_examples_plan_within_ten_percent_of_peak(name):
    _, plan = planned(*load_model_file(EXAMPLES / f"{name}.py"))
    assert plan.peak_live_nbytes <= plan.total_nbytes
    assert plan.total_nbytes * 10 <= plan.peak_live_nbytes * 11
    assert 0 not in plan.object_nbytes  # batch norm's empty mean/invstd make no object of their own
