"""Input and output names recorded in a .pte (docs/format.md, "Tensor names").

A vkx file names its delegate's inputs and outputs in one compile spec of the
VulkanBackend delegate: key `vkx.io_names`, value the UTF-8 JSON object
`{"inputs": [name | null, ...], "outputs": [...]}`, in VkGraph input/output order.
Constants are named by their named-data keys (the writer, vkx.format.writer).
"""
from __future__ import annotations

import json
from typing import Optional, Sequence

from .errors import InvalidValueError

IO_NAMES = "vkx.io_names"

Names = list[Optional[str]]


def encode_io_names(inputs: Sequence[str | None], outputs: Sequence[str | None]) -> tuple[str, bytes]:
    """The compile spec (key, value) that records the names."""
    return IO_NAMES, json.dumps({"inputs": list(inputs), "outputs": list(outputs)}, separators=(",", ":")).encode()


def json_spec(compile_specs: Sequence[tuple[str, bytes]], key: str, where: str, path: str) -> dict | None:
    """The JSON object a delegate's compile spec `key` holds; None where there is no such spec."""
    value = next((v for k, v in compile_specs if k == key), None)
    if value is None:
        return None
    try:
        data = json.loads(bytes(value).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise InvalidValueError(f"{where}.compile_specs[{key!r}]", "is not a JSON object", path)
    return data


def io_names(compile_specs: Sequence[tuple[str, bytes]], n_inputs: int, n_outputs: int,
             where: str, path: str) -> tuple[Names, Names]:
    """(input names, output names) from a delegate's compile specs; None for each where none is recorded."""
    names = json_spec(compile_specs, IO_NAMES, where, path)
    if names is None:
        return [None] * n_inputs, [None] * n_outputs
    where = f"{where}.compile_specs[{IO_NAMES!r}]"
    out = []
    for kind, n in (("inputs", n_inputs), ("outputs", n_outputs)):
        got = names.get(kind)
        if not isinstance(got, list) or len(got) != n or not all(x is None or isinstance(x, str) for x in got):
            raise InvalidValueError(where, f"{kind} must be a list of {n} names (string or null)", path)
        named = [x for x in got if x is not None]
        if len(set(named)) != len(named):
            raise InvalidValueError(where, f"{kind} repeat a name", path)
        out.append(got)
    return out[0], out[1]
