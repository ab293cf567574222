"""Op builders: each turns one `OperatorCall` into GPU dispatches.

Every op is declared once in `vkx.format.contract` (arguments by name, dtypes,
shape rule). A builder is a function `fn(builder: OpBuilder, call: Call) -> None`
registered with `@builds(name, ...)` (or `@builds_family(family)` for every op
the contract declares in that family) against those declarations; by the time
it runs, the graph builder has bound the call and checked its rule, so it reads
its arguments by name (`call.tensor("weight")`, `call["eps"]`) and records
dispatches. It never touches Vulkan. Op modules register themselves on import
(see `_OP_MODULES`).

Each shader's variants (the define sets its builders can pass to `dispatch`) are declared
next to those builders with `@variants(shader)`: the package build compiles exactly these
(vkx.loader.gpu.spirv), so a define never holds a runtime number (docs/architecture.md,
"Shader variants").
"""
from __future__ import annotations

import importlib
import itertools
import math
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterable, Iterator, Mapping, Protocol, Sequence, Union

from vkx.format import dtypes, opset
from vkx.format.contract import Call
from vkx.format.dtypes import DType
from vkx.loader.errors import UnsupportedOpError
from vkx.loader.gpu.limits import Limits


@dataclass(frozen=True)
class TensorArg:
    """A GPU tensor as an op sees it: a contiguous row-major buffer of `dtype` elements."""
    vid: int
    shape: tuple[int, ...]
    dtype: DType

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def _held(narrow: DType) -> DType:
    """`narrow` (8-bit) held in an int32 word."""
    return DType(f"{narrow.name}_in_int32", narrow.datatype, 4, "int32", False, True, narrow.scalar_type,
                 narrow.safetensors)


HELD_IN_WORDS: dict[DType, DType] = {_held(d): d for d in (dtypes.BOOL, dtypes.INT8, dtypes.UINT8)}
"""Each 8-bit type's device form where narrow storage is missing (`held_dtype`): an int32 word holding
the narrow type's value (a store converts as the narrow type would: bool to 0/1, int8 and uint8
wrapped), keyed by that form, the narrow type its value."""

_HELD_STORE = {dtypes.BOOL: "int(({}) != 0)", dtypes.INT8: "bitfieldExtract(int({}), 0, 8)",
               dtypes.UINT8: "int(uint(int({})) & 255u)"}
"""That store's GLSL, by narrow type."""

GLSL_TYPES: dict[DType, str] = {dtypes.FLOAT32: "float", dtypes.FLOAT16: "float16_t", dtypes.BFLOAT16: "uint16_t",
                                dtypes.INT32: "int", dtypes.INT8: "int8_t", dtypes.UINT8: "uint8_t",
                                dtypes.BOOL: "uint8_t", **{held: "int" for held in HELD_IN_WORDS}}
"""The GLSL type of one element of a device buffer (bfloat16 as its 16 bits: shaders widen it)."""


def _load(dtype: DType, element: str) -> tuple[str, str]:
    """GLSL expressions reading `element` as a float and as an int."""
    if dtype is dtypes.BFLOAT16:
        as_float = f"uintBitsToFloat(uint({element}) << 16)"
        return as_float, f"int({as_float})"
    if dtype in (dtypes.INT8, dtypes.UINT8, dtypes.BOOL):
        wide = "int" if dtype is dtypes.INT8 else "uint"
        return f"float({wide}({element}))", f"int({wide}({element}))"
    return f"float({element})", f"int({element})"


def _store(dtype: DType, value: str) -> str:
    """A GLSL expression of `dtype`'s storage type for the number `value` (float or int)."""
    if dtype is dtypes.BFLOAT16:
        return f"uint16_t(bf16_bits(float({value})))"  # round to nearest even, shaders/dtype.glslh
    if dtype is dtypes.BOOL:
        return f"uint8_t(({value}) != 0 ? 1u : 0u)"
    if dtype is dtypes.INT8:
        return f"int8_t(int({value}))"
    if dtype is dtypes.UINT8:
        return f"uint8_t(uint(int({value})))"
    if dtype in HELD_IN_WORDS:  # the narrow type's value, in a 32-bit word
        return _HELD_STORE[HELD_IN_WORDS[dtype]].format(value)
    return f"{GLSL_TYPES[dtype]}({value})"


def elem_defines(prefix: str, buffer: str, dtype: DType) -> dict[str, str]:
    """Shader defines that give storage array `buffer` the element type `dtype`.

    `<P>_T` is the array's element type; `LOAD_<P>(i)` reads element i as a float,
    `LOADI_<P>(i)` as an int, and `STORE_<P>(i, v)` writes the number v (float or
    int) converted to `dtype`. Shaders that use them `#include "dtype.glslh"`.
    """
    if not dtype.on_device:
        raise UnsupportedOpError(f"{dtype} tensors cannot live on a device")
    element = f"{buffer}[(i)]"
    as_float, as_int = _load(dtype, element)
    return {f"{prefix}_T": GLSL_TYPES[dtype], f"LOAD_{prefix}(i)": as_float, f"LOADI_{prefix}(i)": as_int,
            f"STORE_{prefix}(i,v)": f"{element} = {_store(dtype, '(v)')}"}


STORAGE_FEATURES = {2: "storageBuffer16BitAccess", 1: "storageBuffer8BitAccess"}
"""The device feature a storage buffer of 2- and 1-byte elements needs."""


def narrow_storage(features: frozenset[str]) -> bool:
    """Whether the device stores 16- and 8-bit elements (both storage features in force)."""
    return set(STORAGE_FEATURES.values()) <= features


def held_dtype(dtype: DType, features: frozenset[str]) -> DType:
    """The device dtype of a tensor the device writes (activation, state, graph input or output) that
    the file declares `dtype`: `dtype` itself, or, without narrow storage, fp32 for a 16-bit float
    (computed, not rounded, in fp32) and an int32 word for an 8-bit type (docs/profiles.md)."""
    if dtype.itemsize >= 4 or narrow_storage(features):
        return dtype
    if dtype.is_float:
        return dtypes.FLOAT32
    return next(held for held, narrow in HELD_IN_WORDS.items() if narrow == dtype)


DTYPE_CODES: dict[DType, int] = {dtypes.FLOAT32: 0, dtypes.FLOAT16: 1, dtypes.BFLOAT16: 2, dtypes.INT32: 3,
                                 dtypes.INT8: 4, dtypes.UINT8: 5, dtypes.BOOL: 6,
                                 **{held: 7 + i for i, held in enumerate(HELD_IN_WORDS)}}
"""A dtype as a specialization constant of shaders/dtype.glslh's ANY_IN / ANY_OUT buffers."""


def dtype_code(dtype: DType) -> int:
    """`dtype`'s DTYPE_CODES entry (refused for a dtype no device tensor has)."""
    if dtype not in DTYPE_CODES:
        raise UnsupportedOpError(f"{dtype} tensors cannot live on a device")
    return DTYPE_CODES[dtype]


def dtype_spec(*tensors: "TensorArg") -> tuple[int, ...]:
    """The specialization constants of ANY_IN / ANY_OUT bindings (shaders/dtype.glslh): each tensor's
    DTYPE_CODES entry, in order."""
    return tuple(dtype_code(t.dtype) for t in tensors)


def reads_by_words(builder: "OpBuilder") -> bool:
    """Whether `builder`'s device lacks narrow storage, so that shaders read 16- and 8-bit inputs
    (weights: what the device writes is held in 32 bits) through 32-bit words."""
    return not narrow_storage(builder.limits.features)


def any_dtype_defines(**flags: bool) -> dict[str, int]:
    """The DT_* names of DTYPE_CODES, for shaders whose buffers take any dtype, and each flag that
    is true defined as 1 (WORDS, a device without narrow storage: 16- and 8-bit buffers are read
    through 32-bit words, never written)."""
    return {**{f"DT_{d.name.upper()}": code for d, code in DTYPE_CODES.items()},
            **{name: 1 for name, on in flags.items() if on}}


def any_dtype_variants(*flags: str) -> Iterable[Defines]:
    """any_dtype_defines of every combination of `flags` and WORDS, each on and off: the variants of
    a shader whose buffers take any dtype."""
    names = (*flags, "WORDS")
    for on in itertools.product((False, True), repeat=len(names)):
        yield any_dtype_defines(**dict(zip(names, on)))


def _word_load(dtype: DType, buffer: str) -> tuple[str, str]:
    """GLSL expressions reading element i of a 16- or 8-bit `dtype` out of the 32-bit words of
    `buffer`, as a float and as an int."""
    if dtype.itemsize == 2:
        half = f"({buffer}[(i) >> 1] >> (((i) & 1) << 4))"
        as_float = (f"uintBitsToFloat({half} << 16)" if dtype is dtypes.BFLOAT16
                    else f"unpackHalf2x16({half}).x")
        return as_float, f"int({as_float})"
    word, at = f"{buffer}[(i) >> 2]", "int(((i) & 3) << 3)"
    as_int = (f"bitfieldExtract(int({word}), {at}, 8)" if dtype is dtypes.INT8
              else f"int(bitfieldExtract({word}, {at}, 8))")
    return f"float({as_int})", as_int


def read_defines(builder: "OpBuilder", prefix: str, buffer: str, tensor: "TensorArg") -> dict[str, str]:
    """elem_defines of a binding the shader only reads (LOAD_<P>, LOADI_<P>; no STORE_<P>), in the
    storage mode of `builder`'s device (`read_form`)."""
    return read_form(prefix, buffer, tensor.dtype, reads_by_words(builder))


def read_form(prefix: str, buffer: str, dtype: DType, words: bool) -> dict[str, str]:
    """read_defines of a binding of device dtype `dtype` in a storage mode: without narrow storage
    (`words`: either feature missing, so the mode is one of two, as `held_dtype`'s and the variant
    spaces' `WORDS_MODES`) a 16- or 8-bit dtype is read through 32-bit words (`<P>_T` is uint), which
    every device can (buffers and bindings are whole words: the last word of an odd tensor has
    padding beside it)."""
    if words and dtype.itemsize < 4:
        return word_read_defines(prefix, buffer, dtype)
    return elem_defines(prefix, buffer, dtype)


def word_read_defines(prefix: str, buffer: str, dtype: DType) -> dict[str, str]:
    """read_defines of a 16- or 8-bit binding read through 32-bit words (`<P>_T` is uint)."""
    as_float, as_int = _word_load(dtype, buffer)
    return {f"{prefix}_T": "uint", f"LOAD_{prefix}(i)": as_float, f"LOADI_{prefix}(i)": as_int}


FLOATS: tuple[DType, ...] = (dtypes.FLOAT32, dtypes.FLOAT16, dtypes.BFLOAT16)
"""The float dtypes a tensor may have (vkx.format.dtypes.FLOATS, in a fixed order)."""

WORDS_MODES = (False, True)
"""A device with narrow (16/8-bit) storage, and one without: the two storage modes every variant
space covers (`binding_forms`)."""


def storage_features(words: bool) -> frozenset[str]:
    """The storage features of a storage mode (`held_dtype`'s argument): none without narrow storage."""
    return frozenset() if words else frozenset(STORAGE_FEATURES.values())


def binding_forms(prefix: str, buffer: str, kinds: Iterable[DType], words: bool, writes: bool = False
                  ) -> list[dict[str, str]]:
    """Every define set `read_defines` / `elem_defines` may give a binding of one of `kinds` in a storage
    mode: with narrow storage (`words` False) each dtype itself; without, what the device writes held
    in 32 bits (held_dtype) and, for a binding only read, a stored 16/8-bit constant read by words."""
    forms: dict[tuple, dict[str, str]] = {}
    for dtype in kinds:
        held = held_dtype(dtype, storage_features(words))
        found = [elem_defines(prefix, buffer, held)]
        if words and not writes and dtype.itemsize < 4:
            found.append(word_read_defines(prefix, buffer, dtype))
        for f in found:
            forms[tuple(sorted(f.items()))] = f
    return list(forms.values())


def product(*choices: Iterable[Defines]) -> Iterator[dict[str, Union[str, int]]]:
    """Every merge of one define set from each of `choices` (a variant space's product)."""
    for picked in itertools.product(*map(list, choices)):
        merged: dict[str, Union[str, int]] = {}
        for d in picked:
            merged.update(d)
        yield merged


@dataclass(frozen=True)
class SubRange:
    """Bind only `size` bytes of `tensor` starting at byte `offset`."""
    tensor: TensorArg
    offset: int
    size: int


Binding = Union[TensorArg, SubRange]


class OpBuilder(Protocol):
    limits: Limits
    """The limits and features a graph is built under (vkx.loader.gpu.limits): the device's in force, its
    binding range lowered to the load's `max_binding_bytes` and its push constants to vkx's pipeline
    layout's. Kernels split at `max_storage_buffer_range`, align `SubRange.offset` to
    `min_storage_buffer_offset_alignment`, and choose by `features` (`read_defines`)."""
    compute_units: int
    """The device's compute units (vkx.loader.gpu.device.Device.compute_units)."""
    is_cpu: bool
    """Whether the device is a CPU (lavapipe): kernels tuned for GPUs may choose otherwise there."""
    fp16_cooperative_matrix: bool
    """Whether fp16 products may take shaders/matmul_coop.comp (vkx.loader.gpu.device.Device.fp16_cooperative_matrix)."""

    def temp(self, shape: Sequence[int], dtype: DType = dtypes.FLOAT32) -> TensorArg:
        """Scratch tensor, allocated with the activations, alive for the whole graph."""
    def scratch(self, shape: int | Sequence[int], role: str = "partials", dtype: DType = dtypes.FLOAT32) -> TensorArg:
        """A tensor of `shape` (a number: that many elements) and `dtype` in the graph's scratch of
        `role` (one tensor a role, shared by every op), for data that lives within one op's
        dispatches (grown by later requests; bind it right away)."""
    def dispatch(self, shader: str, bindings: Sequence[Binding], push: bytes,
                 groups: tuple[int, int, int], defines: Mapping[str, Union[str, int]] = ...,
                 spec: Sequence[int] = ...) -> None:
        """Record `shaders/<shader>.comp` (built with `defines`; specialization constant i =
        spec[i]), binding i = bindings[i]."""
    def alias(self, vid: int, of: int) -> None:
        """Make tensor `vid` the very device tensor of `of`."""
    def alias_view(self, out: TensorArg, src: TensorArg) -> bool:
        """Make `out` share `src`'s device tensor (a view: same bytes, another shape) when
        nothing can overwrite them while `out` is read; False when the caller must copy."""
    def at_load(self) -> ContextManager[None]:
        """Dispatches recorded inside run once, at load, after the weights are in."""
    def is_read(self, vid: int) -> bool:
        """Whether some op reads tensor `vid` or it is a graph output (an op may skip an unread output)."""
    def state(self, vid: int, name: str, initial: int | None) -> None:
        """Make tensor `vid` the persistent state `name`, initialised from constant `initial` (None: zeros)."""
    def update(self, vid: int, of: int) -> None:
        """Make tensor `vid` the state tensor `of`, which an update op writes in place (refused if not state)."""


Builder = Callable[[OpBuilder, Call], None]
BUILDERS: dict[str, Builder] = {}


def builds(*names: str) -> Callable[[Builder], Builder]:
    """Register `fn` as the builder of the declared ops `names` (each at most once)."""
    def wrap(fn: Builder) -> Builder:
        for name in names:
            if opset.lookup(name) is None:
                raise ValueError(f"{fn.__name__} builds {name}, which vkx.format.contract does not declare")
            if name in BUILDERS:
                raise ValueError(f"{name} has two builders ({BUILDERS[name].__name__}, {fn.__name__})")
            BUILDERS[name] = fn
        return fn
    return wrap


def builds_family(family: str) -> Callable[[Builder], Builder]:
    """Register `fn` for every op the contract declares with `family`."""
    names = [n for n, d in opset.OPS.items() if d.family == family]
    if not names:
        raise ValueError(f"the contract declares no op of family {family!r}")
    return builds(*names)


Defines = Mapping[str, Union[str, int]]
Variants = Callable[[], Iterable[Defines]]
VARIANTS: dict[str, Variants] = {}


def variants(shader: str) -> Callable[[Variants], Variants]:
    """Register `fn` as the enumeration of every define set the builders can pass for `shader`."""
    def wrap(fn: Variants) -> Variants:
        if shader in VARIANTS:
            raise ValueError(f"{shader} has two variant lists ({VARIANTS[shader].__name__}, {fn.__name__})")
        VARIANTS[shader] = fn
        return fn
    return wrap


def all_variants() -> dict[str, list[dict[str, Union[str, int]]]]:
    """Every declared shader's variants, each define set once."""
    if not _loaded:
        _load_all()
    out = {}
    for shader, fn in sorted(VARIANTS.items()):
        unique = {tuple(sorted((str(k), str(v)) for k, v in d.items())): dict(d) for d in fn()}
        out[shader] = list(unique.values())
    return out


_OP_MODULES = ("elementwise", "reduce", "shape", "layout", "gather", "matmul", "conv", "sampling", "attention",
               "prepack", "quant", "act_quant", "state", "fused", "sample")


def lookup(name: str) -> Builder:
    """The builder of `name`; UnsupportedOpError when vkx has none."""
    if not _loaded:
        _load_all()
    fn = BUILDERS.get(name)
    if fn is None:
        raise UnsupportedOpError(f"unsupported op {name!r}")
    return fn


_loaded = False


def _load_all() -> None:
    global _loaded
    for module in _OP_MODULES:
        importlib.import_module(f"{__name__}.{module}")
    _loaded = True
