"""Load a user's model file: `get_model() -> (module, example_inputs)`, plus optional weights."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

from vkx.export.errors import ExportError


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def load_model_file(path: str | Path) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Run `path` (no bytecode cache is written), call its `get_model()`, check what it returns."""
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


def check_model(returned: object, where: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Check a `(module, example_inputs)` pair; example inputs may be a tensor or a tuple/list of tensors."""
    expected = "must return (torch.nn.Module, tuple of example tensors)"
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2):
        raise ExportError(f"{where} {expected}; got {type(returned).__name__}")
    module, inputs = returned
    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"{where} {expected}; its first item is a {type(module).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ExportError(f"{where} {expected}; its second item is not a tuple of tensors")
    return module, tuple(inputs)


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
