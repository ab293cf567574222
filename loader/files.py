"""`load(path)`: a .pte (and its .ptd / .safetensors external data) onto the device.

Constants are freeable buffers over the files' own mmaps (external files are
searched first, then the .pte's named data, as `resolve_constants` does).
Legacy-layout constants are views into the delegate blob: the blob's pages
are released only when prepacking ends. Every file is closed once prepacking
is over, so no file page stays mapped for the program's lifetime.
"""
from __future__ import annotations

import os
from typing import Sequence

from vkx.format import ExternalData, FileRange, FormatError, ProgramFile, resolve_constants
from vkx.loader.errors import BadProgramError, FileError, LoadError, as_load_error
from vkx.loader.named_data import FreeableBuffer, MappedFile
from vkx.loader.program import load_source
from vkx.loader.runner import Program
from vkx.loader.trace import Timeline


class FileConstants:
    """The constant source of a program file: constant_id -> FreeableBuffer."""

    def __init__(self, pf: ProgramFile, externals: list[ExternalData]):
        self.pf, self.externals = pf, externals
        self.ranges: list[FileRange] = resolve_constants(pf, externals)
        v = pf.vulkan
        self.blob = v.blob
        self._maps = {f.path: MappedFile.wrap(f.path, f.buf) for f in [pf, *externals]}
        self.legacy_bytes = 0

    def _is_legacy(self, cid: int, r: FileRange) -> bool:
        ref = self.pf.vulkan.graph.constants[cid]
        return not ref.is_named

    def get(self, cid: int) -> FreeableBuffer:
        try:
            r = self.ranges[cid]
        except IndexError:
            raise BadProgramError(f"constant {cid} does not exist ({len(self.ranges)} constants)") from None
        m = self._maps[r.path]
        if self._is_legacy(cid, r):
            self.legacy_bytes += r.size
            return FreeableBuffer.borrowed(m, r.offset, r.size)
        return FreeableBuffer(m, r.offset, r.size)

    def finish_prepack(self) -> None:
        """Prepacking is over: release the legacy blob and unmap every file."""
        if self.legacy_bytes:
            self._maps[self.blob.path].drop(self.blob.offset, self.blob.size)
        self.close()

    def close(self) -> None:
        for m in self._maps.values():
            m.close()
        self._maps = {}
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
        pf = ProgramFile.open(path)
        opened.append(pf)
        for p in external_data:
            opened.append(ExternalData.open(p))
        if pf.vulkan is None:
            raise BadProgramError(f"{os.fspath(path)}: no VulkanBackend delegate")
        graph = pf.vulkan.graph
        source = FileConstants(pf, opened[1:])
    except FormatError as error:
        _close(opened)
        if own:
            device.close()
        raise as_load_error(error) from error
    except OSError as error:
        _close(opened)
        if own:
            device.close()
        raise FileError(f"{error.filename or path}: {error.strerror or error}") from error
    except BaseException:
        _close(opened)
        if own:
            device.close()
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
