"""Hand-built VkGraphs for loader tests, the limits to build them under without a device, and the
Android baseline's device whether vkx or Khronos' profiles layer puts the profile in force."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator

import numpy as np

from vkx.format import vkgraph as g
from vkx.loader.gpu.limits import Limits
from vkx.loader.ops import STORAGE_FEATURES


def no_device_limits(**changes) -> Limits:
    """What a graph built without a device is built under (`GraphBuilder(graph, no_device_limits())`):
    a small GPU with 8- and 16-bit storage, with `changes` (Limits' field names)."""
    plain = Limits(
        api_version=(1, 2, 0), max_storage_buffer_range=1 << 27, min_storage_buffer_offset_alignment=16, max_push_constants_size=128,
        max_compute_shared_memory_size=16384, max_compute_work_group_invocations=1024,
        max_compute_work_group_size=(1024, 1024, 64), max_compute_work_group_count=(65535, 65535, 65535),
        max_per_stage_descriptor_storage_buffers=16, max_bound_descriptor_sets=4, subgroup_size=0,
        features=frozenset(STORAGE_FEATURES.values()))
    return replace(plain, **changes)


def scalar_value(a) -> g.Value:
    """The graph value of an op's argument that is no tensor: None, a bool, int, float or str, or a
    list of ints (IntList)."""
    if a is None:
        return g.Null()
    if isinstance(a, bool):
        return g.Bool(a)
    if isinstance(a, int):
        return g.Int(a)
    if isinstance(a, float):
        return g.Double(a)
    if isinstance(a, str):
        return g.String(a)
    if isinstance(a, (list, tuple)) and not any(isinstance(x, (bool, float)) for x in a):
        return g.IntList(tuple(int(x) for x in a))
    raise TypeError(f"no graph value for {a!r}")


def tensor(dims, dt=g.DataType.FLOAT32, cid=-1, mem=-1):
    return g.Tensor(dt, tuple(dims), constant_id=cid, mem_obj_id=mem)


def relu_add_graph(n=1000, wdtype=g.DataType.FLOAT32, shared=True):
    """out = relu(x) + w, with w a constant; mid and out share a memory object when `shared`."""
    values = [
        tensor([n]),                                    # 0 x
        tensor([n], wdtype, cid=0),                     # 1 w
        tensor([n], mem=0 if shared else -1),           # 2 relu(x)
        tensor([n], mem=1 if shared else -1),           # 3 out
    ]
    chain = [g.OperatorCall(0, "test.relu.default", (0, 2)),
             g.OperatorCall(1, "test.add.default", (2, 1, 3))]
    consts = [g.ConstantRef(g.NAMED_OFFSET, values[1].nbytes, "w")]
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[3], constants=consts)


def weights(n=1000, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def write_pte(tmp_path, graph, consts, layout="named", external=None, name="m.pte"):
    """Write `graph` with constant bytes `consts` (arrays); returns (pte path, external path|None)."""
    import hashlib

    from vkx.format import ConstantPayload, IOSpec, ScalarType, write_program

    st = {g.DataType.FLOAT32: ScalarType.FLOAT, g.DataType.INT64: ScalarType.LONG,
          g.DataType.INT32: ScalarType.INT, g.DataType.FLOAT16: ScalarType.HALF}
    payloads = []
    for c in consts:
        b = np.ascontiguousarray(c).tobytes()
        payloads.append(ConstantPayload(hashlib.sha256(b).hexdigest(), len(b), lambda b=b: b))
    ins = [IOSpec(st[graph.values[i].datatype], graph.values[i].dims) for i in graph.input_ids]
    outs = [IOSpec(st[graph.values[i].datatype], graph.values[i].dims) for i in graph.output_ids]
    ext = str(tmp_path / external) if external else None
    path = str(tmp_path / name)
    write_program(path, graph, payloads, ins, outs, layout=layout, external_data=ext)
    return path, ext


def layer_profile() -> str | None:
    """The Khronos profile the driver reports through Khronos' profiles layer (`VK_LAYER_KHRONOS_profiles`
    in VK_INSTANCE_LAYERS: docs/profiles.md, "In the suite"), None without the layer."""
    if "VK_LAYER_KHRONOS_profiles" not in os.environ.get("VK_INSTANCE_LAYERS", "").split(":"):
        return None
    return os.environ.get("VK_KHRONOS_PROFILES_PROFILE_NAME", "")


@contextmanager
def baseline_device() -> Iterator:
    """A device under the Android baseline: vkx's `android-baseline-2022` on a device of its own, or,
    where Khronos' layer already makes the driver report VP_ANDROID_baseline_2022, the default device
    (the layer allows one Vulkan instance a process: tests/conftest.py)."""
    from vkx.loader.gpu.device import Device, default_device

    if layer_profile() == "VP_ANDROID_baseline_2022":
        yield default_device()
        return
    dev = Device(profile="android-baseline-2022")
    try:
        yield dev
    finally:
        dev.close()
