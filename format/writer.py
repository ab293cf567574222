"""write_program: stream a .pte (and optional .ptd/.safetensors) to disk atomically.

Metadata is built first (all sizes are known up front); then every segment is
written in file order, one payload at a time, straight from the payload's
buffer into the file (the only copy of each weight byte).
"""
from __future__ import annotations

import json
import os
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from . import dtypes, vkgraph as vk
from .atomic import AtomicFile, folder_lock
from .common import ScalarType, align, lcm, segment_alignment
from .encode import PlanSpec, encode_flat_tensor, encode_program, encode_vkgraph, insert_header, plan_io
from .errors import DuplicateKeyError, InvalidValueError, MissingKeyError
from .external import ALIASES_METADATA, DIGEST_BYTES, DIGEST_KEY, ExternalData, check_entry, constant_tensors
from .headers import DELEGATE, EXTENDED, FLAT_TENSOR, SAFETENSORS_LENGTH, safetensors_header
from .metadata import ProgramMetadata, relative_to
from .names import encode_io_names

Buffer = Any  # any C-contiguous buffer-protocol object: bytes, memoryview, numpy array, mmap
CHUNK = 8 * 1024 * 1024
_NO_DIGEST = "0" * 2 * DIGEST_BYTES
"""A .safetensors data digest's hex digits while the file is written."""


@dataclass(frozen=True)
class ConstantPayload:
    """The bytes of one constant: `read()` is called once, when they are written.

    `aliases`: the tensor's other names; each is one more named-data key for the same bytes
    (docs/format.md, "Tensor names"). `stored_in`: a safetensors file that already holds the
    bytes under `key` (a checkpoint the program references): nothing is written, `read` is None.
    """
    key: str
    nbytes: int
    read: Callable[[], Buffer] | None
    aliases: tuple[str, ...] = ()
    stored_in: str | None = None


@dataclass(frozen=True)
class IOSpec:
    """A program input or output tensor as the ExecuTorch runtime sees it, and its name in the model."""
    scalar_type: ScalarType
    sizes: tuple[int, ...]
    name: str | None = None


@dataclass(frozen=True)
class WriteReport:
    path: str
    file_bytes: int
    constant_bytes: int
    """Weight bytes written (each distinct key once)."""
    named_data_entries: int
    external_path: str | None
    external_bytes: int = 0
    referenced_bytes: int = 0
    """Weight bytes left in the files the program references (each distinct key once)."""
    referenced_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Segment:
    offset: int
    size: int
    payload: ConstantPayload | None = None  # None: the delegate blob (or empty)


def _place(sizes_aligns: Sequence[tuple[int, int]]) -> list[int]:
    """Segment offsets: each at align(previous end, lcm(128, alignment))."""
    offsets, end = [], 0
    for size, a in sizes_aligns:
        off = align(end, lcm(128, a))
        offsets.append(off)
        end = off + size
    return offsets


def _write_payload(out: AtomicFile, p: ConstantPayload) -> None:
    where = f"payload {p.key!r}"
    data = p.read()
    try:
        mv = memoryview(data).cast("B")
    except TypeError:
        raise InvalidValueError(where, "not a contiguous buffer") from None
    if mv.nbytes != p.nbytes:
        raise InvalidValueError(where, f"read() gave {mv.nbytes} bytes, declared {p.nbytes}")
    for start in range(0, mv.nbytes, CHUNK):
        out.write(mv[start:start + CHUNK])


@dataclass(frozen=True)
class MethodSpec:
    """One method of a program: its graph, the payloads of its constant_ids, its io and pytree specs."""
    name: str
    graph: vk.VkGraph
    payloads: Sequence[ConstantPayload]
    inputs: Sequence[IOSpec]
    outputs: Sequence[IOSpec]
    pytree_in: str = ""
    pytree_out: str = ""


def _unique(methods: Sequence[MethodSpec]) -> dict[str, ConstantPayload]:
    """key -> payload over every method (each distinct key once); checks payload sizes against the
    graphs, and that no name is given to two tensors."""
    out: dict[str, ConstantPayload] = {}
    for m in methods:
        where = f"method {m.name!r}: " if len(methods) > 1 else ""
        for cid, t in constant_tensors(m.graph).items():
            if cid >= len(m.payloads):
                raise InvalidValueError(f"{where}graph constant_id {cid}", f"no payload ({len(m.payloads)} given)")
            if t.nbytes != m.payloads[cid].nbytes:
                raise InvalidValueError(f"{where}payloads[{cid}]", f"{m.payloads[cid].nbytes} bytes, the tensor needs "
                                        f"{t.nbytes} ({t.datatype.name} {list(t.dims)})")
        for i, p in enumerate(m.payloads):
            if p.key in out and out[p.key].nbytes != p.nbytes:
                raise DuplicateKeyError(f"{where}payloads[{i}]",
                                        f"key {p.key!r} used for {out[p.key].nbytes} and {p.nbytes} bytes")
            out.setdefault(p.key, p)
    names = [name for p in out.values() for name in (p.key, *p.aliases)]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise DuplicateKeyError("payloads", f"name {twice!r} is given to two tensors (or twice to one)")
    if DIGEST_KEY in names:
        raise InvalidValueError("payloads", f"name {DIGEST_KEY!r} is where an external data file records its digest")
    return out


def _check_references(methods: Sequence[MethodSpec], files: Sequence[str]) -> None:
    """Before anything is written: each payload `stored_in` a file is there under its key, with the
    dtype and shape of every tensor using it (else the file would not load)."""
    for file in files:
        with ExternalData.open(file) as held:
            if held.kind != "safetensors":
                raise InvalidValueError("payloads", f"{file}: constants are referenced in safetensors files only")
            for m in methods:
                for cid, t in constant_tensors(m.graph).items():
                    p = m.payloads[cid]
                    if p.stored_in != file:
                        continue
                    where = f"method {m.name!r} payloads[{cid}]"
                    if p.key not in held.named_data:
                        raise MissingKeyError(where, f"key {p.key!r} is not in {file}")
                    check_entry(held, p.key, t, where, None)


def _entries(named: Sequence[ConstantPayload], first: int) -> list[tuple[str, int]]:
    """(key, segment index) of every name of every payload; payload i is segment `first + i`."""
    return [(name, first + i) for i, p in enumerate(named) for name in (p.key, *p.aliases)]


def _fill_constants(graph: vk.VkGraph, payloads: Sequence[ConstantPayload], layout: str) -> dict[str, int]:
    """Set graph.constants; return key -> offset in the blob's legacy section (empty when named)."""
    legacy: dict[str, int] = {}
    # legacy entries carry named_key "" rather than none: ExecuTorch's Python reader requires the string
    if layout == "legacy":
        section = 0
        for p in payloads:
            if p.key not in legacy:
                legacy[p.key] = section
                section += align(p.nbytes, 16)
        graph.constants = [vk.ConstantRef(legacy[p.key], p.nbytes, "") for p in payloads]
    else:
        graph.constants = [vk.ConstantRef(vk.NAMED_OFFSET, p.nbytes, p.key) if p.nbytes else vk.ConstantRef(0, 0, "")
                           for p in payloads]
    return legacy


def _io_specs(inputs: Sequence[IOSpec], outputs: Sequence[IOSpec]) -> list[tuple[str, bytes]]:
    """The delegate's compile specs: the io names, when any input or output has one."""
    if all(s.name is None for s in [*inputs, *outputs]):
        return []
    return [encode_io_names([s.name for s in inputs], [s.name for s in outputs])]


def _blob_head(graph: vk.VkGraph, section_size: int) -> bytes:
    """VH00 header + VkGraph flatbuffer, padded to 16 (the constant section follows)."""
    fb = encode_vkgraph(graph)
    start = DELEGATE.padded
    header = DELEGATE.pack(flatbuffer_offset=start, flatbuffer_size=len(fb), bytes_offset=start + align(len(fb), 16),
                           bytes_size=section_size)
    return header + fb.ljust(align(len(fb), 16), b"\0")


@dataclass(frozen=True)
class _Blob:
    """One method's delegate blob: its head, and its legacy constants (key -> offset in the section)."""
    head: bytes
    legacy: dict[str, int]
    section: int

    @property
    def size(self) -> int:
        return len(self.head) + self.section


def write_program(path: str | os.PathLike, graph: vk.VkGraph, payloads: Sequence[ConstantPayload],
                  inputs: Sequence[IOSpec], outputs: Sequence[IOSpec], *,
                  layout: Literal["named", "legacy"] = "named", external_data: str | os.PathLike | None = None,
                  alignment: int | None = None, pytree_in: str = "", pytree_out: str = "",
                  on_bytes: Callable[[int], None] | None = None) -> WriteReport:
    """Write `graph` and its constants as an ExecuTorch-1.5.1-compatible .pte with one "forward" method.

    payloads[i] holds the bytes of constant_id i; fills `graph.constants`. An input's or
    output's `IOSpec.name` is recorded in the file (vkx.format.names).
    With `external_data` (.ptd or .safetensors) the weights go there instead.
    """
    return write_methods(path, [MethodSpec("forward", graph, payloads, inputs, outputs, pytree_in, pytree_out)],
                         layout=layout, external_data=external_data, alignment=alignment, on_bytes=on_bytes)


def write_methods(path: str | os.PathLike, methods: Sequence[MethodSpec], *,
                  layout: Literal["named", "legacy"] = "named", external_data: str | os.PathLike | None = None,
                  alignment: int | None = None, on_bytes: Callable[[int], None] | None = None,
                  metadata: ProgramMetadata = ProgramMetadata()) -> WriteReport:
    """Write a .pte with one execution plan per method, each with its own VulkanBackend delegate.

    The methods' constants share one named-data map: a key several methods use is stored once.
    Payloads `stored_in` another file are referenced, not written: the files' paths relative to
    the .pte go into `metadata` (vkx.format.metadata), which every delegate records.
    """
    if layout not in ("named", "legacy"):
        raise ValueError(f"layout must be 'named' or 'legacy', not {layout!r}")
    if layout == "legacy" and external_data is not None:
        raise ValueError("the legacy layout keeps weights in the delegate blob; it cannot use external_data")
    if layout == "legacy" and len(methods) > 1:
        raise ValueError("several methods share their weights through named data; the legacy layout cannot")
    if external_data is not None and Path(external_data).suffix not in (".ptd", ".safetensors"):
        raise ValueError(f"external_data must end in .ptd or .safetensors: {external_data}")
    if not methods or len({m.name for m in methods}) != len(methods):
        raise ValueError(f"methods must be non-empty with distinct names: {[m.name for m in methods]}")
    for m in methods:
        if len(m.inputs) != len(m.graph.input_ids) or len(m.outputs) != len(m.graph.output_ids):
            raise ValueError(f"{m.name}: {len(m.inputs)} inputs / {len(m.outputs)} outputs given, the graph has "
                             f"{len(m.graph.input_ids)} / {len(m.graph.output_ids)}")
    unique = _unique(methods)
    referenced = [p for p in unique.values() if p.stored_in is not None]
    if referenced and layout == "legacy":
        raise ValueError("constants stored in other files need the named layout")
    files = tuple(dict.fromkeys(p.stored_in for p in referenced))
    _check_references(methods, files)
    written_to = None if external_data is None else relative_to(path, [external_data])[0]
    metadata = replace(metadata, external_files=relative_to(path, files), external_data=written_to,
                       external_digest=None)
    blobs = []
    for m in methods:
        legacy = _fill_constants(m.graph, m.payloads, layout)
        section = sum(align(unique[key].nbytes, 16) for key in legacy)
        blobs.append(_Blob(_blob_head(m.graph, section), legacy, section))
    named = [p for p in unique.values() if p.nbytes and p.stored_in is None] if layout == "named" else []
    in_pte = named if external_data is None else []
    aligns = [segment_alignment(p.nbytes, alignment) for p in in_pte]
    offsets = _place([(0, 1)] + [(b.size, 1) for b in blobs] + [(p.nbytes, a) for p, a in zip(in_pte, aligns)])
    first_named = 1 + len(blobs)
    segments = [_Segment(offsets[0], 0)] + [_Segment(o, b.size) for o, b in zip(offsets[1:first_named], blobs)]
    segments += [_Segment(o, p.nbytes, p) for o, p in zip(offsets[first_named:], in_pte)]

    ext_target = None if external_data is None else Path(external_data)
    ext_bytes = 0
    with ExitStack() as stack:
        if ext_target is not None:  # written first: the .pte records the digest it ends with
            ext = stack.enter_context(AtomicFile(ext_target, on_bytes, digest=True))
            if ext_target.suffix == ".safetensors":
                digest = _write_safetensors(ext, [m.graph for m in methods], named, alignment)
            else:
                digest = _write_ptd(ext, named, alignment)
            metadata = replace(metadata, external_digest=digest)
            ext_bytes = ext.pos
        out = stack.enter_context(AtomicFile(path, on_bytes))
        _write_pte(out, methods, metadata, blobs, segments, aligns, unique)
        with folder_lock(*[p for p in (path, ext_target) if p is not None]):
            if ext_target is None:
                out.commit()
            else:  # the pair's two renames, which no other writer of this folder comes between
                ext.commit(keep_old=True)  # a failure to commit the .pte brings back the old one
                try:
                    out.commit()
                except BaseException:
                    ext.uncommit()
                    raise
    return WriteReport(str(path), out.pos, sum(p.nbytes for p in unique.values() if p.stored_in is None),
                       len(named), None if ext_target is None else str(ext_target), ext_bytes,
                       sum(p.nbytes for p in referenced), files)


def _write_pte(out: AtomicFile, methods: Sequence[MethodSpec], metadata: ProgramMetadata, blobs: Sequence[_Blob],
               segments: Sequence[_Segment], aligns: Sequence[int], unique: dict[str, ConstantPayload]) -> None:
    """The program: header, Program flatbuffer (every delegate recording `metadata`), delegate blobs, and
    the segments of its own named data (`segments` after the blobs)."""
    first_named = 1 + len(blobs)
    in_pte = [s.payload for s in segments[first_named:]]
    plans = []
    for i, m in enumerate(methods):
        io, arena = plan_io([(s.scalar_type, s.sizes) for s in list(m.inputs) + list(m.outputs)])
        specs = _io_specs(m.inputs, m.outputs) + ([metadata.encode()] if metadata else [])
        plans.append(PlanSpec(m.name, io[:len(m.inputs)], io[len(m.inputs):], arena, 1 + i, m.pytree_in, m.pytree_out,
                              specs))
    fb = encode_program(plans, [(s.offset, s.size) for s in segments],
                        _entries(in_pte, first_named) if in_pte else None)
    program_size = EXTENDED.padded + len(fb)
    sbo = align(program_size, max([128, *aligns]))
    header = EXTENDED.pack(program_size=program_size, segment_base_offset=sbo,
                           segment_data_size=segments[-1].offset + segments[-1].size)
    out.write(insert_header(fb, header))
    out.pad_to(sbo)
    for s, blob in zip(segments[1:first_named], blobs):
        out.pad_to(sbo + s.offset)
        out.write(blob.head)
        for key, off in blob.legacy.items():
            out.pad_to(sbo + s.offset + len(blob.head) + off)
            _write_payload(out, unique[key])
        out.pad_to(sbo + s.offset + s.size)
    for s in segments[first_named:]:
        out.pad_to(sbo + s.offset)
        _write_payload(out, s.payload)


def _write_ptd(out: AtomicFile, named: Sequence[ConstantPayload], alignment: int | None) -> str:
    """The .ptd; returns its data digest, recorded last: the sha256 of every byte before its own
    segment, which is one more named-data entry (`DIGEST_KEY`)."""
    aligns = [segment_alignment(p.nbytes, alignment) for p in named]
    offsets = _place([(p.nbytes, a) for p, a in zip(named, aligns)] + [(DIGEST_BYTES, 1)])
    sizes = [p.nbytes for p in named] + [DIGEST_BYTES]
    fb = encode_flat_tensor(list(zip(offsets, sizes)), _entries(named, 0) + [(DIGEST_KEY, len(named))])
    start = FLAT_TENSOR.padded
    sbo = align(start + len(fb), max([128] + aligns))
    header = FLAT_TENSOR.pack(flatbuffer_offset=start, flatbuffer_size=len(fb), segment_base_offset=sbo,
                              segment_data_size=offsets[-1] + DIGEST_BYTES)
    out.write(insert_header(fb, header))
    for o, p in zip(offsets, named):
        out.pad_to(sbo + o)
        _write_payload(out, p)
    out.pad_to(sbo + offsets[-1])
    digest = out.sha.digest()
    out.write(digest)
    return digest.hex()


def _write_safetensors(out: AtomicFile, graphs: Sequence[vk.VkGraph], named: Sequence[ConstantPayload],
                       alignment: int | None) -> str:
    """The .safetensors; returns its data digest, the sha256 of the file with the digest's own hex digits
    as zeros (`__metadata__[DIGEST_KEY]`)."""
    by_key = {}
    for graph in graphs:
        for cid, t in sorted(constant_tensors(graph).items()):
            by_key.setdefault(graph.constants[cid].named_key, t)
    meta, pos = {}, 0
    for p in named:
        t = by_key.get(p.key)
        dtype, shape = (dtypes.of(t.datatype).safetensors, list(t.dims)) if t is not None else ("U8", [p.nbytes])
        meta[p.key] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + p.nbytes]}
        pos += p.nbytes
    aliases = {alias: p.key for p in named for alias in p.aliases}
    # the data digest is known at the end: hashed as zeros, then written over them
    meta["__metadata__"] = {DIGEST_KEY: _NO_DIGEST}
    if aliases:  # safetensors keys cannot share bytes: a tied tensor's other names go in the metadata
        meta["__metadata__"][ALIASES_METADATA] = json.dumps(aliases, separators=(",", ":"))
    text = json.dumps(meta, separators=(",", ":")).encode()
    out.write(safetensors_header(text, max([8] + [segment_alignment(p.nbytes, alignment) for p in named])))
    for p in named:
        _write_payload(out, p)
    digest = out.sha.hexdigest()
    field = f'"{DIGEST_KEY}":"'.encode()  # once in the JSON: no tensor has that name, and strings escape quotes
    out.write_at(SAFETENSORS_LENGTH.size + text.index(field) + len(field), digest.encode())
    return digest
