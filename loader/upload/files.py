"""`load(path)`: a .pte (and its .ptd / .safetensors external data) onto the device.

Constants are freeable buffers over byte ranges of the files (external files
are searched first, then the .pte's named data, as `resolve_constants` does),
read with pread into their destination. When prepacking ends, every file is
checked to be as it was when opened (size and mtime: a file rewritten meanwhile
is a `BadFileError`) and closed.

The one mapping: a weight offered to the device for import (`in_place`, only with
upload="import") is a range of a MAP_PRIVATE mapping of its file, never written, so
its pages stay clean page cache. Such a file stays open and mapped until the program
closes, and every call first checks it unchanged (`check_mapped`: a typed error, not
the SIGBUS a shrunk file's page gives the driver); a change during a call is not
seen in time (docs/safety.md, "Upload paths").

With no external data given, a .pte that records its external files (weights by
reference, docs/format.md "Program metadata") gets those; one whose named constants
are not all inside it gets the same-stem .ptd / .safetensors beside it (beside a
symlink's target), with a warning that says so. An external file vkx wrote is taken
only with the .pte written with it: both record one data digest (docs/format.md,
"Pair identity"; checked by `resolve_constants`, nothing is hashed at load).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import warnings
from typing import Callable, Sequence

from vkx.format import ExternalData, FileRange, FormatError, ProgramFile, resolve_constants
from vkx.format.common import align
from vkx.format.contract import ContractError
from vkx.format.et_llm import llm_info, static_graph
from vkx.format.external import find_external, missing_keys
from vkx.format.methods import is_method, methods as methods_of
from vkx.format.names import io_names
from vkx.format.pte import VulkanDelegate
from vkx.format.validate import check_delegate_args
from vkx.loader.errors import (BadFileError, BadProgramError, FileError, InputError, LoadError, MissingDataError,
                               as_load_error)
from vkx.loader.upload.named_data import FreeableBuffer
from vkx.loader.execute.plan import PLAN, load_plan
from vkx.loader.program import Program
from vkx.loader.upload.loading import device_of, load_methods
from vkx.loader.upload.trace import Timeline


class FileConstants:
    """The constant source of a program file: constant_id -> FreeableBuffer.

    With several delegates (one per method) their constant_ids follow one another:
    delegate i's start at `bases[i]`.
    """

    def __init__(self, pf: ProgramFile, externals: list[ExternalData], delegate: VulkanDelegate | None = None,
                 delegates: Sequence[VulkanDelegate] = ()):
        self.pf, self.externals = pf, externals
        delegates = list(delegates) or [delegate or pf.vulkan]
        self.delegate = delegates[0]
        self.ranges: list[FileRange] = []
        self.named: list[bool] = []
        self.bases: list[int] = []
        for d in delegates:
            self.bases.append(len(self.ranges))
            self.ranges += resolve_constants(pf, externals, d)
            self.named += [c.is_named for c in d.graph.constants]
        self._files = {f.path: f for f in [pf, *externals]}
        self._maps: dict[str, tuple[mmap.mmap, ctypes.Array]] = {}
        """path -> a private mapping of that file and the pin that keeps its address (imports only)."""

    def get(self, cid: int) -> FreeableBuffer:
        try:
            r = self.ranges[cid]
        except IndexError:
            raise BadProgramError(f"constant {cid} does not exist ({len(self.ranges)} constants)") from None
        return FreeableBuffer(self._files[r.path], r.offset, r.size)

    def key(self, cid: int) -> FileRange:
        """Where constant `cid`'s bytes are: constants with one range share one device tensor."""
        return self.ranges[cid]

    def in_place(self, cid: int) -> tuple[int, int, int] | str:
        """(address, size, end of the mapping) of the constant's file bytes, for a device
        to import and use as they are, or the reason they cannot be. A file asked for an
        address stays mapped until `close()`."""
        r = self.ranges[cid]
        if not self.named[cid]:
            return f"constant {cid} is in the legacy delegate blob, which is released after prepacking"
        if r.path not in self._maps:
            f = self._files[r.path]
            # MAP_PRIVATE (ACCESS_COPY), never written: drivers import it (NVIDIA refuses a shared
            # read-only one) and its pages stay the file's. The ctypes view pins the mapping.
            try:
                f.check_unchanged()  # a file shorter than at open would be mapped past its end
                mapping = mmap.mmap(f.fd, f.size, access=mmap.ACCESS_COPY)
            except FormatError as error:
                raise as_load_error(error) from None
            except ValueError:  # it shrank between the check and the mmap
                raise BadFileError("file", f"shrank below the {f.size} bytes it had when opened, while being "
                                   "mapped", f.path) from None
            self._maps[r.path] = (mapping, (ctypes.c_char * f.size).from_buffer(mapping))
        mapping, pin = self._maps[r.path]
        base = ctypes.addressof(pin)
        return base + r.offset, r.size, base + align(len(mapping), mmap.PAGESIZE)

    def finish_prepack(self) -> None:
        """Prepacking is over: check that no file changed while it was read, and close them all
        but the mapped ones (imported weights), which stay until `close()`."""
        try:
            for f in self._files.values():
                f.check_unchanged()
        except FormatError as error:
            raise as_load_error(error) from error
        finally:
            self._close_files(keep=set(self._maps))

    def check_mapped(self) -> None:
        """Before each call: BadFileError if a file whose pages are weights changed since it was opened."""
        try:
            for path in self._maps:
                self._files[path].check_unchanged()
        except FormatError as error:
            raise as_load_error(error) from None

    def _close_files(self, keep: set[str] = frozenset()) -> None:
        for f in [self.pf, *self.externals]:
            if f.path not in keep:
                f.close()

    def close(self) -> None:
        """Close the files and unmap what imported weights used (their device memory is gone by now)."""
        self._close_files()
        self._files = {}
        self.externals = []
        while self._maps:
            _, (mapping, pin) = self._maps.popitem()
            del pin  # the pin is an export of the mapping: it must go before the unmap
            mapping.close()


def load(path, external_data: Sequence = (), schedule: str = "lazy", device=None, upload: str = "auto",
         progress: Callable[[int, int], None] | None = None, trace_memory: bool = False,
         sequence_length: int | None = None, methods: Sequence[str] | None = None, **options) -> Program:
    """Load the .pte at `path` and return its `Program`: called as its one method, or, for a
    file of several plans (each one Vulkan delegate call), by method: `program.decode(...)`,
    docs/format.md, "Methods". A plan that is not one delegate call (several, CPU ops, or no
    delegate: every op on the CPU) is a `PlanMethod` (vkx.loader.execute.plan).

    `external_data`: .ptd / .safetensors files searched (in order) before the
    .pte's own named data; none given: the files the .pte records, else, when it
    needs some, its same-stem file beside it (a warning says so). `schedule`: "lazy"
    (default) or "eager" (the old order, for comparison). `upload`: "auto" (by the device's
    memory types: docs/architecture.md, "Upload paths"), "staging", "direct" or "import".
    `progress(done_bytes, total_bytes)` is called after each weight's upload.
    `sequence_length`: the tokens a program with a dynamic sequence length (ExecuTorch's LLM
    recipe, vkx.format.et_llm) is built for (None: its bound); other programs ignore it.
    `methods`: the methods of a file of several to load (None: all); the others cost nothing
    (an LM's `score` method plans a whole window's activations, which generation never needs).
    `trace_memory`: reset the process's VmHWM at each phase so that
    `Program.memory["phases"]` has the RSS peak of each (only then is the
    process-wide counter touched).
    Options: staging_chunks, staging_chunk_bytes (the ring's most per chunk: it
    holds W / 100 in all), memory_budget (bytes).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise FileError(f"vkx.load takes the path of a .pte file, not {type(path).__name__}")
    device, own = device_of(device)  # the device exists before the baseline is taken
    timeline = Timeline(trace=trace_memory)
    timeline.mark("before load")
    if isinstance(external_data, (str, os.PathLike)):
        external_data = [external_data]
    opened = []
    try:
        pf = ProgramFile.open(path)
        opened.append(pf)
        found = ", ".join(d.id for plan in pf.program.execution_plan for d in plan.delegates)
        if pf.vulkan is None and found:
            raise BadProgramError(f"{os.fspath(path)}: no VulkanBackend delegate (found {found}): vkx runs "
                                  "VulkanBackend delegates and CPU ops")
        external_data, beside = find_external(pf, external_data)
        if beside is not None:
            warnings.warn(f"using external data {beside} (found beside {os.fspath(path)})", stacklevel=2)
        missing = [] if external_data else missing_keys(pf)
        if missing:
            raise MissingDataError("named_data", f"its constants are in external data ({len(missing)} "
                                   "named key(s) not in the file, none beside it): pass external_data=FILE", pf.path)
        for p in external_data:
            opened.append(ExternalData.open(p))
        delegates = methods_of(pf)
        names = [plan.name for plan in pf.program.execution_plan]
        unknown = [name for name in methods or () if name not in names]
        if unknown:
            raise InputError(f"{os.fspath(path)}: no method {', '.join(unknown)} (it has {', '.join(names)})")
        by_plan = delegates is None and not is_method(pf.program.execution_plan[0])
        if not by_plan:
            for pi, v in enumerate(delegates or [pf.vulkan]):  # the plan's tensors are what a call gives back
                called = pf.program.execution_plan[pi]
                check_delegate_args(called.values, called.inputs + called.outputs, v.graph,
                                    f"execution_plan[{pi}].chains[0].instructions[0].args", pf.path)
            try:
                graph = static_graph(pf.vulkan.graph, sequence_length)
            except ContractError as error:
                raise BadProgramError(f"{os.fspath(path)}: {error}") from None
            names = io_names(pf.vulkan.compile_specs, len(graph.input_ids), len(graph.output_ids),
                             "execution_plan[0].delegates[0]", pf.path)
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
    if by_plan:  # no delegate, several, or CPU ops: each delegate opens the files for its own constants
        _close(opened)
        plan = load_plan(path, lambda di: _delegate_constants(path, external_data, di), schedule, device, upload,
                         timeline=timeline, progress=progress, **options)
        return Program({plan.name: plan})
    if delegates is not None:
        return _load_methods(pf, delegates, source.externals, schedule, device, upload, methods, timeline=timeline,
                             progress=progress, **options)
    name = pf.program.execution_plan[0].name
    methods = load_methods({name: graph}, source, [0], schedule, device, upload, timeline=timeline,
                           progress=progress, **options)
    methods[name].name_io(*names)
    llm = llm_info(pf.program)
    return Program(methods, llm.eos_token_ids if llm else pf.metadata.eos_token_ids, llm)


def _load_methods(pf: ProgramFile, delegates: list[VulkanDelegate], externals: list[ExternalData],
                  schedule, device, upload, wanted: Sequence[str] | None, **options) -> Program:
    """Every plan a method (those `wanted`, None: all): one load, the weights shared (docs/format.md, "Methods")."""
    names = [plan.name for plan in pf.program.execution_plan]
    methods = FileConstants(pf, externals, delegates=delegates)
    if len(set(names)) != len(names):
        methods.close()
        raise BadProgramError(f"{pf.path}: two execution plans share a name ({', '.join(names)})")
    chosen = [i for i, name in enumerate(names) if wanted is None or name in wanted]
    loaded = load_methods({names[i]: delegates[i].graph for i in chosen}, methods, [methods.bases[i] for i in chosen],
                          schedule, device, upload, **options)
    for i in chosen:
        name, d = names[i], delegates[i]
        loaded[name].name_io(*io_names(d.compile_specs, len(d.graph.input_ids), len(d.graph.output_ids),
                                       f"execution_plan[{i}].delegates[0]", pf.path))
    return Program(loaded, pf.metadata.eos_token_ids)


def _delegate_constants(path, external_data: Sequence, di: int) -> FileConstants:
    """The constants of delegate `di` of the plan, from files opened for it alone (closed after its prepack)."""
    opened: list = []
    try:
        pf = ProgramFile.open(path)
        opened.append(pf)
        for p in external_data:
            opened.append(ExternalData.open(p))
        return FileConstants(pf, opened[1:], pf.vulkan_delegate(PLAN, di))
    except BaseException:
        _close(opened)
        raise


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
