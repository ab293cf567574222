"""Checks on the files a command is given, made before torch or Vulkan is imported.

Each failure is a `UsageError` (a `VkxError`): the CLI prints one line and exits 2.
The messages name the kind of file given when it is the wrong kind.
"""
from __future__ import annotations

import os
import resource
from enum import Enum
from pathlib import Path
from typing import Iterable, NamedTuple

from vkx.console import size
from vkx.format import ProgramFile, dtypes, vkgraph as vk
from vkx.format.external import EXTERNAL_SUFFIXES, find_external, missing_keys
from vkx.format.errors import FormatError, VkxError
from vkx.format.methods import is_method, methods
from vkx.format.names import io_names

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")


class UsageError(VkxError):
    """A command was given a path or option value it cannot use."""


def choices(name: str, values: Iterable[str]) -> type[Enum]:
    """An option's choices as typer takes them: a str Enum whose members are named as their values."""
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]


ADDRESS_SPACE = 1 << 30
"""The least address space (`ulimit -v`) a command that imports torch or opens a Vulkan device starts
with. Below it their native code may end the process, where no handler can catch it: torch aborted
(std::bad_alloc) exporting examples/mlp.py under 700 MiB; there lavapipe double-freed inside
vkCreateDevice (`vkx run`, 2 of 12 runs) and NVIDIA's driver ended `vkx run` with code 130 and no
message. At 1 GiB lavapipe ran 20 of 20."""


def check_address_space(command: str, needs: str) -> None:
    """Refuse `command` in one line where `ulimit -v` allows less than ADDRESS_SPACE (`needs`: for what)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < ADDRESS_SPACE:
        raise UsageError(f"{command} needs an address space of at least {size(ADDRESS_SPACE)} for {needs}; "
                         f"ulimit -v allows {size(soft)}")


def _exists(path: Path, what: str) -> None:
    if not path.exists():
        raise UsageError(f"{what} not found: {path}")


def model_file(path: Path) -> Path:
    """The .py file `vkx export` runs."""
    if path.is_dir() or path.suffix.lower() in CHECKPOINT_SUFFIXES:
        kind = "a folder" if path.is_dir() else f"a {path.suffix} file"
        raise UsageError(f"{path} is {kind}: vkx export takes a .py file defining get_model(); "
                         "for a checkpoint use --weights")
    _exists(path, "model file")
    if path.suffix.lower() == ".pte":
        raise UsageError(f"{path} is already a .pte program: vkx inspect or vkx run it")
    return path


def program_file(path: Path) -> Path:
    """The .pte that `inspect`, `validate` and `run` read."""
    _exists(path, "file")
    suffix = path.suffix.lower()
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a .pte file")
    if suffix == ".py":
        raise UsageError(f"{path} is a model file: run vkx export first")
    if suffix in EXTERNAL_SUFFIXES:
        raise UsageError(f"{path} is a {suffix} (external data), not a program: pass it with --external-data")
    return path


def external_files(paths: Iterable[Path]) -> list[Path]:
    """The --external-data files: each an existing .ptd or .safetensors file."""
    out = []
    for p in paths:
        _exists(p, "external data file")
        if p.is_dir():
            raise UsageError(f"--external-data {p} is a directory, not a .ptd or .safetensors file")
        out.append(p)
    return out


def with_external(program: Path, external: list[Path]) -> tuple[list[Path], Path | None]:
    """The external data to use: those given, else the files the .pte records, else the same-stem
    file beside the .pte when it needs one.

    The second item is the file found beside it (the caller says so), else None.
    """
    with ProgramFile.open(program) as pf:
        return find_external(pf, external)


def require_external(program: Path, external: list[Path]) -> None:
    """With no external data to use, fail with what to do when the .pte's named constants are not all in it."""
    if external:
        return
    with ProgramFile.open(program) as pf:
        missing = missing_keys(pf)
    if missing:
        raise UsageError(f"{program}: its constants are in external data ({len(missing)} named key(s) "
                         "not in the file, none beside it): pass --external-data FILE")


def loadable(program: Path, external: Iterable[Path]) -> tuple[list[Path], Path | None]:
    """What `run` and `generate` check before loading: the .pte, its external data (given, or found
    beside it: the second item) and that none it needs is missing."""
    program_file(program)
    files, beside = with_external(program, external_files(external))
    require_external(program, files)
    return files, beside


def method_names(program: Path) -> list[str]:
    """The methods `vkx.load` gives the .pte, read from its header: each plan of a file of several
    methods, else the first plan."""
    with ProgramFile.open(program) as pf:
        plans = [plan.name for plan in pf.program.execution_plan]
        return plans if methods(pf) is not None else plans[:1]


class FileInput(NamedTuple):
    """A method's input as its file declares it."""
    name: str | None
    """Its name in the model (None: the file records none)."""
    shape: tuple[int, ...]
    dtype: dtypes.DType
    """Its host dtype (the staging dtype, else its own): what the loaded method is given."""


def method_inputs(program: Path, method: str) -> list[FileInput] | None:
    """The inputs of `method` (one of `method_names`) read from the header, as the loaded method takes them;
    None where its plan is not one VulkanBackend delegate call (an ExecuTorch plan with CPU ops or several
    delegates, whose inputs its load gives) or an input is not a tensor of a dtype (the load says what is wrong)."""
    with ProgramFile.open(program) as pf:
        pi, plan = next((i, p) for i, p in enumerate(pf.program.execution_plan) if p.name == method)
        if not is_method(plan):
            return None
        v = pf.vulkan_delegate(pi, 0)
        graph = v.graph
        names, _ = io_names(v.compile_specs, len(graph.input_ids), len(graph.output_ids),
                            f"execution_plan[{pi}].delegates[0]", pf.path)
    out = []
    for vid, name in zip(graph.input_ids, names):
        t = graph.values[vid] if 0 <= vid < len(graph.values) else None
        if not isinstance(t, vk.Tensor):
            return None
        try:
            host = dtypes.of(t.host_datatype)
        except FormatError:  # no element type: the load refuses the file, naming the value
            return None
        out.append(FileInput(name, tuple(t.dims), host))
    return out


def is_same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (same inode, or the same resolved path for one not yet made)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def output_file(path: Path, option: str, what: str, suffixes: tuple[str, ...], inputs: Iterable[Path]) -> Path:
    """A file a command writes (`what` names it in messages): right suffix, in an existing folder,
    not a directory, none of the command's inputs."""
    if path.is_dir():
        raise UsageError(f"{option} {path}: output is a directory")
    if path.suffix.lower() not in suffixes:
        raise UsageError(f"{option} {path}: {what} must be a {' or '.join(suffixes)} file, "
                         f"for example {path.with_suffix(suffixes[0]).name}")
    if not path.parent.is_dir():
        raise UsageError(f"{option} {path}: output directory does not exist: {path.parent}")
    for source in inputs:
        if is_same_file(path, source):
            raise UsageError(f"{option} {path} is {source}, an input of this command: it would be overwritten")
    return path


__all__ = ["UsageError", "model_file", "program_file", "external_files", "with_external", "require_external",
           "method_names", "FileInput", "method_inputs", "output_file"]
