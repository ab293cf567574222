"""Load a user's model file: `get_model() -> (module, example_inputs)`, plus optional weights."""
from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Callable

import torch

from vkx.export.errors import ExportError


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def load_model_file(path: str | Path) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...] | dict]:
    """Run `path` (no bytecode cache is written), call its `get_model()`, check what it returns:
    the module and its example inputs, or a dict of method name -> example inputs (or
    -> `(callable, inputs)`), as `export_model` takes."""
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"model file not found: {path}")
    source = types.ModuleType(f"_vkx_model_{abs(hash(str(path.resolve())))}")
    source.__file__ = str(path)
    sys.modules[source.__name__] = source
    try:
        exec(compile(path.read_bytes(), str(path), "exec"), source.__dict__)
    except Exception as error:
        raise ExportError(f"{path}: importing it failed: {_one_line(error)}") from error
    finally:
        sys.modules.pop(source.__name__, None)
    get_model = getattr(source, "get_model", None)
    if not callable(get_model):
        raise ExportError(f"{path} defines no get_model() function")
    try:
        returned = get_model()
    except Exception as error:
        raise ExportError(f"{path}: get_model() raised {_one_line(error)}") from error
    return check_model(returned, where=f"{path}: get_model()")


def check_model(returned: object, where: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...] | dict]:
    """Check a `(module, example_inputs)` pair; example inputs may be a tensor, a tuple/list of
    tensors, or a dict of methods (`check_methods`)."""
    expected = "must return (torch.nn.Module, tuple of example tensors) or (torch.nn.Module, dict of methods)"
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2):
        raise ExportError(f"{where} {expected}; got {type(returned).__name__}")
    module, inputs = returned
    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"{where} {expected}; its first item is a {type(module).__name__}")
    if isinstance(inputs, dict):
        check_methods(module, inputs, where)
        return module, inputs
    return module, _tensors(inputs, f"{where} {expected}; its second item is not a tuple of tensors")


Method = tuple[Callable | None, tuple[torch.Tensor, ...]]
"""A method's function (None: the module's forward) and example inputs."""


def check_methods(module: torch.nn.Module, inputs: object, where: str) -> dict[str, Method]:
    """name -> (function, example inputs) of each method; a tuple of inputs is the one method "forward"."""
    if not isinstance(inputs, dict):
        return {"forward": (None, check_model((module, inputs), where)[1])}
    if not inputs:
        raise ExportError(f"{where}: the dict of methods is empty")
    methods: dict[str, Method] = {}
    for name, spec in inputs.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ExportError(f"{where}: method name {name!r} is not an identifier")
        bad = f"{where}: method {name!r} must be example inputs or (callable, example inputs)"
        if isinstance(spec, (tuple, list)) and len(spec) == 2 and callable(spec[0]) \
                and not isinstance(spec[0], torch.Tensor):
            methods[name] = (spec[0], _tensors(spec[1], bad))
        else:
            methods[name] = (None, _tensors(spec, bad))
    return methods


def _tensors(inputs: object, message: str) -> tuple[torch.Tensor, ...]:
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ExportError(message)
    return tuple(inputs)


class _Method(torch.nn.Module):
    """A module whose forward is another function of a module: it shares that module's
    parameter, buffer and submodule dicts, so names (and state) are the module's own."""

    def forward(self, *inputs):
        return self.__dict__["_vkx_function"](*inputs)


def method_module(module: torch.nn.Module, function: Callable | None) -> torch.nn.Module:
    """The module to trace for a method (`module` itself for its forward)."""
    if function is None:
        return module
    bound = getattr(function, "__self__", None)
    if isinstance(bound, torch.nn.Module) and bound is not module:
        # export_model may have converted the caller's module: call the same function on the converted one
        function = getattr(module, function.__name__)
    view = _Method.__new__(_Method)
    view.__dict__.update(module.__dict__)
    view.__dict__["_vkx_function"] = function
    return view


def load_weights(module: torch.nn.Module, checkpoint: str | Path) -> None:
    """Copy a safetensors state dict into `module`, one tensor at a time (never a second full copy).

    A tied tensor needs to be stored under one of its names only.
    """
    from safetensors import SafetensorError, safe_open

    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        raise ExportError(f"weights file not found: {checkpoint}")
    targets = module.state_dict(keep_vars=True)
    try:
        with safe_open(str(checkpoint), framework="pt") as stored:
            keys = set(stored.keys())
            stored_ids = {id(targets[name]) for name in keys & set(targets)}
            missing = sorted(name for name in set(targets) - keys if id(targets[name]) not in stored_ids)
            unexpected = sorted(keys - set(targets))
            if missing or unexpected:
                raise ExportError(
                    f"{checkpoint} does not match the model: "
                    f"missing {_names(missing)}, unexpected {_names(unexpected)}")
            with torch.no_grad():
                for name in sorted(keys):
                    tensor = stored.get_tensor(name)
                    target = targets[name]
                    if tuple(tensor.shape) != tuple(target.shape):
                        raise ExportError(
                            f"{checkpoint}: {name} has shape {tuple(tensor.shape)}, "
                            f"the model wants {tuple(target.shape)}")
                    target.copy_(tensor)
                    del tensor
    except SafetensorError as error:
        raise ExportError(f"{checkpoint}: not a readable safetensors file ({_one_line(error)})") from error


def _names(names: list[str], shown: int = 3) -> str:
    if not names:
        return "none"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
