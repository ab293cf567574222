"""Compute shaders: SPIR-V by variant, and compute pipelines.

The SPIR-V of a variant (a shader and its defines) comes from the archive built with the package
(vkx.loader.gpu.spirv; `make shaders` in a checkout): the installed runtime runs no compiler. Shaders
in development folders (VKX_SHADER_PATH, `add_shader_dir`) are compiled with glslc instead, cached
by content hash under $XDG_CACHE_HOME/vkx/spirv (or ~/.cache/vkx/spirv), and so is a checkout's
shader before `make shaders`, which stderr says once (docs/architecture.md, "Shader variants").
Pipelines are created once per process per device and cached on it; the driver's
compiled code is kept between processes by vkx.loader.gpu.pipeline_cache, and creating
pipelines that are not in it is announced on stderr (it happens at load, once).

Layout convention: set 0, binding i = the i-th binding of the dispatch, all
storage buffers; one push-constant range of up to 128 bytes, compute stage.
"""
from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Mapping, Sequence, Union

import vulkan as vk

from vkx.loader.gpu import pipeline_cache, spirv
from vkx.loader.gpu.device import Device, ffi, lib
from vkx.loader.errors import ShaderError, VariantNotBuiltError
from vkx.loader.gpu.limits import check_pipeline

PUSH_BYTES = 128
_lock = threading.Lock()


def cache_dir() -> Path:
    return pipeline_cache.cache_root() / "spirv"


_extra_dirs: list[Path] = []


def add_shader_dir(path) -> None:
    """Search `path` before the packaged shaders (tests register throwaway shaders)."""
    p = Path(path)
    if p not in _extra_dirs:
        _extra_dirs.insert(0, p)


def development_dirs() -> list[Path]:
    """Folders whose shaders are compiled at run time: VKX_SHADER_PATH's, then add_shader_dir's."""
    env = [Path(d) for d in os.environ.get("VKX_SHADER_PATH", "").split(os.pathsep) if d]
    return [*env, *_extra_dirs]


def packaged_dir() -> Path:
    return Path(str(importlib.resources.files("vkx.shaders")))


class Prebuilt:
    """The package's SPIR-V archive, opened once."""

    def __init__(self, path: Path):
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        self.sources: dict[str, str] = {}
        self._checked: set[str] = set()

    def _open(self) -> zipfile.ZipFile | None:
        if self._zip is None and self.path.is_file():
            self._zip = zipfile.ZipFile(self.path)
            self.sources = json.loads(self._zip.read(spirv.SOURCES))
        return self._zip

    def holds(self, shader: str) -> bool:
        """Whether the archive was built with `shader`'s variants."""
        return self._open() is not None and shader in self.sources

    def get(self, shader: str, defines: spirv.Defines) -> bytes:
        archive = self._open()
        if shader not in self._checked:  # a checkout whose shader changed since `make shaders`
            root = self.path.parent
            if (root / f"{shader}.comp").is_file() and spirv.source_digest(root, shader) != self.sources[shader]:
                raise ShaderError(f"{self.path} was built from another {shader}.comp: run `make shaders` "
                                  f"(or set VKX_SHADER_PATH={root} to compile at run time)")
            self._checked.add(shader)
        try:
            return archive.read(spirv.entry_name(shader, defines))
        except KeyError:
            variant = spirv.variant_text(defines).replace("\n", " ") or "no defines"
            why = ("the archive lacks a declared variant: the install is incomplete (reinstall vkx, or "
                   "`make shaders` in a checkout)") if spirv.is_declared(shader, defines) else \
                "its builder requests a variant it does not declare (docs/architecture.md, 'Shader variants')"
            raise VariantNotBuiltError(f"shader {shader}: variant not prebuilt ({variant}): {why}") from None


_prebuilt = Prebuilt(packaged_dir() / spirv.ARCHIVE)
_glslc_version: str | None = None


def glslc_version() -> str | None:
    """glslc's version text, or None when glslc cannot be run (then only cached SPIR-V works)."""
    global _glslc_version
    if _glslc_version is None:
        try:
            out = subprocess.run(["glslc", "--version"], capture_output=True, text=True, check=True)
            _glslc_version = out.stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            _glslc_version = ""
    return _glslc_version or None


def compile_spirv(name: str, defines: Mapping[str, Union[str, int]] | None = None) -> bytes:
    """SPIR-V words of the variant (shader `name`, `defines`): compiled from a development folder,
    else prebuilt; a checkout with no archive yet compiles the package's sources. Outside the
    archive only declared variants of a declared shader are compiled: what the package would
    refuse is refused here too."""
    defines = dict(defines or {})
    if _prebuilt.holds(name) and not any((root / f"{name}.comp").is_file() for root in development_dirs()):
        return _prebuilt.get(name, defines)
    development = next((r for r in development_dirs() if (r / f"{name}.comp").is_file()), None)
    root = development or packaged_dir()
    if not (root / f"{name}.comp").is_file():
        raise ShaderError(f"shader {name!r} not found (no shaders/{name}.comp)")
    if not spirv.is_declared(name, defines):
        variant = spirv.variant_text(defines).replace("\n", " ") or "no defines"
        raise VariantNotBuiltError(f"shader {name}: variant not declared ({variant}); its builder must "
                                   "declare it (docs/architecture.md, 'Shader variants')")
    return _compiled(root, name, defines, packaged=development is None)


_said_no_archive = False


def _no_archive(name: str) -> str:
    """Why the package's own shader is compiled here: a checkout before `make shaders`."""
    if _prebuilt.path.is_file():
        return f"{_prebuilt.path} has no {name}.comp (built before it was added)"
    return f"no shader archive ({_prebuilt.path})"


def _compiled(root: Path, name: str, defines: spirv.Defines, packaged: bool) -> bytes:
    """glslc's SPIR-V of root/<name>.comp, from the cache when possible; `packaged`: a shader of the
    package, which its archive did not give."""
    text = spirv.variant_text(defines)
    key = hashlib.sha256(f"{spirv.source_digest(root, name)}\n{text}".encode()).hexdigest()
    version = glslc_version()
    if version is None:  # no compiler here: SPIR-V built elsewhere from the same source will do
        for cached in sorted(cache_dir().glob(f"{name}-{key[:32]}-*.spv")):
            return cached.read_bytes()
        if packaged:
            raise ShaderError(f"{_no_archive(name)} and no glslc: `make shaders` builds it")
        raise ShaderError(f"glslc is not available and no cached SPIR-V for {name}.comp "
                          f"{text.replace(chr(10), ' ')} in {cache_dir()}")
    cached = cache_dir() / f"{name}-{key[:32]}-{hashlib.sha256(version.encode()).hexdigest()[:8]}.spv"
    try:
        return cached.read_bytes()
    except OSError:
        pass
    global _said_no_archive
    if packaged and not _said_no_archive:  # once: it makes this load slower, not wrong
        _said_no_archive = True
        print(f"vkx: {_no_archive(name)}: glslc compiles the shaders at load, once each "
              "(`make shaders` builds the archive)", file=sys.stderr)
    code = spirv.glslc(root / f"{name}.comp", defines)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cached.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(code)
        os.replace(tmp, cached)
    except OSError:
        pass  # a read-only cache is not an error
    return code


class Pipeline:
    __slots__ = ("handle", "layout", "set_layout", "name")

    def __init__(self, handle, layout, set_layout, name):
        self.handle, self.layout, self.set_layout, self.name = handle, layout, set_layout, name


Request = tuple[str, Mapping[str, Union[str, int]], int, Sequence[int]]
"""(shader name, defines, number of bindings, specialization constants) of one pipeline."""


class Pipelines:
    """Per-device cache of descriptor-set layouts, pipeline layouts and pipelines, over the
    device's on-disk VkPipelineCache."""

    def __init__(self, device: Device):
        self.device = device
        self.push_bytes = min(PUSH_BYTES, device.limits.max_push_constants_size)
        self._layouts: dict[int, tuple] = {}
        self._pipelines: dict[tuple, Pipeline] = {}
        self._identity = pipeline_cache.Identity.of(device.physical)
        kept = pipeline_cache.read(self._identity)
        self._kept: frozenset[bytes] = kept[0] if kept else frozenset()
        self._compiled: set[bytes] = set()
        """Keys of the pipelines this process created that the kept cache did not hold."""
        initial = ffi.from_buffer(kept[1]) if kept else None
        info = vk.VkPipelineCacheCreateInfo(initialDataSize=len(kept[1]) if kept else 0,
                                            pInitialData=initial if kept else ffi.NULL)
        self._cache = vk.vkCreatePipelineCache(device.device, info, None)
        device.on_close(self.close)

    def _layout(self, nbindings: int):
        got = self._layouts.get(nbindings)
        if got is None:
            d = self.device.device
            bindings = [vk.VkDescriptorSetLayoutBinding(
                binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=1,
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT) for i in range(nbindings)]
            dsl = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(pBindings=bindings), None)
            rng = vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=self.push_bytes)
            layout = vk.vkCreatePipelineLayout(d, vk.VkPipelineLayoutCreateInfo(
                pSetLayouts=[dsl], pPushConstantRanges=[rng]), None)
            got = self._layouts[nbindings] = (dsl, layout)
        return got

    def get_all(self, requests: Sequence[Request]) -> list[Pipeline]:
        """The pipelines of `requests`, in order; says on stderr how many the driver compiles."""
        before = len(self._compiled)
        got = [self.get(*r) for r in requests]
        compiled = len(self._compiled) - before
        if compiled:
            print(f"vkx: compiled {compiled} compute pipeline{'s' * (compiled != 1)} for {self.device.name} "
                  f"({pipeline_cache.held(self._identity, self._cache_data())})", file=sys.stderr)
        return got

    def get(self, name: str, defines: Mapping[str, Union[str, int]] | None, nbindings: int,
            spec: Sequence[int] = ()) -> Pipeline:
        spec = tuple(int(x) for x in spec)
        key = (name, tuple(sorted((k, str(v)) for k, v in (defines or {}).items())), nbindings, spec)
        p = self._pipelines.get(key)
        if p is not None:
            return p
        with _lock:
            p = self._pipelines.get(key)
            if p is not None:
                return p
            code = compile_spirv(name, defines)
            check_pipeline(self.device.limits, name, code, nbindings, self.push_bytes, spec)
            d = self.device.device
            dsl, layout = self._layout(nbindings)
            module = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
            try:
                values = struct.pack(f"<{len(spec)}i", *spec)
                data = ffi.from_buffer(values) if spec else ffi.NULL
                specialization = vk.VkSpecializationInfo(
                    pMapEntries=[vk.VkSpecializationMapEntry(constantID=i, offset=4 * i, size=4)
                                 for i in range(len(spec))], dataSize=len(values), pData=data) if spec else None
                stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module,
                                                           pName="main", pSpecializationInfo=specialization)
                handle = vk.vkCreateComputePipelines(d, self._cache, 1, [vk.VkComputePipelineCreateInfo(
                    stage=stage, layout=layout)], None)[0]
            except vk.VkError as error:
                raise ShaderError(f"pipeline creation failed for {name}: {type(error).__name__}") from error
            finally:
                vk.vkDestroyShaderModule(d, module, None)
            cached = pipeline_cache.pipeline_key(code, nbindings, self.push_bytes, spec)
            if cached not in self._kept:
                self._compiled.add(cached)
            p = self._pipelines[key] = Pipeline(handle, layout, dsl, name)
            return p

    def _cache_data(self) -> bytes:
        size = ffi.new("size_t *")
        d = self.device.device
        if lib.vkGetPipelineCacheData(d, self._cache, size, ffi.NULL) != vk.VK_SUCCESS:
            return b""
        data = ffi.new("char[]", size[0])
        if lib.vkGetPipelineCacheData(d, self._cache, size, data) != vk.VK_SUCCESS:
            return b""
        return bytes(ffi.buffer(data, size[0]))

    def close(self) -> None:
        d = self.device.device
        if self._compiled:  # something new to keep
            data = self._cache_data()
            if data:
                pipeline_cache.write(self._identity, self._kept | self._compiled, data)
            self._kept, self._compiled = self._kept | self._compiled, set()
        if self._cache is not None:
            vk.vkDestroyPipelineCache(d, self._cache, None)
            self._cache = None
        for p in self._pipelines.values():
            vk.vkDestroyPipeline(d, p.handle, None)
        self._pipelines.clear()
        for dsl, layout in self._layouts.values():
            vk.vkDestroyPipelineLayout(d, layout, None)
            vk.vkDestroyDescriptorSetLayout(d, dsl, None)
        self._layouts.clear()


def pipelines_for(device: Device) -> Pipelines:
    cache = getattr(device, "_pipelines", None)
    if cache is None:
        cache = device._pipelines = Pipelines(device)
    return cache
