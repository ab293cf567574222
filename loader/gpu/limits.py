"""The limits and features in force, and the one check of every pipeline against them.

A `Limits` is what vkx may use on a device: what the device reports, or, under a device profile
(`VKX_DEVICE_PROFILE`, `--profile`), the lower of the device's figure and the profile's, and only
the features both have. Kernels choose their workgroup sizes, tilings and binding ranges from it
(`vkx.loader.gpu.device.Device.limits`, handed to them as `vkx.loader.ops.OpBuilder.limits`);
`check_pipeline` refuses a pipeline over it, and `vkx.loader.build.graph.GraphBuilder.dispatch` a
binding, push constants or a grid over it, each with a `LimitError` naming the kernel, the limit
and the value. The profiles' figures and their sources: docs/profiles.md.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Sequence

from vkx.loader.errors import LimitError

FEATURES = ("storageBuffer16BitAccess", "storageBuffer8BitAccess", "shaderFloat16", "shaderInt8",
            "shaderInt16", "shaderInt64", "shaderIntegerDotProduct", "subgroupOperations",
            "cooperativeMatrix", "vulkanMemoryModel")
"""The device features vkx's kernels may need (Vulkan's names; `subgroupOperations`: the basic and
arithmetic subgroup operations in the compute stage, VkPhysicalDeviceSubgroupProperties;
`cooperativeMatrix`: VK_NV_cooperative_matrix's, whose shaders glslang writes in the Vulkan memory
model; `vulkanMemoryModel`: with its device scope, which shaders' device-wide barriers and atomics
use once the model is enabled)."""


@dataclass(frozen=True)
class Limits:
    """The Vulkan version, device limits (VkPhysicalDeviceLimits' names in snake case) and the
    features in force."""
    api_version: tuple[int, int, int]
    max_storage_buffer_range: int
    min_storage_buffer_offset_alignment: int
    max_push_constants_size: int
    max_compute_shared_memory_size: int
    max_compute_work_group_invocations: int
    max_compute_work_group_size: tuple[int, int, int]
    max_compute_work_group_count: tuple[int, int, int]
    max_per_stage_descriptor_storage_buffers: int
    max_bound_descriptor_sets: int
    subgroup_size: int
    """Invocations per subgroup: the profile's where it names one (0: it does not), else the
    device's; shown, never assumed by a kernel."""
    features: frozenset[str]

    def under(self, profile: "Limits") -> "Limits":
        """The lower of these limits and `profile`'s (the higher alignment), the features both have."""
        lowered = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(profile, f.name)
            if f.name == "min_storage_buffer_offset_alignment":
                lowered[f.name] = max(mine, theirs)
            elif f.name == "subgroup_size":
                lowered[f.name] = theirs or mine
            elif f.name == "features":
                lowered[f.name] = mine & theirs
            elif f.name == "api_version":
                lowered[f.name] = min(mine, theirs)
            elif isinstance(mine, tuple):
                lowered[f.name] = tuple(min(a, b) for a, b in zip(mine, theirs))
            else:
                lowered[f.name] = min(mine, theirs)
        return replace(self, **lowered)

    def describe(self) -> dict:
        """The limits as Vulkan names them, features sorted (`vkx devices --json`)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            head, *rest = f.name.split("_")
            name = head + "".join(w.capitalize() for w in rest)
            if f.name == "api_version":
                out[name] = ".".join(map(str, value))
            else:
                out[name] = sorted(value) if f.name == "features" else (list(value) if isinstance(value, tuple) else value)
        return out

    def binds(self, buffers: int) -> bool:
        """Whether a kernel may bind `buffers` storage buffers (maxPerStageDescriptorStorageBuffers): an
        op builder's choice between a kernel and a form of it that binds fewer."""
        return buffers <= self.max_per_stage_descriptor_storage_buffers

    @property
    def max_spirv_version(self) -> tuple[int, int]:
        """The newest SPIR-V the Vulkan version in force accepts (Vulkan 1.1: 1.3, 1.2: 1.5, 1.3 on: 1.6)."""
        return {(1, 0): (1, 0), (1, 1): (1, 3), (1, 2): (1, 5)}.get(self.api_version[:2], (1, 6))


_ALL = 1 << 62  # "no bound" for a figure a profile does not lower
_PROFILES_FILE = Path(__file__).with_name("profiles.json")


def _khronos(record: dict) -> Limits:
    """A profile of profiles.json (vkx.loader.gpu._profiles_regen: the figures of Khronos' file)."""
    lim = record["limits"]
    return Limits(
        api_version=tuple(int(x) for x in record["api_version"].split(".")),
        max_storage_buffer_range=lim["maxStorageBufferRange"],
        min_storage_buffer_offset_alignment=lim["minStorageBufferOffsetAlignment"],
        max_push_constants_size=lim["maxPushConstantsSize"],
        max_compute_shared_memory_size=lim["maxComputeSharedMemorySize"],
        max_compute_work_group_invocations=lim["maxComputeWorkGroupInvocations"],
        max_compute_work_group_size=tuple(lim["maxComputeWorkGroupSize"]),
        max_compute_work_group_count=tuple(lim["maxComputeWorkGroupCount"]),
        max_per_stage_descriptor_storage_buffers=lim["maxPerStageDescriptorStorageBuffers"],
        max_bound_descriptor_sets=lim["maxBoundDescriptorSets"],
        subgroup_size=record["subgroup_size"], features=frozenset(record["features"]) & frozenset(FEATURES))


KHRONOS_PROFILES: dict[str, dict] = json.loads(_PROFILES_FILE.read_text())
"""The published profiles vkx models, as profiles.json records them (source file, revision, figures)."""

PROFILES: dict[str, Limits] = {
    **{name: _khronos(record) for name, record in KHRONOS_PROFILES.items()},
    # Qualcomm Adreno 7xx as Mesa's turnip driver reports it (docs/profiles.md): 16-bit
    # arithmetic and storage, 8-bit storage, no int8 arithmetic, waves of 128, 32 KiB shared.
    "adreno-7xx": Limits(
        api_version=(1, 3, 0),
        max_storage_buffer_range=1 << 27, min_storage_buffer_offset_alignment=64,
        max_push_constants_size=128, max_compute_shared_memory_size=32768,
        max_compute_work_group_invocations=1024, max_compute_work_group_size=(1024, 1024, 1024),
        max_compute_work_group_count=(65535, 65535, 65535),
        max_per_stage_descriptor_storage_buffers=_ALL, max_bound_descriptor_sets=4,
        subgroup_size=128,
        features=frozenset({"storageBuffer16BitAccess", "storageBuffer8BitAccess", "shaderFloat16",
                            "shaderInt16", "shaderInt64", "subgroupOperations"})),
}
"""Device profiles by name (VKX_DEVICE_PROFILE / --profile): Khronos' published Android profiles, and
one phone GPU as its driver reports it."""


def profile(name: str) -> Limits:
    """The profile `name`; a `LimitError` listing the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise LimitError(f"unknown device profile {name!r} (known: {', '.join(PROFILES)})") from None


# --------------------------------------------------------------------------- what a pipeline needs

_CAPABILITY_FEATURES = {
    9: "shaderFloat16", 39: "shaderInt8", 22: "shaderInt16", 11: "shaderInt64",
    4433: "storageBuffer16BitAccess", 4448: "storageBuffer8BitAccess",
    **{c: "subgroupOperations" for c in range(61, 69)},
    **{c: "shaderIntegerDotProduct" for c in range(6016, 6020)},
    5357: "cooperativeMatrix", 5345: "vulkanMemoryModel",
}
"""SPIR-V capabilities (their enumerants) and the device feature each needs."""
_UNSUPPORTED_CAPABILITIES = {10: "shaderFloat64", 4434: "uniformAndStorageBuffer16BitAccess",
                             4435: "storagePushConstant16", 4449: "uniformAndStorageBuffer8BitAccess",
                             4450: "storagePushConstant8", 5116: "shaderBFloat16Type",
                             6022: "cooperativeMatrix (VK_KHR_cooperative_matrix)"}
"""Capabilities needing a feature vkx never enables."""

_WORKGROUP = 4  # StorageClass Workgroup
_SPEC_OPS = {128: lambda a, b: a + b, 130: lambda a, b: a - b, 132: lambda a, b: a * b,
             134: lambda a, b: a // b if b else 0, 135: lambda a, b: int(a / b) if b else 0,
             137: lambda a, b: a % b if b else 0, 194: lambda a, b: a >> b, 195: lambda a, b: a >> b,
             196: lambda a, b: a << b, 197: lambda a, b: a | b, 199: lambda a, b: a & b}
"""The integer OpSpecConstantOp operations a size may be written with (IAdd, ISub, IMul, UDiv, SDiv,
UMod, the shifts, BitwiseOr, BitwiseAnd; operands as unsigned words, which sizes are)."""
_BUILTIN, _WORKGROUP_SIZE, _SPEC_ID = 11, 25, 1  # Decoration BuiltIn, BuiltIn WorkgroupSize, Decoration SpecId


@dataclass(frozen=True)
class PipelineNeeds:
    """What a compute shader asks of the device, read from its SPIR-V."""
    local_size: tuple[int, int, int]
    shared_bytes: int
    features: frozenset[str]
    spirv_version: tuple[int, int]


def pipeline_needs(spirv: bytes, spec: Sequence[int] = ()) -> PipelineNeeds:
    """Workgroup size (LocalSize, or the WorkgroupSize built-in's constant), shared-memory bytes
    (Workgroup variables, tightly packed) and the features its capabilities need; specialization
    constant i (SpecId i) is spec[i] where given, else its default, and an array sized by an
    expression of them (OpSpecConstantOp) has the expression's value."""
    if len(spirv) < 20 or len(spirv) % 4:
        raise LimitError("not a SPIR-V module")
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv)
    sizes: dict[int, int] = {}
    constants: dict[int, int] = {}
    pointee: dict[int, int] = {}
    composites: dict[int, tuple[int, ...]] = {}
    builtin_size: int | None = None
    spec_ids: dict[int, int] = {}
    local = (1, 1, 1)
    shared = 0
    features: set[str] = set()
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            raise LimitError("malformed SPIR-V (an instruction of 0 words)")
        a = words[i + 1:i + count]
        if op == 17:  # OpCapability
            cap = a[0]
            if cap in _UNSUPPORTED_CAPABILITIES:
                features.add(_UNSUPPORTED_CAPABILITIES[cap])
            elif cap in _CAPABILITY_FEATURES:
                features.add(_CAPABILITY_FEATURES[cap])
        elif op == 16 and a[1] == 17:  # OpExecutionMode LocalSize
            local = (a[2], a[3], a[4])
        elif op == 71 and a[1] == _BUILTIN and a[2] == _WORKGROUP_SIZE:  # OpDecorate
            builtin_size = a[0]
        elif op == 71 and a[1] == _SPEC_ID:
            spec_ids[a[0]] = a[2]
        elif op in (21, 22):  # OpTypeInt, OpTypeFloat
            sizes[a[0]] = a[1] // 8
        elif op == 20:  # OpTypeBool
            sizes[a[0]] = 4
        elif op in (23, 24):  # OpTypeVector, OpTypeMatrix
            sizes[a[0]] = sizes.get(a[1], 0) * a[2]
        elif op == 28:  # OpTypeArray
            sizes[a[0]] = sizes.get(a[1], 0) * constants.get(a[2], 0)
        elif op == 30:  # OpTypeStruct
            sizes[a[0]] = sum(sizes.get(m, 0) for m in a[1:])
        elif op == 32:  # OpTypePointer
            pointee[a[0]] = a[2]
        elif op == 43:  # OpConstant
            constants[a[1]] = a[2]
        elif op == 50:  # OpSpecConstant
            index = spec_ids.get(a[1], len(spec))
            constants[a[1]] = spec[index] if index < len(spec) else a[2]
        elif op == 52 and a[2] in _SPEC_OPS and len(a) == 5:  # OpSpecConstantOp on two integers
            constants[a[1]] = _SPEC_OPS[a[2]](constants.get(a[3], 0), constants.get(a[4], 0)) & 0xFFFFFFFF
        elif op == 52 and a[2] == 169 and len(a) == 6:  # OpSpecConstantOp Select
            constants[a[1]] = constants.get(a[4] if constants.get(a[3], 0) else a[5], 0)
        elif op == 52 and 170 <= a[2] <= 179 and len(a) == 5:  # integer comparisons (IEqual .. SLessThanEqual)
            x, y = constants.get(a[3], 0), constants.get(a[4], 0)
            constants[a[1]] = int({170: x == y, 171: x != y, 172: x > y, 173: x > y, 174: x >= y, 175: x >= y,
                                   176: x < y, 177: x < y, 178: x <= y, 179: x <= y}[a[2]])
        elif op in (44, 51):  # OpConstantComposite, OpSpecConstantComposite
            composites[a[1]] = tuple(a[2:])
        elif op == 59 and a[2] == _WORKGROUP:  # OpVariable in Workgroup storage
            shared += sizes.get(pointee.get(a[0], -1), 0)
        i += count
    if builtin_size is not None and builtin_size in composites:
        local = tuple(constants.get(c, 1) for c in composites[builtin_size])
    return PipelineNeeds(tuple(local), shared, frozenset(features), (words[1] >> 16 & 0xFF, words[1] >> 8 & 0xFF))


def check_pipeline(limits: Limits, kernel: str, spirv: bytes, nbindings: int, push_bytes: int,
                   spec: Sequence[int] = ()) -> None:
    """Refuse (LimitError naming the kernel, the limit and the value) a pipeline over `limits`."""
    needs = pipeline_needs(spirv, spec)
    invocations = needs.local_size[0] * needs.local_size[1] * needs.local_size[2]
    over = [(f"maxComputeWorkGroupSize[{d}]", n, m)
            for d, (n, m) in enumerate(zip(needs.local_size, limits.max_compute_work_group_size))]
    over += [("maxComputeWorkGroupInvocations", invocations, limits.max_compute_work_group_invocations),
             ("maxComputeSharedMemorySize", needs.shared_bytes, limits.max_compute_shared_memory_size),
             ("maxPerStageDescriptorStorageBuffers", nbindings, limits.max_per_stage_descriptor_storage_buffers),
             ("maxPushConstantsSize", push_bytes, limits.max_push_constants_size)]
    for limit, value, bound in over:
        if value > bound:
            raise LimitError(f"kernel {kernel}: {limit} is {bound} in force, the kernel needs {value}")
    if needs.spirv_version > limits.max_spirv_version:
        raise LimitError(f"kernel {kernel}: is SPIR-V {'.'.join(map(str, needs.spirv_version))}, which Vulkan "
                         f"{'.'.join(map(str, limits.api_version[:2]))} in force does not accept")
    missing = sorted(needs.features - limits.features)
    if missing:
        raise LimitError(f"kernel {kernel}: needs {', '.join(missing)}, which the device or "
                         f"its profile in force lacks")

