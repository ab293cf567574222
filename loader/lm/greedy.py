"""What decoding records on the device beside a loaded method, through the method's `Tail`
(vkx.loader.execute.method): `Argmax`, the method's call followed by the argmax of its logits (one token id
read back, not the vocabulary's logits), and decode steps chained on the device, each step's token
handed to the next by shaders/next_token.comp, BURST of them a submission (docs/architecture.md):
`GreedyChain` takes each step's argmax, `SampledChain` samples it (loader/ops/sample.py's
`record_sample`, a function of (seed, position), the parameters written in each submission's head).
All reuse the method's dispatches, pipelines and memory; what they add is the load's, released with it,
and each is recorded once per method, when it is first made (generation makes them before its clock
starts).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import vulkan as vk

from vkx.format import dtypes, vkgraph as g
from vkx.loader.gpu.device import Device
from vkx.loader.errors import InputError, LoadError
from vkx.loader.build.graph import Dispatch, GraphBuilder, RTensor
from vkx.loader.execute.hazards import barriers_before
from vkx.loader.lm.generate import BURST, Sampling
from vkx.loader.gpu.memory import Buffer
from vkx.loader.execute.method import LoadedMethod, Method, Tail
from vkx.loader.ops import TensorArg
from vkx.loader.ops.sample import STATE_WORDS, record_sample, sample_state
from vkx.loader.execute.ports import Port
from vkx.loader.execute.record import COMPUTE, TRANSFER, Executor, barrier, ffi, lib
from vkx.loader.gpu.shaders import Pipeline

HAND_OVER_BINDINGS = 4
"""shaders/next_token.comp's storage buffers: the chosen token, the ids and position inputs, and the
tokens with the first position after them. Vulkan's least maxPerStageDescriptorStorageBuffers, so
every device chains decode steps (the Android baseline's limit is that least)."""


def argmax_graph(method: Method) -> g.VkGraph:
    """The tail graph of `aten.argmax.default`, over its last dim, of the method's one float output
    (built as any op is: `Tail.build`)."""
    outputs = method.tail.outputs
    if len(outputs) != 1:
        raise LoadError(f"argmax needs a method of one output, not {len(outputs)}")
    logits = outputs[0]
    if not logits.arg.dtype.is_float or not logits.arg.shape:
        raise LoadError(f"argmax needs a float output of at least one dim, not {logits.arg.dtype} "
                        f"{list(logits.arg.shape)}")
    shape = tuple(logits.arg.shape)
    return g.VkGraph(chain=[g.OperatorCall(0, "aten.argmax.default", (0, 1, 2, 3))],
                     values=[g.Tensor(method.graph.values[logits.vid].datatype, shape), g.Int(-1), g.Bool(False),
                             g.Tensor(g.DataType.INT32, shape[:-1])],
                     input_ids=[0], output_ids=[3])


def sample_graph(method: Method) -> g.VkGraph:
    """The tail graph of a sampled step: inputs the method's logits and cache position (values 0, 1), and
    the sampler's state (value 2: int32 [STATE_WORDS], `sample_state`, the token in word 0), which `_sample`
    writes (an op called on the builder: the graph has no ops, no outputs)."""
    (logits,), (_, position) = method.tail.outputs, method.tail.inputs  # as `chains` checked
    return g.VkGraph(chain=[], values=[g.Tensor(method.graph.values[t.vid].datatype, tuple(t.arg.shape))
                                       for t in (logits, position)] + [g.Tensor(g.DataType.INT32, (STATE_WORDS,))],
                     input_ids=[0, 1], output_ids=[])


def _sample(builder: GraphBuilder) -> list[RTensor]:
    """`sample_graph`'s op, record_sample over its logits, state and position: [the state]."""
    logits, position, state = (builder.tensors[vid] for vid in range(3))
    record_sample(builder, logits.arg, state.arg, position.arg)
    return [state]


def _record_argmax(method: Method, tail: Tail) -> tuple[Executor, Port]:
    """The method's dispatches, then its output's argmax, the only thing read back: (executor, port)."""
    dispatches, pipelines, (out,) = tail.build(argmax_graph(method))
    readback = tail.buffer(out.nbytes, "io", "readback")
    executor = tail.record(Executor(tail.device, dispatches, pipelines, tail.io_in, [(out, readback)]))
    return executor, Port(out, readback)


class Argmax:
    """A method's call followed by the index of the largest element along the last dim of its one
    (float) output (NaN the largest), computed on the device: `argmax(*arrays)` takes the method's
    inputs as `run_numpy` does and returns int32 of the output's shape less that dim."""

    def __init__(self, method: Method):
        self.method = method
        self._executor, self._port = method.tail.recording("argmax", functools.partial(_record_argmax, method))

    def __call__(self, *arrays) -> np.ndarray:
        def run(given: list) -> np.ndarray:
            self._executor.run()
            return self._port.read(False)
        return self.method.replay(arrays, run)


def chains(method: LoadedMethod) -> bool:
    """Whether `GreedyChain` and `SampledChain` can chain `method`'s steps on the device: a method of one
    graph (it has a `tail`), a decode method, (token id [1, 1], position [1]) held as int32 -> one float
    output of one row (logits)."""
    tail = method.tail
    if tail is None:
        return False
    ins, outs = [t.arg for t in tail.inputs], [t.arg for t in tail.outputs]
    return [a.dtype for a in ins] == [dtypes.INT32] * 2 and [a.shape for a in ins] == [(1, 1), (1,)] and \
        len(outs) == 1 and outs[0].dtype.is_float and math.prod(outs[0].shape[:-1]) == 1


def _record_chain(method: Method, sampled: bool, tail: Tail) -> tuple["Steps", Buffer, Buffer | None]:
    """A step is the method's dispatches, the choice of a token from its logits (their argmax, or
    `sample_graph` when `sampled`), and shaders/next_token.comp, which appends the token to a buffer
    and makes it and the next position (the first step's, which the submission's head copies behind
    the tokens, plus the count) the method's inputs. Returns the steps, the readback buffer of
    [count, tokens...] and, when `sampled`, the host buffer of the sampler's parameters, which the
    head copies into its state."""
    (_, ids), (first_io, position) = tail.io_in  # as `chains` checked
    inputs, params = tail.io_in, None
    if sampled:
        dispatches, pipelines, (chosen,) = tail.build(sample_graph(method), [tail.outputs[0], position], _sample)
        params = tail.buffer(chosen.nbytes, "io", "host")
        inputs = [*inputs, (params, chosen)]
    else:
        dispatches, pipelines, (chosen,) = tail.build(argmax_graph(method))
    # [count, tokens...]: zeroed and read back; one word more after them, the first position
    tokens = RTensor(TensorArg(-1, (BURST + 1,), dtypes.INT32), dtypes.INT32)
    tokens.buffer = tail.buffer(tokens.nbytes + 4, "activations", "device")
    hand_over = Dispatch("next_token", (), [(t, 0, 4) for t in (chosen, ids, position)]
                         + [(tokens, 0, tokens.nbytes + 4)], b"", (1, 1, 1), "next_token")
    pipelines += tail.pipelines([("next_token", {}, HAND_OVER_BINDINGS, ())])
    readback = tail.buffer(tokens.nbytes, "io", "readback")
    steps = Steps(tail.device, [*dispatches, hand_over], pipelines, inputs, [(tokens, readback)],
                  counter=tokens, chain=BURST, first=first_io)
    return tail.record(steps), readback, params


class GreedyChain:
    """Greedy decoding chained on the device, over a decode method (`chains`): `chain(input_ids,
    cache_position, steps)` gives the `steps` tokens after token `input_ids` [1, 1] at `cache_position`
    [1], each step running the method, taking its logits' argmax as `Argmax` does and feeding that token
    back at the next position, with no host work between steps (a submission chains BURST of them;
    more take turns); the state (the KV cache) advances as `steps` calls would advance it. int32 [steps]."""

    kind = "greedy"
    """How a step chooses its token: "greedy" (the argmax) or "sampled" (`SampledChain`); its recording's key."""

    def __init__(self, method: LoadedMethod):
        if not chains(method):
            raise LoadError(f"method {method.name!r} cannot chain {self.kind} steps: that needs inputs (a token id "
                            "[1, 1], a position [1]) held as int32 and one float output of one row")
        self.method = method
        self._steps, readback, self._params = method.tail.recording(
            self.kind, functools.partial(_record_chain, method, self.kind == "sampled"))
        self._tokens = np.frombuffer(readback.mapped(), np.int32, count=self._steps.counter.arg.numel)

    def __call__(self, input_ids, cache_position, steps: int) -> np.ndarray:
        return self._chain(input_ids, cache_position, steps, None)

    def _chain(self, input_ids, cache_position, steps: int, params: np.ndarray | None) -> np.ndarray:
        """The `steps` tokens, the sampler's state words `params` written for each submission's head."""
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
            raise InputError(f"{self.kind} steps must be an int, not {type(steps).__name__}")
        if steps < 1:
            raise InputError(f"{self.kind} steps must be at least 1, not {steps}")
        steps = int(steps)

        def run(given: list) -> np.ndarray:
            (ids, _, _), (position, first, _) = given
            self.method.check_index(1, first.astype(np.int64) + steps - 1)  # the position the last step writes
            if params is not None:
                self._params.mapped()[:params.nbytes] = params.tobytes()
            out: list[int] = []
            while len(out) < steps:
                n = min(steps - len(out), self._steps.chain)
                self._steps.run(n)
                out.extend(self._tokens[1:n + 1])
                ids.view[...] = out[-1]  # the next turn starts where this one ended
                position.view[...] = int(first.reshape(-1)[0]) + len(out)
            return np.array(out, np.int32)
        return self.method.replay((input_ids, cache_position), run)


class SampledChain(GreedyChain):
    """Sampled decoding chained on the device as `GreedyChain` chains greedy steps: `chain(input_ids,
    cache_position, steps, sampling)`, each step's token drawn from its logits by record_sample at the
    step's own cache position, the token loader/ops/sample.py's `sample_reference` draws for
    (`sampling.seed`, that position). One recording serves every `sampling`."""

    kind = "sampled"

    def __call__(self, input_ids, cache_position, steps: int,  # type: ignore[override]
                 sampling: Sampling) -> np.ndarray:
        sampling.check()
        if sampling.temperature == 0 or sampling.seed is None:
            raise InputError("sampled steps need a temperature and a seed (greedy steps: GreedyChain)")
        vocab = self.method.tail.outputs[0].arg.shape[-1]
        top_k = None if sampling.top_k is None else min(sampling.top_k, vocab)  # as many filter nothing
        state = sample_state(sampling.temperature, top_k, sampling.top_p, sampling.seed)
        return self._chain(input_ids, cache_position, steps, state)


class Steps(Executor):
    """Decoding steps chained on the device, up to `chain` of them in one submission, with
    command buffers recorded once: the head copies the inputs in, zeroes `counter` and copies the first
    word of `first` after it; each of the
    `chain` step buffers holds the same dispatches of one step (a decode call, its token's choice, and the
    hand-over of the chosen token to the next step: `GreedyChain`) behind a barrier on what
    came before; the tail copies the outputs out. A submission lists the head, the first `steps`
    step buffers and the tail: distinct buffers, so none is pending twice (one buffer listed `steps`
    times would need VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, which drivers may pay for with a
    copy per use)."""

    def __init__(self, device: Device, dispatches: list[Dispatch], pipelines: list[Pipeline],
                 inputs: list[tuple[Buffer, RTensor]], outputs: list[tuple[RTensor, Buffer]], counter: RTensor,
                 chain: int, first: Buffer):
        super().__init__(device, dispatches, pipelines, inputs, outputs)
        self.counter = counter
        self.chain = chain
        self.first = first
        """An io buffer whose first word the head copies into the word after `counter` (its buffer's last)."""
        self.head = self.tail = None
        self.step_cmds: list = []

    def record(self) -> None:
        self.allocate_sets()
        dev = self.device
        self.fence = vk.vkCreateFence(dev.device, vk.VkFenceCreateInfo(), None)
        self._fences = ffi.new("VkFence[1]", [self.fence])
        rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        self.head = self.commands.buffer()
        vk.vkBeginCommandBuffer(self.head, vk.VkCommandBufferBeginInfo())
        keep = [*self.inputs_in(self.head)]
        words = -(-self.counter.nbytes // 4) * 4
        lib.vkCmdFillBuffer(self.head, self.counter.buffer.handle, 0, words, 0)
        seed = ffi.new("VkBufferCopy*")
        seed.srcOffset, seed.dstOffset, seed.size = 0, words, 4
        lib.vkCmdCopyBuffer(self.head, self.first.handle, self.counter.buffer.handle, 1, seed)
        zeroed = barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, rw)
        lib.vkCmdPipelineBarrier(self.head, TRANSFER, COMPUTE, 0, 1, zeroed, 0, ffi.NULL, 0, ffi.NULL)
        vk.vkEndCommandBuffer(self.head)
        after_step = barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, rw)  # the step before, or the head
        needed = barriers_before(self.dispatches)
        keep += [zeroed, after_step, seed]
        for _ in range(self.chain):
            cmd = self.commands.buffer()
            self.step_cmds.append(cmd)
            vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
            lib.vkCmdPipelineBarrier(cmd, COMPUTE, COMPUTE, 0, 1, after_step, 0, ffi.NULL, 0, ffi.NULL)
            keep += self.record_dispatches(cmd, needed=needed)
            vk.vkEndCommandBuffer(cmd)
        self.tail = self.commands.buffer()
        vk.vkBeginCommandBuffer(self.tail, vk.VkCommandBufferBeginInfo())
        keep += self.outputs_out(self.tail)
        vk.vkEndCommandBuffer(self.tail)
        self._keep = keep
        dev.check()

    def run(self, steps: int) -> None:
        """`steps` (1 to `chain`) steps in one submission, waiting until done."""
        cmds = ffi.new("VkCommandBuffer[]", [self.head, *self.step_cmds[:steps], self.tail])
        submit = ffi.new("VkSubmitInfo*")
        submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        submit.commandBufferCount = steps + 2
        submit.pCommandBuffers = cmds
        self.submit_and_wait(submit)

    def close(self) -> None:
        super().close()  # waits for the device, then frees the pool with every buffer of the chain
        self.head = self.tail = None
        self.step_cmds = []
