"""The op contract's shape and layout ops: views and copies (view, permute, slice, select, split, cat,
expand, squeeze, unsqueeze, casts and dim-order copies, the Vulkan backend's prepack), and the ops that
lay elements out anew (constant_pad_nd, repeat, unfold, pixel_shuffle, flip), each with its rule
beside it.

Arguments come in the schemas' order, the output last (vkx.format.contract): ATen's for `aten.*` and
`dim_order_ops.*`. docs/architecture.md lists the same ops in prose.
"""
from __future__ import annotations

import math

from .contract import Arg, Call, OpDecl, Out
from .op_rules import ALL_TYPES, B, I, L, N, T, TENSOR_OPTIONS, TS, dim_index, optional, same_shape, slice_length

DECLS: list[OpDecl] = []
"""This module's declarations, in order (`vkx.format.opset` assembles the table)."""
declare = DECLS.append


def _view(call: Call) -> None:
    size = list(call["size"])
    src = call.tensor("self")
    call.require(size.count(-1) <= 1 and all(s >= -1 for s in size), f"size {size}")
    if -1 in size:
        known = math.prod(s for s in size if s != -1)
        call.require(known > 0 and math.prod(src.shape) % known == 0, f"size {size} for {list(src.shape)}")
        size[size.index(-1)] = math.prod(src.shape) // known
    call.require(math.prod(size) == math.prod(src.shape), f"size {size} does not hold {list(src.shape)}")
    call.expect_shape("the output", call.out.shape, size)


def _permute(call: Call) -> None:
    src = call.tensor("self")
    rank = len(src.shape)
    dims = [dim_index(call, d, rank) for d in call["dims"]]
    call.require(sorted(dims) == list(range(rank)), f"dims {list(call['dims'])} are not a permutation")
    call.expect_shape("the output", call.out.shape, [src.shape[d] for d in dims])


def _slice(call: Call) -> None:
    src = call.tensor("self")
    call.require(len(src.shape) > 0, "slice of a 0-dim tensor")
    dim = dim_index(call, call["dim"], len(src.shape))
    step = call["step"]
    call.require(step > 0, f"step {step} must be positive")
    _, length = slice_length(src.shape[dim], call["start"], call["end"], step)
    want = list(src.shape)
    want[dim] = length
    call.expect_shape("the output", call.out.shape, want)


def _cat(call: Call) -> None:
    parts = [t for t in call["tensors"] if math.prod(t.shape) > 0]
    out = call.out.shape
    dim = dim_index(call, call["dim"], len(out))
    total = 0
    for t in parts:
        call.require(len(t.shape) == len(out) and all(a == b for d, (a, b) in enumerate(zip(t.shape, out)) if d != dim),
                     f"cat input {list(t.shape)} does not fit the output {list(out)}")
        total += t.shape[dim]
    call.require(total == (out[dim] if out else 0) or (not parts and math.prod(out) == 0),
                 f"cat inputs cover {total} of {out[dim] if out else 0} along dim {dim}")


def _expand(call: Call) -> None:
    src, size = call.tensor("self").shape, tuple(call["size"])
    lead = len(size) - len(src)
    call.require(lead >= 0, f"size {list(size)} has fewer dims than {list(src)}")
    want = list(size[:lead])
    for s, n in zip(src, size[lead:]):
        call.require(n in (-1, s) or s == 1, f"{list(src)} does not expand to {list(size)}")
        want.append(s if n == -1 else n)
    call.require(all(n >= 0 for n in want), f"size {list(size)}")
    call.expect_shape("the output", call.out.shape, want)


def _unsqueeze(call: Call) -> None:
    src = call.tensor("self")
    dim = dim_index(call, call["dim"], len(src.shape) + 1)
    want = list(src.shape)
    want.insert(dim, 1)
    call.expect_shape("the output", call.out.shape, want)


def _squeeze_dims(call: Call) -> None:
    src = call.tensor("self")
    rank = len(src.shape)
    dims = {dim_index(call, d, rank) for d in call["dim"]}
    call.expect_shape("the output", call.out.shape, [s for d, s in enumerate(src.shape) if d not in dims or s != 1])


def _select(call: Call) -> None:
    src = call.tensor("self")
    call.require(len(src.shape) > 0, "select of a 0-dim tensor")
    dim = dim_index(call, call["dim"], len(src.shape))
    size, index = src.shape[dim], call["index"]
    call.require(-size <= index < size, f"index {index} out of range for size {size}")
    call.expect_shape("the output", call.out.shape, src.shape[:dim] + src.shape[dim + 1:])


def split_sizes(call: Call) -> list[int]:
    """The sizes along `dim` of the outputs of split_with_sizes_copy / split_copy."""
    size = call.tensor("self").shape[dim_index(call, call["dim"], len(call.tensor("self").shape))]
    if call.decl.has("split_sizes"):
        sizes = list(call["split_sizes"])
        call.require(all(s >= 0 for s in sizes) and sum(sizes) == size,
                     f"split_sizes {sizes} do not add up to {size}")
        return sizes
    step = call["split_size"]
    call.require(step > 0 or (step == 0 and size == 0), f"split_size {step} for size {size}")
    return [min(step, size - start) for start in range(0, size, step)] if size else [0]


def _split(call: Call) -> None:
    src = call.tensor("self")
    call.require(len(src.shape) > 0, "split of a 0-dim tensor")
    dim = dim_index(call, call["dim"], len(src.shape))
    sizes = split_sizes(call)
    call.require(len(call.outputs) == len(sizes), f"{len(call.outputs)} outputs for {len(sizes)} pieces")
    for i, (t, s) in enumerate(zip(call.outputs, sizes)):
        call.expect_shape(f"output {i}", t.shape, (*src.shape[:dim], s, *src.shape[dim + 1:]))


def _dtype_copy(call: Call) -> None:
    """A copy into the output's dtype; any dim_order of the rank (a device tensor has one layout)."""
    src = call.tensor("self")
    order = call["dim_order"]
    call.require(not order or sorted(order) == list(range(len(src.shape))),
                 f"dim_order {list(order or ())} for {len(src.shape)} dims")
    same_shape(call)


def pad_widths(call: Call) -> list[tuple[int, int]]:
    """constant_pad_nd's (before, after) per dim of self, first dim first (`pad` lists the last dim's
    pair first; a negative width crops)."""
    src, pad = call.tensor("self"), list(call["pad"])
    call.require(len(pad) % 2 == 0 and len(pad) // 2 <= len(src.shape), f"pad {pad} for {len(src.shape)} dims")
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)][::-1]
    return [(0, 0)] * (len(src.shape) - len(pairs)) + pairs


def _pad(call: Call) -> None:
    src = call.tensor("self")
    want = [size + a + b for size, (a, b) in zip(src.shape, pad_widths(call))]
    call.require(all(w >= 0 for w in want), f"pad {list(call['pad'])} crops {list(src.shape)} below nothing")
    if not call.out.dtype.is_float:
        value = call["value"]
        call.require(float(value).is_integer() and -2**31 <= value < 2**31, f"value {value!r} for a "
                                                                            f"{call.out.dtype} output")
    call.expect_shape("the output", call.out.shape, want)


def _repeat(call: Call) -> None:
    src, repeats = call.tensor("self"), list(call["repeats"])
    call.require(len(repeats) >= len(src.shape) and all(r >= 0 for r in repeats),
                 f"repeats {repeats} for {len(src.shape)} dims")
    padded = [1] * (len(repeats) - len(src.shape)) + list(src.shape)
    call.expect_shape("the output", call.out.shape, [s * r for s, r in zip(padded, repeats)])


def unfold_windows(call: Call) -> int:
    """How many windows unfold_copy takes along `dimension`."""
    src = call.tensor("self")
    dim = dim_index(call, call["dimension"], len(src.shape))
    length = src.shape[dim] if src.shape else 1
    size, step = call["size"], call["step"]
    call.require(step > 0 and 0 <= size <= length, f"size {size} and step {step} for a dim of {length}")
    return (length - size) // step + 1


def _unfold(call: Call) -> None:
    src = call.tensor("self")
    want = list(src.shape)
    if want:
        want[dim_index(call, call["dimension"], len(want))] = unfold_windows(call)
    else:
        unfold_windows(call)
        want = [1]
    call.expect_shape("the output", call.out.shape, [*want, call["size"]])


def _pixel_shuffle(call: Call) -> None:
    src, r = call.tensor("self"), call["upscale_factor"]
    call.require(len(src.shape) >= 3 and r > 0 and src.shape[-3] % (r * r) == 0,
                 f"upscale_factor {r} for {list(src.shape)}")
    *lead, c, h, w = src.shape
    call.expect_shape("the output", call.out.shape, [*lead, c // (r * r), h * r, w * r])


def _flip(call: Call) -> None:
    src = call.tensor("self")
    dims = [dim_index(call, d, len(src.shape)) for d in call["dims"]]
    call.require(len(set(dims)) == len(dims), f"dims {list(call['dims'])} name a dim twice")
    same_shape(call)


declare(OpDecl("aten.view_copy.default", (Arg("self", T), Arg("size", L)), dtypes=ALL_TYPES, rule=_view))
declare(OpDecl("aten.permute_copy.default", (Arg("self", T), Arg("dims", L)), dtypes=ALL_TYPES, rule=_permute))
declare(OpDecl("aten.slice_copy.Tensor",
               (Arg("self", T), Arg("dim", I, default=0), optional("start", I, None), optional("end", I, None),
                Arg("step", I, default=1)), dtypes=ALL_TYPES, rule=_slice))
declare(OpDecl("aten.cat.default", (Arg("tensors", TS), Arg("dim", I, default=0)), dtypes=ALL_TYPES, rule=_cat))
declare(OpDecl("aten.expand_copy.default", (Arg("self", T), Arg("size", L), Arg("implicit", B, default=False)),
               dtypes=ALL_TYPES, rule=_expand))
declare(OpDecl("aten._to_copy.default", (Arg("self", T),), dtypes=ALL_TYPES, rule=same_shape))
declare(OpDecl("et_vk.prepack.default", (Arg("tref", T),), dtypes=ALL_TYPES,
               rule=lambda call: same_shape(call, "tref")))
declare(OpDecl("aten.unsqueeze_copy.default", (Arg("self", T), Arg("dim", I)), dtypes=ALL_TYPES, rule=_unsqueeze))
declare(OpDecl("aten.squeeze_copy.dims", (Arg("self", T), Arg("dim", L)), dtypes=ALL_TYPES, rule=_squeeze_dims))
declare(OpDecl("aten.select_copy.int", (Arg("self", T), Arg("dim", I), Arg("index", I)), dtypes=ALL_TYPES,
               rule=_select))
declare(OpDecl("aten.split_with_sizes_copy.default", (Arg("self", T), Arg("split_sizes", L), Arg("dim", I, default=0)),
               out=Out(listed=True), dtypes=ALL_TYPES, rule=_split))
declare(OpDecl("aten.split_copy.Tensor", (Arg("self", T), Arg("split_size", I), Arg("dim", I, default=0)),
               out=Out(listed=True), dtypes=ALL_TYPES, rule=_split))
declare(OpDecl("dim_order_ops._to_dim_order_copy.default",
               (Arg("self", T), *TENSOR_OPTIONS, Arg("non_blocking", B, default=False),
                optional("dim_order", L, None)), dtypes=ALL_TYPES, rule=_dtype_copy))
declare(OpDecl("dim_order_ops._clone_dim_order.default",
               (Arg("self", T), Arg("non_blocking", B, default=False), optional("dim_order", L, None)),
               dtypes=ALL_TYPES, rule=_dtype_copy))
declare(OpDecl("aten.alias_copy.default", (Arg("self", T),), dtypes=ALL_TYPES, rule=same_shape))
declare(OpDecl("aten.constant_pad_nd.default", (Arg("self", T), Arg("pad", L), Arg("value", N, default=0)),
               dtypes=ALL_TYPES, rule=_pad))
declare(OpDecl("aten.repeat.default", (Arg("self", T), Arg("repeats", L)), dtypes=ALL_TYPES, rule=_repeat))
declare(OpDecl("aten.unfold_copy.default", (Arg("self", T), Arg("dimension", I), Arg("size", I), Arg("step", I)),
               dtypes=ALL_TYPES, rule=_unfold))
declare(OpDecl("aten.pixel_shuffle.default", (Arg("self", T), Arg("upscale_factor", I)), dtypes=ALL_TYPES,
               rule=_pixel_shuffle))  # out[.., c, h*r + i, w*r + j] = self[.., c*r*r + i*r + j, h, w]
declare(OpDecl("aten.flip.default", (Arg("self", T), Arg("dims", L)), dtypes=ALL_TYPES,
               rule=_flip))  # out[.., i, ..] = self[.., size - 1 - i, ..] along each of dims
