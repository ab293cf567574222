"""Allocator, ledger, staging ring, casts, SubRange binding and failure cleanup."""
import numpy as np
import pytest

from vkx.format import vkgraph as g
from vkx.loader import load_graph
from vkx.loader.gpu.device import default_device
from vkx.loader.errors import BadProgramError, InputError, OutOfDeviceMemoryError, UnsupportedOpError
from vkx.loader.gpu.memory import Allocator, MiB
from vkx.loader.upload.named_data import FreeableBuffer
from vkx.loader.upload.staging import StagingRing

from .helpers import relu_add_graph, tensor, weights


def test_suballocation_and_dedicated():
    a = Allocator(default_device())
    small = [a.buffer(1000, "weights") for _ in range(50)]
    assert a.ledger.allocations["weights"] == 1            # one 4 MiB block
    assert a.ledger.live["weights"] == 4 * MiB
    offsets = {b.offset for b in small}
    assert len(offsets) == 50 and all(o % 256 == 0 for o in offsets)
    big = a.buffer(5 * MiB, "weights")
    assert big.offset == 0 and a.ledger.allocations["weights"] == 2
    for b in small:
        b.free()
    assert a.ledger.allocations["weights"] == 1            # the emptied block went back
    big.free()
    assert a.ledger.is_zero and a.ledger.peak["weights"] == 9 * MiB


def test_alias_group_is_one_allocation():
    a = Allocator(default_device())
    bufs = a.alias_group([1000, 5000, 300])
    assert a.ledger.allocations["activations"] == 1
    assert {b.offset for b in bufs} == {0} and len({id(b.allocation) for b in bufs}) == 1
    a.close()
    assert a.ledger.is_zero


def test_budget_raises_typed_error():
    a = Allocator(default_device(), budget=8 * MiB)
    a.buffer(6 * MiB, "weights")
    with pytest.raises(OutOfDeviceMemoryError, match="budget"):
        a.buffer(6 * MiB, "activations")
    a.close()
    assert a.ledger.is_zero


def test_ring_reuses_fixed_chunks():
    dev = default_device()
    a = Allocator(dev)
    ring = StagingRing(dev, a, chunks=2, chunk_bytes=256 * 1024)
    src = np.arange(300_000, dtype=np.int32)              # 1.2 MB: many chunks
    dst = a.buffer(src.size * 4, "weights", "device")
    ring.upload(FreeableBuffer.in_memory(src), dst)
    ring.flush()
    assert a.ledger.peak["staging"] == 2 * 256 * 1024     # never grew
    assert ring.submits >= 4
    ring.close()
    assert a.ledger.live["staging"] == 0
    back = a.buffer(src.size * 4, "io", "host")  # read back through a host-visible copy
    import vulkan as vk
    from vkx.loader.gpu.device import CommandPool
    commands = CommandPool(dev)
    cmd = commands.buffer()
    vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
    vk.vkCmdCopyBuffer(cmd, dst.handle, back.handle, 1, [vk.VkBufferCopy(size=src.size * 4)])
    vk.vkEndCommandBuffer(cmd)
    fence = vk.vkCreateFence(dev.device, vk.VkFenceCreateInfo(), None)
    vk.vkQueueSubmit(dev.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[cmd])], fence)
    dev.wait_fence(fence)
    vk.vkDestroyFence(dev.device, fence, None)
    commands.close()
    got = np.frombuffer(back.mapped(), np.int32).copy()
    np.testing.assert_array_equal(got, src.astype(np.int32))
    a.close()
    assert a.ledger.is_zero


@pytest.mark.parametrize("upload", ["auto", "staging"])
@pytest.mark.parametrize("dt,np_dt", [(g.DataType.FLOAT16, np.float16), (g.DataType.BFLOAT16, np.uint16),
                                      (g.DataType.INT8, np.int8), (g.DataType.UINT8, np.uint8),
                                      (g.DataType.BOOL, np.bool_), (g.DataType.INT32, np.int32)])
def test_constant_bytes_arrive_as_stored(upload, dt, np_dt):
    """A constant keeps its dtype on the device: its device bytes are its file bytes."""
    rng = np.random.default_rng(5)
    c = (rng.standard_normal(777) * 50).astype(np_dt)
    graph = g.VkGraph(values=[tensor([777], dt, cid=0)], output_ids=[0],
                      constants=[g.ConstantRef(g.NAMED_OFFSET, c.nbytes, "c")])
    with load_graph(graph, [c.tobytes()], upload=upload) as p:
        assert p.weight_bytes == c.nbytes
        out = p.run_numpy()[0]
    if dt == g.DataType.BFLOAT16:  # numpy callers get bfloat16 as exact float32 values
        out = (out.view(np.uint32) >> 16).astype(np.uint16)
    assert out.tobytes() == c.tobytes()


@pytest.mark.parametrize("dt", [g.DataType.FLOAT64, g.DataType.INT64])
def test_64_bit_tensors_never_reach_the_device(dt):
    graph = g.VkGraph(values=[tensor([7], dt, cid=0)], output_ids=[0],
                      constants=[g.ConstantRef(g.NAMED_OFFSET, 56, "c")])
    with pytest.raises(UnsupportedOpError, match="cannot live on a device"):
        load_graph(graph, [bytes(56)])


def test_subrange_binding():
    n = 100_000
    graph = g.VkGraph(values=[tensor([n]), tensor([n])], input_ids=[0], output_ids=[1],
                      chain=[g.OperatorCall(0, "test.relu_split.default", (0, 1))])
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    with load_graph(graph, [], max_binding_bytes=64 * 1024) as p:
        assert p.dispatch_count == -(-n * 4 // (64 * 1024))
        np.testing.assert_array_equal(p(x), np.maximum(x, 0))


def test_oversized_binding_is_typed():
    n = 100_000
    graph = g.VkGraph(values=[tensor([n]), tensor([n])], input_ids=[0], output_ids=[1],
                      chain=[g.OperatorCall(0, "test.relu.default", (0, 1))])
    with pytest.raises(UnsupportedOpError, match="maxStorageBufferRange"):
        load_graph(graph, [], max_binding_bytes=64 * 1024)


def test_inputs_checked():
    with load_graph(relu_add_graph(10), [weights(10).tobytes()]) as p:
        with pytest.raises(InputError, match="shape"):
            p(np.zeros(11, np.float32))
        with pytest.raises(InputError, match="dtype"):
            p(np.zeros(10, np.int64))
        with pytest.raises(InputError, match="expected 1"):
            p()


def test_wrong_constant_size_is_typed():
    with pytest.raises(BadProgramError, match="bytes"):
        load_graph(relu_add_graph(10), [b"\0" * 12])


@pytest.mark.parametrize("schedule,upload", [("lazy", "auto"), ("lazy", "staging"), ("eager", "auto")])
@pytest.mark.parametrize("budget_mib", [0.001, 4, 8, 12])
def test_oom_cleans_up_then_loads(schedule, upload, budget_mib):
    graph_n = 1_000_000   # 4 MB weight, 2 x 4 MB activations, 2 x 4 MB io, ring 1 MiB
    w = weights(graph_n)
    with pytest.raises(OutOfDeviceMemoryError) as info:
        load_graph(relu_add_graph(graph_n), [w.tobytes()], schedule=schedule, upload=upload,
                   memory_budget=int(budget_mib * MiB), staging_chunk_bytes=1 * MiB)
    assert info.value.ledger["total"] == 0 and info.value.ledger["buffers"] == 0
    x = np.ones(graph_n, np.float32)
    with load_graph(relu_add_graph(graph_n), [w.tobytes()], schedule=schedule) as p:
        np.testing.assert_array_equal(p(x), 1 + w)


def test_missing_shader_is_typed_and_clean():
    from vkx.format import contract, opset
    from vkx.loader import ops
    from vkx.loader.errors import ShaderError

    if opset.lookup("test.noshader.default") is None:
        opset.declare(contract.OpDecl("test.noshader.default", (contract.Arg("self", contract.Kind.TENSOR),)))

        @ops.builds("test.noshader.default")
        def _op(b, call):
            b.dispatch("no_such_shader_xyz", [call.tensor("self"), call.out], b"", (1, 1, 1))

    graph = g.VkGraph(values=[tensor([4]), tensor([4])], input_ids=[0], output_ids=[1],
                      chain=[g.OperatorCall(0, "test.noshader.default", (0, 1))])
    with pytest.raises(ShaderError, match="no_such_shader_xyz") as info:
        load_graph(graph, [])
    assert info.value.ledger["total"] == 0
