"""Reading .pte files: extended header, Program, segments, named data, the Vulkan delegate."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from . import vkgraph as vk
from .common import FileRange
from .errors import BadMagicError, DuplicateKeyError, InvalidValueError, OutOfBoundsError, TruncatedError
from .flatbuf import Reader
from .headers import DELEGATE, EXTENDED, DelegateHeader, ExtendedHeader, read_delegate, read_extended
from .infile import InputFile
from .metadata import ProgramMetadata, read_metadata
from .program import INLINE, PROGRAM_IDENTIFIER, DecodedProgram, TensorMeta, decode_program
from .vkgraph_decode import decode_vkgraph

VULKAN_BACKEND = "VulkanBackend"


@dataclass(frozen=True)
class VulkanDelegate:
    """One VulkanBackend delegate: its blob, VH00 header and decoded VkGraph."""
    graph: vk.VkGraph
    blob: FileRange
    legacy_section: FileRange
    """The blob's constant-bytes section (legacy constants live here)."""
    header: DelegateHeader
    plan_index: int
    delegate_index: int
    compile_specs: tuple[tuple[str, bytes], ...]


class ProgramFile(InputFile):
    """A .pte opened lazily: its metadata is read and decoded, segment bytes are not read."""

    header: ExtendedHeader | None
    program: DecodedProgram
    segments: list[FileRange]
    named_data: dict[str, FileRange]

    def _load(self) -> None:
        path = self.path
        self.header = h = read_extended(self.read(0, min(self.size, EXTENDED.end)), self.size, path)
        program_size = self.size if h is None else h.program_size
        if program_size > self.size or program_size < 8:
            raise TruncatedError("header.program_size", f"{program_size} but the file has {self.size} bytes: "
                                 "the file is truncated", path)
        identifier = bytes(self.read(4, 4))  # parse_extended_header refused a file under 8 bytes
        if identifier != PROGRAM_IDENTIFIER:
            raise BadMagicError("program", f"not an ExecuTorch program (file identifier {identifier!r}, "
                                f"expected {PROGRAM_IDENTIFIER!r})", path)
        # the program flatbuffer (all of a file without extended header) in private memory
        self._program_reader = Reader(self.read(0, program_size), 0, program_size, path)
        self.program = p = decode_program(self._program_reader)
        sbo = 0 if h is None else h.segment_base_offset
        segs = p.segments or ()
        if sbo == 0 and any(s.size for s in segs):  # empty segments need no base: ExecuTorch lists an
            # empty constant segment in a program with no delegate and no constant data
            raise InvalidValueError("segments", f"{len(segs)} segments but segment_base_offset is 0", path)
        self.segments = []
        for i, s in enumerate(segs):
            if sbo + s.offset + s.size > self.size:
                raise OutOfBoundsError(f"segments[{i}]", f"[{s.offset}, +{s.size}) after base {sbo} runs past the end of "
                                       f"the file ({self.size} bytes): the file is truncated", path)
            self.segments.append(FileRange(path, sbo + s.offset, s.size))
        self.named_data = {}
        if p.named_data is not None and p.segments is None:
            raise InvalidValueError("named_data", "present without segments", path)
        for i, nd in enumerate(p.named_data or ()):
            if nd.segment_index >= len(self.segments):
                raise OutOfBoundsError(f"named_data[{i}].segment_index", f"segment index {nd.segment_index} out of range ({len(self.segments)} segments)", path)
            if nd.key in self.named_data:
                raise DuplicateKeyError(f"named_data[{i}].key", f"key {nd.key!r} appears twice", path)
            self.named_data[nd.key] = self.segments[nd.segment_index]
        for pi, plan in enumerate(p.execution_plan):
            for di in range(len(plan.delegates)):
                self.delegate_blob(pi, di)

    def delegate_blob(self, plan: int, delegate: int) -> FileRange:
        """The processed bytes of execution_plan[plan].delegates[delegate]."""
        d = self.program.execution_plan[plan].delegates[delegate]
        where = f"execution_plan[{plan}].delegates[{delegate}].processed"
        if d.location == INLINE:
            if d.index >= len(self.program.inline_data):
                raise OutOfBoundsError(where, f"inline data index {d.index} out of range ({len(self.program.inline_data)} entries)", self.path)
            pos, size = self.program.inline_data[d.index]
            return FileRange(self.path, pos, size)
        if d.index >= len(self.segments):
            raise OutOfBoundsError(where, f"segment index {d.index} out of range ({len(self.segments)} segments)", self.path)
        return self.segments[d.index]

    @cached_property
    def vulkan_delegates(self) -> tuple[VulkanDelegate, ...]:
        """Every VulkanBackend delegate of every plan, in plan then delegate order, decoded on first access."""
        return tuple(self.vulkan_delegate(pi, di) for pi, plan in enumerate(self.program.execution_plan)
                     for di, d in enumerate(plan.delegates) if d.id == VULKAN_BACKEND)

    @cached_property
    def metadata(self) -> ProgramMetadata:
        """What the first VulkanBackend delegate records about the program (vkx.format.metadata)."""
        for pi, plan in enumerate(self.program.execution_plan):
            for di, d in enumerate(plan.delegates):
                if d.id == VULKAN_BACKEND:
                    return read_metadata(d.compile_specs, f"execution_plan[{pi}].delegates[{di}]", self.path)
        return ProgramMetadata()

    @property
    def vulkan(self) -> VulkanDelegate | None:
        """The first VulkanBackend delegate."""
        return self.vulkan_delegates[0] if self.vulkan_delegates else None

    def constant_range(self, t: TensorMeta, where: str) -> FileRange:
        """The bytes of a plan constant tensor (`data_buffer_idx` > 0) in the constant segment."""
        cs = self.program.constant_segment
        if cs is None or not 0 < t.data_buffer_idx < len(cs[1]) or cs[0] >= len(self.segments):
            raise OutOfBoundsError(f"{where}.data_buffer_idx", f"constant {t.data_buffer_idx} is not in the constant segment", self.path)
        seg = self.segments[cs[0]]
        offset = cs[1][t.data_buffer_idx]
        if offset + t.nbytes > seg.size:
            raise OutOfBoundsError(f"{where}.data_buffer_idx", f"constant [{offset}, +{t.nbytes}) past the constant segment ({seg.size} bytes)", self.path)
        return FileRange(self.path, seg.offset + offset, t.nbytes)

    def vulkan_delegate(self, pi: int, di: int) -> VulkanDelegate:
        """execution_plan[pi].delegates[di], decoded as a VulkanBackend delegate."""
        blob = self.delegate_blob(pi, di)
        where = f"execution_plan[{pi}].delegates[{di}].processed"
        with self.metadata_reads():
            h = read_delegate(self.read(blob.offset, min(blob.size, DELEGATE.end)), blob.size, where, self.path)
            graph = decode_vkgraph(Reader(self.read(blob.offset + h.flatbuffer_offset, h.flatbuffer_size), 0,
                                          h.flatbuffer_size, self.path))
        section = h.bytes_size if h.bytes_size else blob.size - h.bytes_offset
        return VulkanDelegate(
            graph=graph, blob=blob, legacy_section=FileRange(self.path, blob.offset + h.bytes_offset, section), header=h,
            plan_index=pi, delegate_index=di,
            compile_specs=self.program.execution_plan[pi].delegates[di].compile_specs,
        )
