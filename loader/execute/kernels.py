"""The CPU-kernel bridge: a plan's KernelCall bound to a torch op, its EValues converted to torch values.

ExecuTorch calls a kernel with the op schema's arguments in order followed by
one return slot (a TensorList when the op returns several tensors). An
out-variant kernel (`aten::cumsum.out`) writes into its out tensors, which the
return slot names again. The op is `torch.ops.<namespace>.<name>.<overload>`.

At run time a plan's values are a list: torch tensors for Tensor values,
Python values for the others, except TensorList / OptionalTensorList, which stay
value ids (their tensors are looked up when a kernel runs) and IntList, whose
items are ids of Int values (resolved when the list is built).
"""
from __future__ import annotations

from typing import Any, Callable

from vkx.format import dtypes
from vkx.format.common import ScalarType
from vkx.format.program import EValue, ExecutionPlan

Getter = Callable[[list], Any]
"""The plan's run-time values -> one argument of a kernel."""


class Refused(Exception):
    """Why a KernelCall cannot run on torch (collected into one UnsupportedOpError)."""


def op_name(plan: ExecutionPlan, op_index: int) -> str:
    """`namespace::name.overload` of operators[op_index] ("default" for an empty overload)."""
    name, overload = plan.operators[op_index]
    return f"{name}.{overload or 'default'}"


def torch_dtype(st: ScalarType):
    """The torch dtype of an ExecuTorch scalar type, or None when torch has none."""
    import torch
    d = dtypes.of_scalar_type(st)
    return getattr(torch, d.name, None) if d is not None and d.is_number else None


def static_value(plan: ExecutionPlan, ev: EValue) -> Any:
    """The Python value of a non-Tensor EValue at the start of a run."""
    if ev.kind == "IntList":
        return [plan.values[i].value for i in ev.value]
    if ev.kind in ("DoubleList", "BoolList"):
        return list(ev.value)
    return ev.value


class Kernel:
    """One KernelCall, bound: `kernel(values)` runs the op on the CPU and stores what it returns."""

    def __init__(self, name: str, fn, positional: list[Getter], keywords: dict[str, Getter],
                 store: Callable[[list, Any], None]):
        self.name, self._fn = name, fn
        self._positional, self._keywords, self._store = positional, keywords, store

    def __call__(self, values: list) -> None:
        result = self._fn(*[g(values) for g in self._positional], **{k: g(values) for k, g in self._keywords.items()})
        self._store(values, result)


def bind(plan: ExecutionPlan, op_index: int, args: tuple[int, ...]) -> Kernel:
    """The KernelCall `operators[op_index](args)` bound to its torch op; raises Refused."""
    import torch
    name = op_name(plan, op_index)
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    try:
        fn = getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError):
        raise Refused(f"{name} (no such torch op)") from None
    schema = fn._schema
    want = len(schema.arguments) + (1 if schema.returns else 0)
    if len(args) != want:
        raise Refused(f"{name} ({len(args)} args, its schema has {want})")
    positional: list[Getter] = []
    keywords: dict[str, Getter] = {}
    for arg, vid in zip(schema.arguments, args):
        try:
            getter = _getter(plan, vid, str(arg.real_type))
        except Refused as why:
            raise Refused(f"{name} (argument {arg.name}: {why})") from None
        if arg.kwarg_only:
            keywords[arg.name] = getter
        else:
            positional.append(getter)
    return Kernel(name, fn, positional, keywords, _storer(plan, args[-1]) if schema.returns else _discard)


def _getter(plan: ExecutionPlan, vid: int, typ: str) -> Getter:
    ev = plan.values[vid]
    optional = typ.startswith("Optional[")
    if optional:
        typ = typ[len("Optional["):-1]
    if ev.kind == "Null" and optional:
        return lambda values: None
    kinds = {"Tensor": "Tensor", "List[Tensor]": "TensorList", "List[Optional[Tensor]]": "OptionalTensorList",
             "int": "Int", "SymInt": "Int", "ScalarType": "Int", "List[int]": "IntList", "List[SymInt]": "IntList",
             "float": "Double", "List[float]": "DoubleList", "bool": "Bool", "List[bool]": "BoolList",
             "str": "String"}
    if typ == "number":  # a Scalar
        if ev.kind not in ("Int", "Double", "Bool"):
            raise Refused(f"a {ev.kind} value for a Scalar")
    elif typ == "float" and ev.kind == "Int":
        pass  # an int where a float is declared: Python takes it as is
    elif kinds.get(typ) != ev.kind:
        raise Refused(f"a {ev.kind} value for {typ}")
    if ev.kind == "Tensor" and torch_dtype(ev.value.scalar_type) is None:
        raise Refused(f"scalar type {ev.value.scalar_type.name} has no torch dtype")
    if typ == "ScalarType":
        dtype = torch_dtype(ScalarType(ev.value)) if ev.value in ScalarType._value2member_map_ else None
        if dtype is None:
            raise Refused(f"scalar type {ev.value} has no torch dtype")
        return lambda values: dtype
    if ev.kind == "TensorList":
        ids = ev.value
        return lambda values: [values[i] for i in ids]
    if ev.kind == "OptionalTensorList":
        ids = ev.value
        return lambda values: [None if i == -1 else values[i] for i in ids]
    return lambda values: values[vid]


def _storer(plan: ExecutionPlan, vid: int) -> Callable[[list, Any], None]:
    """Stores a kernel's result in its return slot (an out variant returns its out tensors: no change)."""
    ev = plan.values[vid]
    if ev.kind == "TensorList":
        ids = ev.value

        def store_all(values: list, result) -> None:
            for i, t in zip(ids, result):
                values[i] = t
        return store_all

    def store(values: list, result) -> None:
        values[vid] = result
    return store


def _discard(values: list, result) -> None:
    pass
