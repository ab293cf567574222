"""`vkx inspect` and `vkx validate`: look inside a .pte without torch or Vulkan.

Every string that comes from the file (keys, op names, backend ids, paths) goes
through `safe()`: a crafted file cannot reach the terminal with escape sequences
or rich markup.
"""
from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Any, List

import typer
from rich.table import Table

from vkx import paths
from vkx.console import console, fail, note, safe, size, user_errors
from vkx.format.describe import EAGER_PEAK, IMPORT_ALIGNMENT, LAZY_PEAK, SCHEMA as DESCRIBE_SCHEMA, describe
from vkx.format.errors import VkxError
from vkx.format.validate import validate as validate_file

VALIDATE_SCHEMA = "vkx.validate/1"
FILE = typer.Argument(..., metavar="FILE", hidden=True)  # each command's docstring says what it is
EXTERNAL = typer.Option([], "--external-data", metavar="FILE",
                        help="A .ptd or .safetensors file with named data (repeatable) "
                             "[default: FILE's same-stem .ptd/.safetensors when FILE needs one].")


def _size(n: int) -> str:
    return f"{size(n)} ({n:,} B)" if n >= 1024 else f"{n} B"


def _table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for c in columns:
        t.add_column(c, justify="right" if c in ("#", "offset", "size", "align", "bytes", "count", "id") else "left")
    return t


def _used(user: str) -> str:
    return "named " + safe(user.removeprefix("named_data ")) if user.startswith("named_data ") else safe(user)


def _print(d: dict[str, Any], tensors: bool) -> None:
    f, h = d["file"], d["header"]
    console.print(f"[bold]{safe(f['path'])}[/]  {_size(f['bytes'])}")
    if h:
        console.print(f"program {_size(h['program_size'])}, segments at {h['segment_base_offset']} "
                      f"({_size(h['segment_data_size'])})")
    else:
        console.print("no extended header (plain FlatBuffer, no segments)")
    seg = _table("Segments", "#", "offset", "size", "align", "used by")
    for s in d["segments"]:
        seg.add_row(str(s["index"]), str(s["offset"]), _size(s["size"]), str(s["alignment"]),
                    ", ".join(_used(u) for u in s["used_by"]) or "[red]unused[/]")
    console.print(seg)
    for e in d["external"]:
        recorded = " (recorded by the program)" if e["recorded"] else ""
        console.print(f"external {e['kind']}: {safe(e['path'])}  {_size(e['bytes'])}, {e['entries']} entries{recorded}")
    if d["external"] or len(d["files"]) > 1:
        by_file = _table("Weights by file", "file", "count", "bytes")
        for f in d["files"]:
            by_file.add_row(safe(f["file"]), str(f["tensors"]), _size(f["bytes"]))
        console.print(by_file)
    graphs = [x["vulkan"] for x in d["delegates"] if x["vulkan"] is not None]
    missing = {c["key"] for v in graphs for c in v["graph"]["constants"] if c["location"] == "missing"}
    if missing:
        console.print(f"[red]needs external data:[/] {len(missing)} named key(s) are in no file given "
                      "(pass --external-data FILE)")
    if not d["delegates"]:
        console.print("no delegate: every op of the program is a CPU op")
    elif not graphs:
        found = ", ".join(safe(x["id"]) for x in d["delegates"])
        console.print(f"[red]no VulkanBackend delegate[/] (delegates: {found})")
        return
    for plan in d["program"]["plans"]:
        if len(plan["calls"]) > 1 or plan["cpu_ops"]:
            calls = _table(f"Plan {safe(plan['name'])}: {len(plan['calls'])} instructions", "#", "kind", "calls", "args")
            for c in plan["calls"]:
                what = c.get("op") or (f"delegate {c['delegate']}" if "delegate" in c else
                                       f"to {c['destination']}" if "destination" in c else "")
                calls.add_row(str(c["index"]), c["kind"], safe(str(what)), str(c["args"]))
            console.print(calls)
    for v in graphs:
        g = v["graph"]
        console.print(f"\n[bold]VulkanBackend[/] delegate {v['index']} of plan {v['plan']}: blob {_size(v['blob']['size'])} "
                      f"at {v['blob']['offset']}, VkGraph {_size(v['vh00']['flatbuffer_size'])}, "
                      f"legacy section {_size(v['legacy_section']['size'])}")
        console.print(f"{g['values']} values, {g['chain_length']} ops, {v['totals']['constants']} constants "
                      f"({safe(g['constant_layout'])})")
        ops = _table("Ops", "op", "count")
        for name, n in g["ops"].items():
            ops.add_row(safe(name), str(n))
        console.print(ops)
        if g["quantized"]:
            quantized = _table("Quantized weights", "role", "bits", "group", "scales", "weights")
            for q in g["quantized"]:
                quantized.add_row(q["role"], str(q["bits"]), str(q["group_size"]), q["scales"], str(q["weights"]))
            console.print(quantized)
        io = _table("Inputs / outputs", "", "id", "name", "dtype", "dims")
        for kind in ("inputs", "outputs"):
            for t in g[kind]:
                io.add_row(kind[:-1], str(t["id"]), safe(t["name"] or "-"), safe(t.get("dtype", t.get("kind", ""))),
                           str(t.get("dims", "")))
        console.print(io)
        legacy = [c for c in g["constants"] if c["location"] == "legacy"]
        if tensors and legacy:
            console.print(f"{len(legacy)} legacy constants in the delegate blob (no names): ids "
                          f"{', '.join(str(c['id']) for c in legacy)}")
    if tensors:
        _print_tensors(d["tensors"])
    _print_methods(d)
    console.print(memory_table(d["totals"]))


def memory_table(t: dict[str, int]) -> Table:
    """The load-memory estimates of describe()'s totals, each with what it means."""
    tot = _table("Load memory", "", "bytes", "meaning")
    for name, meaning in (("W", f"weights: {t['constants']} constants, each stored tensor once"),
                          ("w", "largest constant"),
                          ("A", "activations the plan needs (shared memory objects)"), ("A_live", "peak live activations"),
                          ("IO", "input and output buffers"),
                          ("state", "state tensors (kept across calls)"),
                          ("peak_lazy", f"{LAZY_PEAK} (lazy load, the default)"),
                          ("peak_eager", f"{EAGER_PEAK} (eager load)"),
                          ("import_ready_bytes", _importable(t))):
        tot.add_row(name, _size(t[name]), meaning)
    return tot


def _importable(t: dict[str, int]) -> str:
    """What `vkx run --upload import` does with the file: every constant is used in place or it refuses."""
    where = f"file offset a multiple of {IMPORT_ALIGNMENT} B"
    if t["import_ready"] == t["constants"]:
        return f"all {t['constants']} constants importable in place ({where}): --upload import can load it"
    return (f"in {t['import_ready']} of {t['constants']} constants importable in place ({where}): "
            "--upload import refuses this file (the other uploads copy)")


def _print_tensors(tensors: list[dict[str, Any]]) -> None:
    """The stored tensors by name (each name of a tied tensor after "="), as gguf-dump lists them."""
    table = _table(f"Tensors: {len(tensors)}", "#", "name", "dtype", "shape", "bytes", "where")
    for i, t in enumerate(tensors):
        where = "pte" if t["file"] == "pte" else Path(t["file"]).name
        table.add_row(str(i), " = ".join(safe(n) for n in t["names"]), safe(t["dtype"] or "-"),
                      "x".join(map(str, t["dims"])) if t["dims"] is not None else "-", _size(t["bytes"]),
                      f"{safe(where)} @{t['offset']}" + ("" if t["users"] else " [yellow]unused[/]"))
    console.print(table)


def _print_methods(d: dict[str, Any]) -> None:
    """The methods (with several, or with state) and the state tensors."""
    if len(d["methods"]) < 2 and not d["states"]:
        return
    if len(d["methods"]) > 1:
        console.print(f"\n[bold]{len(d['methods'])} methods[/], weights shared: W counts each constant once")
    ms = _table("Methods", "method", "inputs", "outputs", "state", "constants", "A")
    for m in d["methods"]:
        def io(ts):
            return ", ".join(f"{safe(t.get('dtype', t.get('kind', '')))}{t.get('dims', '')}" for t in ts)
        ms.add_row(safe(m["name"]), io(m["inputs"]), io(m["outputs"]), str(len(m["states"])),
                   str(len(m["constants"])), _size(m["A"]))
    console.print(ms)
    if d["states"]:
        st = _table("State", "name", "dtype", "dims", "bytes", "initial", "methods")
        for x in d["states"]:
            st.add_row(safe(x["name"]), safe(x["dtype"]), str(x["dims"]), _size(x["bytes"]),
                       safe(x["initial"] or "-"), ", ".join(safe(m) for m in x["methods"]))
        console.print(st)


def _inputs(file: Path, external: list[Path], complete: bool) -> list[Path]:
    """Check the paths; add the same-stem external data beside FILE when it needs it (and say so on stderr).

    `complete`: fail, saying what to do, when FILE's constants are in external data that is not there.
    """
    paths.program_file(file)
    external, found = paths.with_external(file, paths.external_files(external))
    if complete:
        paths.require_external(file, external)
    if found is not None:
        note(f"using external data {found} (found beside {file})")
    return external


@user_errors
def inspect(
    file: Path = FILE,
    external_data: List[Path] = EXTERNAL,
    json: bool = typer.Option(False, "--json", help="Print the describe() report as one line of JSON "
                                                    f"(schema {DESCRIBE_SCHEMA})."),
    tensors: bool = typer.Option(False, "--tensors", help="Also list every stored tensor by name."),
) -> None:
    """Show what is inside the .pte FILE: segments, delegate, VkGraph, constants, load-memory estimates."""
    d = describe(file, _inputs(file, external_data, complete=False))
    if json:
        print(jsonlib.dumps(d))
    else:
        _print(d, tensors)


@user_errors
def validate(
    file: Path = FILE,
    external_data: List[Path] = EXTERNAL,
    json: bool = typer.Option(False, "--json",
                              help=f"Print one JSON object (schema {VALIDATE_SCHEMA}), also on failure."),
) -> None:
    """Check the .pte FILE (and its external data) against every rule of the file format; exit 2 on the first
    problem."""
    try:
        external = _inputs(file, external_data, complete=True)
        r = validate_file(file, external)
    except VkxError as error:
        if json:
            print(jsonlib.dumps({"schema": VALIDATE_SCHEMA, "ok": False, "path": str(file), "error": str(error)}))
        fail(error)
    constants = describe(file, external)["totals"]["constants"]  # one meaning: what export and inspect count
    if json:
        print(jsonlib.dumps({"schema": VALIDATE_SCHEMA, "ok": True, "path": r.path, "external": r.external,
                             "segments": r.segments, "named_data": r.named_data, "delegates": r.delegates,
                             "cpu_ops": r.cpu_ops, "constants": constants,
                             "constant_bytes": r.constant_bytes, "layout": r.layout, "warnings": r.warnings}))
        return
    # One line each, however long the path: scripts read them line by line.
    console.print(f"[green]ok[/] {safe(r.path)}: {r.segments} segments, {r.delegates} delegate(s), "
                  f"{constants} constants ({_size(r.constant_bytes)}, {safe(r.layout)})", soft_wrap=True)
    if r.cpu_ops:
        console.print(f"CPU ops: {', '.join(safe(op) for op in r.cpu_ops)}", soft_wrap=True)
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {safe(w)}")

