"""ExecuTorch's own Vulkan op registry (the installed wheel's `backends/vulkan/op_registry.py`) as the
judge of a VkGraph written for its C++ runtime: every call, as an FX node of the edge-dialect op,
must pass the registry's dtype and input checks, and every activation's storage type and memory
layout must be in the representations the registry gives that op (with its sync rules).

ExecuTorch is imported by the first check, not at collection: importing its Vulkan backend takes
about 20 s, which every run of any test paid while this module imported it at the top."""
from __future__ import annotations

import torch

from vkx.format.vkgraph import Bool, Double, Int, IntList, Null, StorageType, String, Tensor, ValueList, VkGraph

PREPACK, CLONE = "et_vk.prepack.default", "aten.clone.default"


def edge_op(name: str):
    """ExecuTorch's edge-dialect op for a VkGraph op name (`aten.linear.default`)."""
    from executorch.exir.dialects._ops import ops as exir_ops
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(exir_ops.edge, namespace), op), overload)


def tensor_repr(tensor: Tensor):
    from executorch.backends.vulkan import utils as vk_utils
    from executorch.backends.vulkan.serialization import vulkan_graph_schema as schema
    return vk_utils.TensorRepr(schema.VkStorageType(int(tensor.storage_type)),
                               schema.VkMemoryLayout(int(tensor.memory_layout)))


def check_against_registry(graph: VkGraph) -> set[str]:
    """Assert that the runtime implements every call as written (its registry's dtype, input and
    storage checks and sync rules; clones are its layout transitions). Returns the op names."""
    from executorch.backends.vulkan import op_registry as registry
    from executorch.backends.vulkan import utils as vk_utils
    from executorch.backends.vulkan.serialization import vulkan_graph_schema as schema
    from torch._subclasses.fake_tensor import FakeTensorMode
    fx = torch.fx.Graph()
    nodes: dict[int, torch.fx.Node] = {}
    with FakeTensorMode():
        for vid, value in enumerate(graph.values):
            if isinstance(value, Tensor):
                nodes[vid] = fx.placeholder(f"v{vid}")
                nodes[vid].meta["val"] = torch.empty(value.dims, dtype=getattr(torch, value.dtype.name))

    def arg(vid: int):
        value = graph.values[vid]
        if isinstance(value, Tensor):
            return nodes[vid]
        if isinstance(value, ValueList):
            return [nodes[item] for item in value.items]
        if isinstance(value, (Int, Double, Bool, String)):
            return value.value
        if isinstance(value, IntList):
            return list(value.items)
        assert isinstance(value, Null), value
        return None

    def activations(vid: int) -> list[Tensor]:
        value = graph.values[vid]
        items = [graph.values[i] for i in value.items] if isinstance(value, ValueList) else [value]
        return [t for t in items if isinstance(t, Tensor) and t.constant_id < 0]

    for call in graph.chain:
        *args, out = call.args
        for tensor in [t for vid in call.args for t in activations(vid)]:
            assert tensor.storage_type in (StorageType.BUFFER, StorageType.TEXTURE_3D), (call.name, tensor)
            assert tensor_repr(tensor).memory_layout in vk_utils.all_memory_layouts, (call.name, tensor)
        if call.name == PREPACK:  # inserted by ExecuTorch's own preprocess: in the runtime, not the registry
            assert graph.values[args[0]].constant_id >= 0
            continue
        target = edge_op(call.name)
        assert registry.has_impl(target), f"{call.name} is not in ExecuTorch's Vulkan op registry"
        features = registry.get_op_features(target)
        node = fx.call_function(target, tuple(arg(vid) for vid in args))
        node.meta["val"] = (tuple(n.meta["val"] for n in arg(out)) if isinstance(graph.values[out], ValueList)
                            else nodes[out].meta["val"])
        ok, why = features.check_dtypes(node)
        assert ok, f"{call.name}: {why}"
        assert features.are_node_inputs_supported_fn(node), f"{call.name}: the registry refuses these inputs"
        if call.name == CLONE:  # the transition between two representations (the runtime has none from
            reprs = [tensor_repr(t) for vid in call.args for t in activations(vid)]  # a buffer to a buffer)
            assert all(vk_utils.ANY_STORAGE.is_compatible(r) for r in reprs)
            assert not all(r.storage_type == schema.VkStorageType.BUFFER for r in reprs), f"{call.name}: {reprs}"
            continue
        repsets = features.make_op_repsets(node)
        reprs = {}
        for i, vid in enumerate(args):
            for tensor in activations(vid):
                reprs.setdefault("args", []).append(tensor_repr(tensor))
                assert repsets.get_arg_repset(i).is_compatible(tensor_repr(tensor)), \
                    f"{call.name} arg {i}: {tensor_repr(tensor)} not in {repsets.get_arg_repset(i)}"
        for j, tensor in enumerate(activations(out)):
            reprs.setdefault("outs", []).append(tensor_repr(tensor))
            assert repsets.get_out_repset(j).is_compatible(tensor_repr(tensor)), \
                f"{call.name} output {j}: {tensor_repr(tensor)} not in {repsets.get_out_repset(j)}"
        if repsets.sync_args_repr and reprs.get("args"):
            assert all(r == reprs["args"][0] for r in reprs["args"]), f"{call.name}: args in {reprs['args']}"
        if repsets.sync_outs_repr:
            assert all(r == reprs["outs"][0] for r in reprs["outs"]), f"{call.name}: outputs in {reprs['outs']}"
        primary = activations(args[repsets.primary_arg_idx]) if repsets.sync_primary_io_repr else []
        if primary:  # (a constant is prepacked by the op itself)
            assert tensor_repr(primary[0]) == reprs["outs"][0], \
                f"{call.name}: {tensor_repr(primary[0])} → {reprs['outs']}"
    return {call.name for call in graph.chain}
