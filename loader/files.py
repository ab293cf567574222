"""`load(path)`: a .pte (and its .ptd / .safetensors external data) onto the device.

Constants are freeable buffers over the files' own mmaps (external files are
searched first, then the .pte's named data, as `resolve_constants` does).
Legacy-layout constants are views into the delegate blob: the blob's pages
are released only when prepacking ends. A file is closed once prepacking is
over unless a weight of it was offered for import (`in_place`): such a file
stays mapped, MAP_PRIVATE and never written, until the program closes, after
its device memory is freed (also when the device refused every import of it:
address space only, its copied weights' pages are released as usual).
"""
from __future__ import annotations

import mmap
import os
from typing import Sequence

from vkx.format import ExternalData, FileRange, FormatError, ProgramFile, resolve_constants
from vkx.format.common import align
from vkx.loader.errors import BadProgramError, FileError, LoadError, as_load_error
from vkx.loader.named_data import FreeableBuffer
from vkx.loader.program import Options, imports, load_source
from vkx.loader.runner import Program
from vkx.loader.trace import Timeline


class FileConstants:
    """The constant source of a program file: constant_id -> FreeableBuffer."""

    def __init__(self, pf: ProgramFile, externals: list[ExternalData]):
        self.pf, self.externals = pf, externals
        self.ranges: list[FileRange] = resolve_constants(pf, externals)
        self._files = {f.path: f for f in [pf, *externals]}
        self.legacy_used = False
        self._in_place: set[str] = set()  # paths of files whose weights were offered for import

    def get(self, cid: int) -> FreeableBuffer:
        try:
            r = self.ranges[cid]
        except IndexError:
            raise BadProgramError(f"constant {cid} does not exist ({len(self.ranges)} constants)") from None
        f = self._files[r.path]
        if not self.pf.vulkan.graph.constants[cid].is_named:
            self.legacy_used = True
            return FreeableBuffer.borrowed(f, r.offset, r.size)
        return FreeableBuffer(f, r.offset, r.size)

    def in_place(self, cid: int) -> tuple[int, int, int] | str:
        """(address, size, end of the mapping) of the constant's file bytes, for a device
        to import and use as they are, or the reason they cannot be. A file asked for an
        address stays mapped until `close()`."""
        r = self.ranges[cid]
        f = self._files[r.path]
        if not self.pf.vulkan.graph.constants[cid].is_named:
            return f"constant {cid} is in the legacy delegate blob, which is released after prepacking"
        if not f.private:
            return f"{f.path} is mapped shared read-only, which drivers do not import"
        base = f.address
        self._in_place.add(f.path)
        return base + r.offset, r.size, base + align(f.size, mmap.PAGESIZE)

    def finish_prepack(self) -> None:
        """Prepacking is over: release the legacy blob and unmap every file no weight uses in place."""
        if self.legacy_used:
            self.pf.release(self.pf.vulkan.blob)
        for f in [self.pf, *self.externals]:
            if f.path not in self._in_place:
                f.close()

    def close(self) -> None:
        self._files = {}
        for f in [self.pf, *self.externals]:
            f.close()
        self.externals = []


def load(path, external_data: Sequence = (), schedule: str = "lazy", device=None, upload: str = "auto",
         **options) -> Program:
    """Load the Vulkan delegate of the .pte at `path` and return a callable `Program`.

    `external_data`: .ptd / .safetensors files searched (in order) before the
    .pte's own named data. `schedule`: "lazy" (default) or "eager" (the old
    order, for comparison). `upload`: "auto", "staging" or "direct".
    Options: staging_chunks, staging_chunk_bytes, memory_budget (bytes).
    """
    from vkx.loader.program import _device
    device, own = _device(device)  # the device exists before the baseline is taken
    timeline = Timeline()
    timeline.mark("before load")
    if isinstance(external_data, (str, os.PathLike)):
        external_data = [external_data]
    opened = []
    try:
        # A mapping the driver can import is a private one (MAP_SHARED read-only is refused on NVIDIA).
        private = imports(Options(schedule, upload), device)
        pf = ProgramFile.open(path, private)
        opened.append(pf)
        for p in external_data:
            opened.append(ExternalData.open(p, private))
        if pf.vulkan is None:
            raise BadProgramError(f"{os.fspath(path)}: no VulkanBackend delegate")
        graph = pf.vulkan.graph
        source = FileConstants(pf, opened[1:])
    except BaseException as error:
        _close(opened)
        if own:
            device.close()
        if isinstance(error, FormatError):
            raise as_load_error(error) from error
        if isinstance(error, OSError):
            raise FileError(f"{error.filename or path}: {error.strerror or error}") from error
        raise
    if own:
        options["on_close"] = _chain(options.get("on_close"), device.close)
    return load_source(graph, source, schedule, device, upload, timeline=timeline, **options)


def _chain(first, second):
    def both():
        try:
            if first is not None:
                first()
        finally:
            second()
    return both


def _close(files) -> None:
    for f in files:
        try:
            f.close()
        except Exception:
            pass


__all__ = ["load", "LoadError"]
