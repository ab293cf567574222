"""Reading .pte files: extended header, Program, segments, named data, the Vulkan delegate."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property

from . import vkgraph as vk
from .common import FileRange
from .errors import BadMagicError, DuplicateKeyError, InvalidValueError, OutOfBoundsError, TruncatedError
from .flatbuf import Reader
from .infile import InputFile
from .metadata import ProgramMetadata, read_metadata
from .program import INLINE, Program, TensorMeta, decode_program
from .vkgraph_decode import decode_vkgraph

VULKAN_BACKEND = "VulkanBackend"
EH_MAGIC = b"eh00"
VH_MAGIC = b"VH00"
VH_LENGTH = 30


@dataclass(frozen=True)
class ExtendedHeader:
    """The `eh00` header at file offset 8 of a .pte."""
    length: int
    program_size: int
    segment_base_offset: int
    segment_data_size: int


@dataclass(frozen=True)
class VulkanDelegate:
    """One VulkanBackend delegate: its blob, VH00 header and decoded VkGraph."""
    graph: vk.VkGraph
    blob: FileRange
    legacy_section: FileRange
    """The blob's constant-bytes section (legacy constants live here)."""
    header_length: int
    flatbuffer_offset: int
    flatbuffer_size: int
    bytes_offset: int
    bytes_size: int
    plan_index: int
    delegate_index: int
    compile_specs: tuple[tuple[str, bytes], ...]


def parse_extended_header(buf, path: str) -> ExtendedHeader | None:
    """The extended header, or None when the file has none (a plain FlatBuffer)."""
    size = len(buf)
    if size < 8:
        raise TruncatedError("header", f"{size} bytes is too short for a program", path)
    if size < 12 or bytes(buf[8:12]) != EH_MAGIC:
        return None
    if size < 40:
        raise TruncatedError("header", "extended header cut short", path)
    length, program_size, sbo = struct.unpack_from("<IQQ", buf, 12)
    if length < 24:
        raise InvalidValueError("header.length", f"{length} < 24", path)
    sds = struct.unpack_from("<Q", buf, 32)[0] if length >= 32 else 0
    return ExtendedHeader(length, program_size, sbo, sds)


def parse_vh00(buf, blob: FileRange, where: str) -> tuple[int, int, int, int, int]:
    """(header_length, flatbuffer_offset, flatbuffer_size, bytes_offset, bytes_size), all checked."""
    path = blob.path
    if blob.size < VH_LENGTH:
        raise TruncatedError(where, f"delegate blob of {blob.size} bytes is shorter than the VH00 header", path)
    if bytes(buf[blob.offset + 4:blob.offset + 8]) != VH_MAGIC:
        raise BadMagicError(where, f"blob magic {bytes(buf[blob.offset + 4:blob.offset + 8])!r}, expected b'VH00'", path)
    hlen, fbo, fbs, bo, bs = struct.unpack_from("<HIIIQ", buf, blob.offset + 8)
    if hlen < VH_LENGTH:
        raise InvalidValueError(f"{where}.header_length", f"{hlen} < {VH_LENGTH}", path)
    if fbo < hlen or fbs == 0 or fbo + fbs > blob.size:
        raise OutOfBoundsError(f"{where}.flatbuffer", f"[{fbo}, +{fbs}) not inside the blob ({blob.size} bytes) after the header", path)
    if bo < fbo + fbs or bo + bs > blob.size:
        raise OutOfBoundsError(f"{where}.bytes", f"[{bo}, +{bs}) not inside the blob ({blob.size} bytes) after the flatbuffer", path)
    return hlen, fbo, fbs, bo, bs


class ProgramFile(InputFile):
    """A .pte opened lazily: its metadata is read and decoded, segment bytes are not read."""

    header: ExtendedHeader | None
    program: Program
    segments: list[FileRange]
    named_data: dict[str, FileRange]

    def _load(self) -> None:
        path = self.path
        self.header = h = parse_extended_header(self.read(0, min(self.size, 40)), path)
        program_size = self.size if h is None else h.program_size
        if program_size > self.size or program_size < 8:
            raise TruncatedError("header.program_size", f"{program_size} but the file has {self.size} bytes", path)
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
                raise OutOfBoundsError(f"segments[{i}]", f"[{s.offset}, +{s.size}) after base {sbo} runs past the end of the file ({self.size} bytes)", path)
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
            head = self.read(blob.offset, min(blob.size, 32))
            hlen, fbo, fbs, bo, bs = parse_vh00(head, FileRange(blob.path, 0, blob.size), where)
            graph = decode_vkgraph(Reader(self.read(blob.offset + fbo, fbs), 0, fbs, self.path))
        section = bs if bs else blob.size - bo
        return VulkanDelegate(
            graph=graph, blob=blob, legacy_section=FileRange(self.path, blob.offset + bo, section),
            header_length=hlen, flatbuffer_offset=fbo, flatbuffer_size=fbs, bytes_offset=bo, bytes_size=bs,
            plan_index=pi, delegate_index=di,
            compile_specs=self.program.execution_plan[pi].delegates[di].compile_specs,
        )
