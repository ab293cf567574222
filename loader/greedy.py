"""What greedy decoding records beside a loaded method, on demand after the load: the method's
call followed by the argmax of its logits (`Method.argmax`: one token id read back, not the
vocabulary's logits), and decode steps chained on the device (`Method.greedy`: each step's argmax
handed to the next by shaders/next_token.comp, GREEDY_CHAIN of them a submission;
docs/architecture.md). Both reuse the method's dispatches, pipelines and memory; what they add is
the load's (`Resources`), released with it.
"""
from __future__ import annotations

from vkx.format import dtypes, vkgraph as g
from vkx.loader.errors import LoadError
from vkx.loader.graph import Dispatch, RTensor
from vkx.loader.memory import Buffer
from vkx.loader.ops import TensorArg
from vkx.loader.record import Executor, Steps
from vkx.loader.shaders import pipelines_for
from vkx.loader.stages import Built, Options, Resources, graph_builder, recorded


def _argmax_tail(built: Built, graph: g.VkGraph, res: Resources, options: Options) -> tuple[list, list, RTensor]:
    """The dispatches, pipelines and int32 output of the argmax, over its last dim, of a method's
    one float output (`aten.argmax.default`, built as any op is), with tensors of its own (the
    load's: `res`)."""
    if len(graph.output_ids) != 1:
        raise LoadError(f"argmax needs a method of one output, not {len(graph.output_ids)}")
    logits = built.builder.tensors[graph.output_ids[0]]
    if not logits.arg.dtype.is_float or not logits.arg.shape:
        raise LoadError(f"argmax needs a float output of at least one dim, not {logits.arg.dtype} "
                        f"{list(logits.arg.shape)}")
    source = graph.values[logits.vid]
    tail = g.VkGraph(
        chain=[g.OperatorCall(0, "aten.argmax.default", (0, 1, 2, 3))],
        values=[g.Tensor(source.datatype, tuple(logits.arg.shape)), g.Int(-1), g.Bool(False),
                g.Tensor(g.DataType.INT32, tuple(logits.arg.shape[:-1]))],
        input_ids=[0], output_ids=[3])
    builder = graph_builder(tail, res.device, options).build()
    pipelines = pipelines_for(res.device).get_all([(x.shader, dict(x.defines), len(x.bindings), x.spec)
                                                   for x in builder.dispatches])
    for t in builder.used_tensors():
        t.buffer = logits.buffer if t.vid == 0 else res.allocator.buffer(t.nbytes, "activations", "device")
    return builder.dispatches, pipelines, builder.tensors[3]


def record_argmax(built: Built, graph: g.VkGraph, res: Resources, options: Options,
                  io_in: list) -> tuple[Executor, RTensor, Buffer]:
    """A second recording of a method of one float output: its dispatches, then that output's
    argmax over its last dim into a small tensor, the only thing read back (`Method.argmax`).
    Returns (the executor, that tensor, its readback buffer)."""
    dispatches, pipelines, out = _argmax_tail(built, graph, res, options)
    readback = res.allocator.buffer(out.nbytes, "io", "readback")
    executor = Executor(res.device, [*built.builder.dispatches, *dispatches],
                        [*built.pipelines, *pipelines], io_in, [(out, readback)])
    return recorded(executor, res), out, readback


HAND_OVER_BINDINGS = 4
"""shaders/next_token.comp's storage buffers: the argmax, the ids and position inputs, and the
tokens with the first position after them. Vulkan's least maxPerStageDescriptorStorageBuffers, so
every device chains greedy steps (the Android baseline's limit is that least)."""

GREEDY_CHAIN = 16
"""Greedy steps one submission chains (`Method.greedy` submits more in turns): the GPU idles while
the host waits, reads back and submits again (0.05 ms a submission on the H200 against 1.9 ms a
1B fp16 step, docs/benchmarks.md), once in 16 steps, while the step recordings (one per place in
the chain) stay few."""


def record_greedy(built: Built, graph: g.VkGraph, res: Resources, options: Options, io_in: list) -> tuple[Steps, Buffer]:
    """Greedy decoding chained on the device, for a decode method `(input_ids [1, 1], cache_position
    [1]) -> logits` (`Method.chains_greedy`): a step is the method's dispatches, the argmax of its
    logits, and shaders/next_token.comp, which appends the token to a buffer and makes it and the
    next position (the first step's, which the submission's head copies behind the tokens, plus the
    count) the method's inputs; `Method.greedy` submits up to GREEDY_CHAIN steps at once
    (record.Steps). Returns the steps and the readback buffer of [count, tokens...]."""
    (_, ids), (first_io, position) = io_in  # as Method.chains_greedy checked
    dispatches, pipelines, chosen = _argmax_tail(built, graph, res, options)
    # [count, tokens...]: zeroed and read back; one word more after them, the first position
    tokens = RTensor(TensorArg(-1, (GREEDY_CHAIN + 1,), dtypes.INT32), dtypes.INT32)
    tokens.buffer = res.allocator.buffer(tokens.nbytes + 4, "activations", "device")
    hand_over = Dispatch("next_token", (), [(t, 0, 4) for t in (chosen, ids, position)]
                         + [(tokens, 0, tokens.nbytes + 4)], b"", (1, 1, 1), "next_token")
    pipelines += pipelines_for(res.device).get_all([("next_token", {}, HAND_OVER_BINDINGS, ())])
    readback = res.allocator.buffer(tokens.nbytes, "io", "readback")
    steps = Steps(res.device, [*built.builder.dispatches, *dispatches, hand_over], [*built.pipelines, *pipelines],
                  io_in, [(tokens, readback)], counter=tokens, chain=GREEDY_CHAIN, first=first_io)
    return recorded(steps, res), readback
