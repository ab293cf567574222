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
from vkx.format.pte import VulkanDelegate
from vkx.loader.errors import BadProgramError, FileError, LoadError, as_load_error
from vkx.loader.named_data import FreeableBuffer
from vkx.loader.plan import PlanProgram, load_plan, runs_as_one_delegate
from vkx.loader.program import load_source
from vkx.loader.runner import Program
from vkx.loader.trace import Timeline


class FileConstants:
    """The constant source of a program file: constant_id -> FreeableBuffer."""

    def __init__(self, pf: ProgramFile, externals: list[ExternalData], delegate: VulkanDelegate | None = None):
        self.pf, self.externals = pf, externals
        self.delegate = delegate or pf.vulkan
        self.ranges: list[FileRange] = resolve_constants(pf, externals, self.delegate)
        self._files = {f.path: f for f in [pf, *externals]}
        self.legacy_used = False

    def get(self, cid: int) -> FreeableBuffer:
        try:
            r = self.ranges[cid]
        except IndexError:
            raise BadProgramError(f"constant {cid} does not exist ({len(self.ranges)} constants)") from None
        f = self._files[r.path]
        if not self.delegate.graph.constants[cid].is_named:
            self.legacy_used = True
            return FreeableBuffer.borrowed(f, r.offset, r.size)
        return FreeableBuffer(f, r.offset, r.size)

    def finish_prepack(self) -> None:
        """Prepacking is over: release the legacy blob and unmap every file."""
        if self.legacy_used:
            self.pf.release(self.delegate.blob)
        self.close()

    def close(self) -> None:
        self._files = {}
        for f in [self.pf, *self.externals]:
            f.close()
        self.externals = []


def load(path, external_data: Sequence = (), schedule: str = "lazy", device=None, upload: str = "auto",
         **options) -> Program | PlanProgram:
    """Load the .pte at `path` and return a callable `Program` (a `PlanProgram` when its plan is
    more than one delegate call: vkx.loader.plan).

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
    if not runs_as_one_delegate(pf.program.execution_plan[0]):
        source.close()  # each delegate of the plan opens the files for its own constants
        return load_plan(path, external_data, schedule, device, upload, **options)
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
