"""The Vulkan instance, physical device, logical device and compute queue.

Selection: a discrete or integrated GPU when one exists, else the CPU device
(lavapipe). `VKX_DEVICE` (an index or a substring of the name) overrides.
`VKX_DEVICE_PROFILE` (a name of `vkx.loader.gpu.limits.PROFILES`) puts a device profile in
force: `limits` is then the lower of the device's limits and the profile's (`device_limits`: the
device's own), and only the features both have are enabled. `VKX_VALIDATION=1` enables
VK_LAYER_KHRONOS_validation with a debug-utils messenger; every warning or error it reports is
collected and raised as a `ValidationError` at the next sync point (`check()`, fence waits, close).

`VK_NV_cooperative_matrix` (with the Vulkan memory model its shaders declare) is enabled wherever
the device has it: `cooperative_matrix_shapes` lists the products it offers a subgroup, and
`fp16_cooperative_matrix` says whether the one vkx's fp16 GEMM (shaders/matmul_coop.comp) needs is
in force.

`VK_EXT_external_memory_host` is enabled wherever the device has it:
`import_alignment` is its `minImportedHostPointerAlignment` (None without the
extension) and `host_pointer_types(address)` the memory types a host pointer
may be imported as (0: refused).
"""
from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass

import vulkan as vk

from vkx.loader.errors import DeviceError, ValidationError
from vkx.loader.gpu.limits import FEATURES, Limits, profile as named_profile

ffi = vk.ffi
lib = vk._vulkan.lib
UINT64_MAX = 0xFFFFFFFFFFFFFFFF
API_TUPLE = (1, 2, 0)
API_VERSION = vk.VK_MAKE_VERSION(*API_TUPLE)
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
EXTERNAL_MEMORY_HOST = "VK_EXT_external_memory_host"
INTEGER_DOT_PRODUCT = "VK_KHR_shader_integer_dot_product"
COOPERATIVE_MATRIX = "VK_NV_cooperative_matrix"
HOST_ALLOCATION = vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT

_TYPE_RANK = {
    vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: 0,
    vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: 1,
    vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: 2,
    vk.VK_PHYSICAL_DEVICE_TYPE_CPU: 3,
}

# The binding stores one debug callback per process (a second messenger replaces it): it appends
# here, and every Device with validation drains the list at its sync points.
_messages: list[str] = []
_messages_lock = threading.Lock()


def _debug_callback(severity, types, data, user):  # noqa: ARG001
    text = ffi.string(data.pMessage).decode(errors="replace")
    with _messages_lock:
        _messages.append(text)
    return 0


def validation_requested() -> bool:
    return os.environ.get("VKX_VALIDATION", "") not in ("", "0")


def _has(bit: int) -> property:
    """A property: whether a memory type's flags have `bit`."""
    return property(lambda self: bool(self.flags & bit))


@dataclass(frozen=True)
class MatrixShape:
    """One product a subgroup does with VK_NV_cooperative_matrix: D[M, N] = A[M, K] B[K, N] + C, by
    component type (VkComponentTypeNV's numbers, which VK_KHR_cooperative_matrix keeps)."""
    m: int
    n: int
    k: int
    a: int
    b: int
    c: int
    d: int


# VkComponentTypeNV's values by their KHR names: the binding's _NV names are None
FLOAT16, FLOAT32 = vk.VK_COMPONENT_TYPE_FLOAT16_KHR, vk.VK_COMPONENT_TYPE_FLOAT32_KHR
FP16_PRODUCT = MatrixShape(16, 16, 16, FLOAT16, FLOAT16, FLOAT32, FLOAT32)
"""The product shaders/matmul_coop.comp is made of: fp16 operands, fp32 accumulators."""
COOPERATIVE_SUBGROUP = 32
"""The subgroup size shaders/matmul_coop.comp is written for (its workgroups are whole subgroups of 32)."""


@dataclass(frozen=True)
class MemoryType:
    index: int
    flags: int
    heap: int

    device_local = _has(vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
    host_visible = _has(vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)
    host_coherent = _has(vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
    host_cached = _has(vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)


class Device:
    """One logical device with one compute queue and one command pool."""

    def __init__(self, selector: str | None = None, validation: bool | None = None,
                 profile: str | None = None):
        self.validation = validation_requested() if validation is None else validation
        self.profile = (os.environ.get("VKX_DEVICE_PROFILE") if profile is None else profile) or None
        """The device profile in force (None: the device's own limits)."""
        in_force = None if self.profile is None else named_profile(self.profile)
        self.instance = None
        self.device = None
        self._messenger = None
        self._destroy_messenger = None
        self.closed = False
        self._on_close: list = []
        self._pointer_properties = None
        try:
            self._create_instance()
            if selector is None:
                self._pick_physical(os.environ.get("VKX_DEVICE"), "VKX_DEVICE=")
            else:
                self._pick_physical(selector, "device ")
            self._create_device(in_force)
        except vk.VkError as error:
            self.close(check=False)
            raise DeviceError(f"Vulkan device setup failed: {type(error).__name__}") from error
        except BaseException:
            self.close(check=False)
            raise

    # -- setup -------------------------------------------------------------
    def _create_instance(self) -> None:
        layers, exts = [], []
        if self.validation:
            have = {p.layerName for p in vk.vkEnumerateInstanceLayerProperties()}
            if VALIDATION_LAYER not in have:
                raise DeviceError("VKX_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed")
            layers, exts = [VALIDATION_LAYER], ["VK_EXT_debug_utils"]
        app = vk.VkApplicationInfo(pApplicationName="vkx", pEngineName="vkx", apiVersion=API_VERSION)
        info = vk.VkInstanceCreateInfo(pApplicationInfo=app, ppEnabledLayerNames=layers,
                                       ppEnabledExtensionNames=exts)
        self.instance = vk.vkCreateInstance(info, None)
        if self.validation:
            sev = (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                   | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)
            kinds = (vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                     | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                     | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)
            create = vk.vkGetInstanceProcAddr(self.instance, "vkCreateDebugUtilsMessengerEXT")
            self._destroy_messenger = vk.vkGetInstanceProcAddr(self.instance, "vkDestroyDebugUtilsMessengerEXT")
            mci = vk.VkDebugUtilsMessengerCreateInfoEXT(messageSeverity=sev, messageType=kinds,
                                                        pfnUserCallback=_debug_callback)
            self._messenger = create(self.instance, mci, None)

    def _pick_physical(self, selector: str | None, source: str) -> None:
        """Pick the device `selector` names; `source` says where it came from in messages."""
        physicals = list(vk.vkEnumeratePhysicalDevices(self.instance))
        if not physicals:
            raise DeviceError("no Vulkan device found")
        props = [vk.vkGetPhysicalDeviceProperties(p) for p in physicals]
        names = [p.deviceName for p in props]
        if selector:
            if selector.isdigit():
                index = int(selector)
                if index >= len(physicals):
                    raise DeviceError(f"{source}{selector}: only {len(physicals)} device(s): {names}")
            else:
                hits = [i for i, n in enumerate(names) if selector.lower() in n.lower()]
                if not hits:
                    raise DeviceError(f"{source}{selector!r} matches none of {names}")
                index = hits[0]
        else:
            index = min(range(len(physicals)), key=lambda i: (_TYPE_RANK.get(props[i].deviceType, 9), i))
        self.physical = physicals[index]
        p = props[index]
        self.name = p.deviceName
        self.device_type = p.deviceType
        lim = p.limits
        self.timestamp_period = float(lim.timestampPeriod)
        """Nanoseconds per timestamp tick (profiling, loader/execute/record.py)."""
        m3 = vk.VkPhysicalDeviceMaintenance3Properties()
        sub = vk.VkPhysicalDeviceSubgroupProperties(pNext=m3)
        vk.vkGetPhysicalDeviceProperties2(self.physical, vk.VkPhysicalDeviceProperties2(pNext=sub))
        version = int(p.apiVersion)
        self._reported = dict(
            # the version vkx uses: the device's, at most the one the instance asks for
            api_version=min((version >> 22, version >> 12 & 0x3FF, version & 0xFFF), API_TUPLE),
            max_storage_buffer_range=int(lim.maxStorageBufferRange),
            min_storage_buffer_offset_alignment=int(lim.minStorageBufferOffsetAlignment),
            max_push_constants_size=int(lim.maxPushConstantsSize),
            max_compute_shared_memory_size=int(lim.maxComputeSharedMemorySize),
            max_compute_work_group_invocations=int(lim.maxComputeWorkGroupInvocations),
            max_compute_work_group_size=tuple(int(x) for x in lim.maxComputeWorkGroupSize),
            max_compute_work_group_count=tuple(int(x) for x in lim.maxComputeWorkGroupCount),
            max_per_stage_descriptor_storage_buffers=int(lim.maxPerStageDescriptorStorageBuffers),
            max_bound_descriptor_sets=int(lim.maxBoundDescriptorSets),
            subgroup_size=int(sub.subgroupSize))
        wanted = vk.VK_SUBGROUP_FEATURE_BASIC_BIT | vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
        self._subgroups = bool(sub.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
                               and sub.supportedOperations & wanted == wanted)
        self.max_memory_allocation_size = int(m3.maxMemoryAllocationSize) or (1 << 31)
        mp = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self.memory_types = [MemoryType(i, int(mp.memoryTypes[i].propertyFlags), int(mp.memoryTypes[i].heapIndex))
                             for i in range(mp.memoryTypeCount)]
        self.heap_sizes = [int(mp.memoryHeaps[i].size) for i in range(mp.memoryHeapCount)]
        exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(self.physical, None)}
        self.has_memory_budget = "VK_EXT_memory_budget" in exts
        self._has_dot_product = INTEGER_DOT_PRODUCT in exts
        self._has_cooperative_matrix = COOPERATIVE_MATRIX in exts
        self.cooperative_matrix_shapes: tuple[MatrixShape, ...] = ()
        """The subgroup-scope products VK_NV_cooperative_matrix offers in compute shaders (none without it)."""
        if self._has_cooperative_matrix:
            self.cooperative_matrix_shapes = self._matrix_shapes()
        self.import_alignment: int | None = None
        if EXTERNAL_MEMORY_HOST in exts:
            host = vk.VkPhysicalDeviceExternalMemoryHostPropertiesEXT()
            vk.vkGetPhysicalDeviceProperties2(self.physical, vk.VkPhysicalDeviceProperties2(pNext=host))
            self.import_alignment = int(host.minImportedHostPointerAlignment)
        self.compute_units = _compute_units(self.physical, exts, p.deviceType)
        """The device's compute units (SMs, CUs, CPU threads): how many tiles fill it, for gemm's split-K."""
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            raise DeviceError(f"{self.name}: no compute queue")
        # Prefer a compute-only family (async compute on discrete GPUs).
        plain = [i for i in compute if not families[i].queueFlags & vk.VK_QUEUE_GRAPHICS_BIT]
        self.queue_family = (plain or compute)[0]
        self.timestamp_bits = int(families[self.queue_family].timestampValidBits)
        """Valid bits of the queue's timestamps; 0: it has none."""

    def _matrix_shapes(self) -> tuple[MatrixShape, ...]:
        """vkGetPhysicalDeviceCooperativeMatrixPropertiesNV's subgroup-scope products, where the
        compute stage has them. Called through its own pointer: the binding's wrapper leaves the
        sType of the array it passes 0."""
        stages = vk.VkPhysicalDeviceCooperativeMatrixPropertiesNV()
        vk.vkGetPhysicalDeviceProperties2(self.physical, vk.VkPhysicalDeviceProperties2(pNext=stages))
        if not stages.cooperativeMatrixSupportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT:
            return ()
        name = b"vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"
        query = ffi.cast("PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
                         lib.vkGetInstanceProcAddr(self.instance, name))
        count = ffi.new("uint32_t *")
        if query(self.physical, count, ffi.NULL) != vk.VK_SUCCESS:
            return ()
        props = ffi.new("VkCooperativeMatrixPropertiesNV[]", count[0])
        for i in range(count[0]):
            props[i].sType = vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV
        if query(self.physical, count, props) != vk.VK_SUCCESS:
            return ()
        return tuple(MatrixShape(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.DType)
                     for p in props[0:count[0]] if p.scope == vk.VK_SCOPE_SUBGROUP_KHR)

    def _create_device(self, in_force: Limits | None) -> None:
        f16 = vk.VkPhysicalDevice16BitStorageFeatures()
        f8 = vk.VkPhysicalDevice8BitStorageFeatures(pNext=f16)
        fi = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=f8)
        dot = vk.VkPhysicalDeviceShaderIntegerDotProductFeatures(pNext=fi)
        chain = dot if self._has_dot_product else fi
        coop = vk.VkPhysicalDeviceCooperativeMatrixFeaturesNV(pNext=chain)
        model = vk.VkPhysicalDeviceVulkanMemoryModelFeatures(pNext=coop)
        feats = vk.VkPhysicalDeviceFeatures2(pNext=model if self._has_cooperative_matrix else chain)
        vk.vkGetPhysicalDeviceFeatures2(self.physical, feats)
        reported = {
            "storageBuffer16BitAccess": f16.storageBuffer16BitAccess,
            "storageBuffer8BitAccess": f8.storageBuffer8BitAccess,
            "shaderFloat16": fi.shaderFloat16,
            "shaderInt8": fi.shaderInt8,
            "shaderInt16": feats.features.shaderInt16,
            "shaderInt64": feats.features.shaderInt64,
            "shaderIntegerDotProduct": self._has_dot_product and dot.shaderIntegerDotProduct,
            "subgroupOperations": self._subgroups,
            "cooperativeMatrix": self._has_cooperative_matrix and coop.cooperativeMatrix,
            "vulkanMemoryModel": (self._has_cooperative_matrix and model.vulkanMemoryModel
                                  and model.vulkanMemoryModelDeviceScope),
        }
        self.device_limits = Limits(**self._reported, features=frozenset(k for k in FEATURES if reported[k]))
        """The limits and features the device reports."""
        self.limits = self.device_limits if in_force is None else self.device_limits.under(in_force)
        """The limits and features in force: vkx's kernels are chosen from them and checked against them."""
        on = self.limits.features
        self.features = {k: k in on for k in FEATURES}
        # Enable exactly what is in force (structs built here, never by the binding): a shader that
        # needs more is refused by vkx.loader.gpu.limits.check_pipeline, and by validation besides.
        e16 = vk.VkPhysicalDevice16BitStorageFeatures(storageBuffer16BitAccess="storageBuffer16BitAccess" in on)
        e8 = vk.VkPhysicalDevice8BitStorageFeatures(pNext=e16, storageBuffer8BitAccess="storageBuffer8BitAccess" in on)
        ei = vk.VkPhysicalDeviceShaderFloat16Int8Features(
            pNext=e8, shaderFloat16="shaderFloat16" in on, shaderInt8="shaderInt8" in on)
        edot = vk.VkPhysicalDeviceShaderIntegerDotProductFeatures(pNext=ei, shaderIntegerDotProduct=True)
        base = vk.VkPhysicalDeviceFeatures(shaderInt16="shaderInt16" in on, shaderInt64="shaderInt64" in on)
        dot_on = "shaderIntegerDotProduct" in on
        coop_on = {"cooperativeMatrix", "vulkanMemoryModel"} <= on
        chain = edot if dot_on else ei
        ecoop = vk.VkPhysicalDeviceCooperativeMatrixFeaturesNV(pNext=chain, cooperativeMatrix=True)
        emodel = vk.VkPhysicalDeviceVulkanMemoryModelFeatures(pNext=ecoop, vulkanMemoryModel=True,
                                                              vulkanMemoryModelDeviceScope=True)
        enabled = vk.VkPhysicalDeviceFeatures2(pNext=emodel if coop_on else chain, features=base)
        exts = ["VK_EXT_memory_budget"] if self.has_memory_budget else []
        if self.import_alignment is not None:
            exts.append(EXTERNAL_MEMORY_HOST)
        if dot_on:
            exts.append(INTEGER_DOT_PRODUCT)
        if coop_on:
            exts.append(COOPERATIVE_MATRIX)
        self.fp16_cooperative_matrix = (
            coop_on and {"shaderFloat16", "storageBuffer16BitAccess", "subgroupOperations"} <= on
            and self.limits.subgroup_size == COOPERATIVE_SUBGROUP and FP16_PRODUCT in self.cooperative_matrix_shapes)
        """Whether shaders/matmul_coop.comp may run: the features it needs in force, subgroups of 32,
        and fp16 16 x 16 x 16 products into fp32 listed."""
        qci = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, pQueuePriorities=[1.0])
        dci = vk.VkDeviceCreateInfo(pNext=enabled, pQueueCreateInfos=[qci], ppEnabledExtensionNames=exts)
        self.device = vk.vkCreateDevice(self.physical, dci, None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.queue_family, 0)
        # vkQueueSubmit needs the queue externally synchronised: Programs on one device may be
        # called from different threads (each Program serialises its own calls)
        self.submit_lock = threading.Lock()
        self._pointer_properties = (None if self.import_alignment is None else
                                    vk.vkGetDeviceProcAddr(self.device, "vkGetMemoryHostPointerPropertiesEXT"))

    # -- queries -----------------------------------------------------------
    @property
    def is_cpu(self) -> bool:
        return self.device_type == vk.VK_PHYSICAL_DEVICE_TYPE_CPU

    @property
    def integrated(self) -> bool:
        """An integrated GPU or a CPU device: its device memory is host memory."""
        return self.device_type in (vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_CPU)

    def host_pointer_types(self, address: int) -> int:
        """Memory type bits the driver allows for importing host memory at `address` (0: refused).

        `address` must be a multiple of `import_alignment`."""
        if self._pointer_properties is None:
            return 0
        props = vk.VkMemoryHostPointerPropertiesEXT()  # built here: the binding's own has sType 0
        try:
            self._pointer_properties(self.device, HOST_ALLOCATION, ffi.cast("void *", address), props)
        except vk.VkError:
            return 0
        return int(props.memoryTypeBits)

    def heap_budget(self) -> list[tuple[int, int]] | None:
        """(budget, usage) per heap from VK_EXT_memory_budget, or None."""
        if not self.has_memory_budget:
            return None
        b = vk.VkPhysicalDeviceMemoryBudgetPropertiesEXT()
        vk.vkGetPhysicalDeviceMemoryProperties2(self.physical, vk.VkPhysicalDeviceMemoryProperties2(pNext=b))
        return [(int(b.heapBudget[i]), int(b.heapUsage[i])) for i in range(len(self.heap_sizes))]

    def describe(self) -> dict:
        return {
            "name": self.name, "cpu": self.is_cpu,
            "maxStorageBufferRange": self.limits.max_storage_buffer_range,
            "minStorageBufferOffsetAlignment": self.limits.min_storage_buffer_offset_alignment,
            "maxMemoryAllocationSize": self.max_memory_allocation_size,
            "memory_types": [(t.index, hex(t.flags), t.heap) for t in self.memory_types],
            "heaps": self.heap_sizes, "features": self.features, "validation": self.validation,
            "profile": self.profile, "limits": self.limits.describe(),
            "minImportedHostPointerAlignment": self.import_alignment,
            "cooperativeMatrixShapes": [[s.m, s.n, s.k, s.a, s.b, s.c, s.d] for s in self.cooperative_matrix_shapes],
            "fp16CooperativeMatrix": self.fp16_cooperative_matrix,
        }

    # -- sync points -------------------------------------------------------
    def check(self) -> None:
        """Raise `ValidationError` with every message collected since the last check."""
        if not self.validation:
            return
        with _messages_lock:
            if not _messages:
                return
            found = list(_messages)
            _messages.clear()
        raise ValidationError(found)

    def wait_fence(self, fence, timeout_ns: int = UINT64_MAX) -> None:
        fences = ffi.new("VkFence[1]", [fence])
        result = lib.vkWaitForFences(self.device, 1, fences, vk.VK_TRUE, timeout_ns)
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkWaitForFences failed ({result})")
        self.check()

    def wait_idle(self) -> None:
        """Wait until the device has done all its work. vkDeviceWaitIdle uses every queue of the device,
        which Vulkan wants used by one thread at a time: the submissions' lock is held."""
        with self.submit_lock:
            lib.vkDeviceWaitIdle(self.device)

    def on_close(self, fn) -> None:
        """Run `fn()` before the device is destroyed (pipeline caches and the like)."""
        self._on_close.append(fn)

    def close(self, check: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        if self.device is not None:
            lib.vkDeviceWaitIdle(self.device)
            for fn in reversed(self._on_close):
                fn()
            self._on_close.clear()
            vk.vkDestroyDevice(self.device, None)
            self.device = None
        if self.instance is not None:
            if self._messenger is not None:
                self._destroy_messenger(self.instance, self._messenger, None)
                self._messenger = None
            vk.vkDestroyInstance(self.instance, None)
            self.instance = None
        if check:
            self.check()


_default: Device | None = None
class CommandPool:
    """The command pool of one owner (an executor, a state store, a copy batch) and the buffers it
    allocates. Vulkan lets one thread at a time use a pool and its buffers; an owner's work runs under
    its program's lock, so pools are never shared between programs (loaded and called from several
    threads, a pool of the device's tripped the validation layer's threading checks)."""

    def __init__(self, device: Device):
        self.device = device
        self.handle = vk.vkCreateCommandPool(device.device, vk.VkCommandPoolCreateInfo(
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=device.queue_family), None)

    def buffer(self):
        """A new primary command buffer (`free` it, or `close` the pool)."""
        return vk.vkAllocateCommandBuffers(self.device.device, vk.VkCommandBufferAllocateInfo(
            commandPool=self.handle, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]

    def free(self, cmd) -> None:
        vk.vkFreeCommandBuffers(self.device.device, self.handle, 1, [cmd])

    def close(self) -> None:
        """Destroy the pool and every buffer it holds (none may be pending)."""
        if self.handle is not None:
            vk.vkDestroyCommandPool(self.device.device, self.handle, None)
            self.handle = None


_default_lock = threading.Lock()


def default_device() -> Device:
    """The process-wide device (created on first use, destroyed at exit)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Device()
            atexit.register(_close_default)
        return _default


def _close_default() -> None:
    global _default
    if _default is not None and not _default.closed:
        _default.close(check=False)
    _default = None


DEFAULT_COMPUTE_UNITS = 16
"""Compute units assumed for a GPU that reports none (no VK_NV_shader_sm_builtins or
VK_AMD_shader_core_properties): a mid-sized GPU; too few only makes gemm split K less often."""


def _compute_units(physical, exts: set, device_type: int) -> int:
    """SMs (NVIDIA), compute units (AMD), CPU threads (a CPU device such as lavapipe), else
    DEFAULT_COMPUTE_UNITS."""
    if "VK_NV_shader_sm_builtins" in exts:
        sm = vk.VkPhysicalDeviceShaderSMBuiltinsPropertiesNV()
        vk.vkGetPhysicalDeviceProperties2(physical, vk.VkPhysicalDeviceProperties2(pNext=sm))
        if sm.shaderSMCount > 0:
            return int(sm.shaderSMCount)
    if "VK_AMD_shader_core_properties" in exts:
        amd = vk.VkPhysicalDeviceShaderCorePropertiesAMD()
        vk.vkGetPhysicalDeviceProperties2(physical, vk.VkPhysicalDeviceProperties2(pNext=amd))
        units = amd.shaderEngineCount * amd.shaderArraysPerEngineCount * amd.computeUnitsPerShaderArray
        if units > 0:
            return int(units)
    if device_type == vk.VK_PHYSICAL_DEVICE_TYPE_CPU:
        return os.cpu_count() or 1
    return DEFAULT_COMPUTE_UNITS
