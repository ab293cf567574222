"""`vkx inspect` and `vkx validate`: look inside a .pte without torch or Vulkan."""
from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Any, List

import typer
from rich.filesize import decimal
from rich.table import Table

from vkx.console import console, user_errors

FILE = typer.Argument(..., help="The .pte file.", exists=False, dir_okay=False)
EXTERNAL = typer.Option([], "--external-data", help="A .ptd or .safetensors file with named data (repeatable).")


def _size(n: int) -> str:
    return f"{decimal(n)} ({n:,} B)" if n >= 1000 else f"{n} B"


def _table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for c in columns:
        t.add_column(c, justify="right" if c in ("#", "offset", "size", "align", "bytes", "count", "id") else "left")
    return t


def _short(key: str | None, n: int = 16) -> str:
    if key is None:
        return "-"
    return key if len(key) <= n + 1 else key[:n] + "…"


def _used(user: str) -> str:
    return "named " + _short(user.removeprefix("named_data ")) if user.startswith("named_data ") else user


def _print(d: dict[str, Any], tensors: bool) -> None:
    f, h = d["file"], d["header"]
    console.print(f"[bold]{f['path']}[/]  {_size(f['bytes'])}")
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
        console.print(f"external {e['kind']}: {e['path']}  {_size(e['bytes'])}, {e['entries']} entries")
    v = d["vulkan"]
    if v is None:
        console.print("[red]no VulkanBackend delegate[/]")
        return
    g = v["graph"]
    console.print(f"\n[bold]VulkanBackend[/] blob {_size(v['blob']['size'])} at {v['blob']['offset']}, "
                  f"VkGraph {_size(v['vh00']['flatbuffer_size'])}, legacy section {_size(v['legacy_section']['size'])}")
    console.print(f"{g['values']} values, {g['chain_length']} ops, {len(g['constants'])} constants ({g['constant_layout']})")
    ops = _table("Ops", "op", "count")
    for name, n in g["ops"].items():
        ops.add_row(name, str(n))
    console.print(ops)
    io = _table("Inputs / outputs", "", "id", "dtype", "dims")
    for kind in ("inputs", "outputs"):
        for t in g[kind]:
            io.add_row(kind[:-1], str(t["id"]), t.get("dtype", t.get("kind", "")), str(t.get("dims", "")))
    console.print(io)
    if tensors:
        ct = _table("Constants", "id", "dtype", "dims", "bytes", "key", "where")
        for c in g["constants"]:
            ct.add_row(str(c["id"]), str(c["dtype"]), str(c["dims"]), _size(c["bytes"]), _short(c["key"]), c["location"])
        console.print(ct)
    t = d["totals"]
    tot = _table("Load memory (bytes)", "", "bytes", "meaning")
    for name, meaning in (("W", "constant bytes"), ("w", "largest constant"),
                          ("A", "activations (shared objects, 4 B/elem)"), ("A_live", "peak live activations"),
                          ("peak_old", "2W + A + w (eager load)"), ("peak_lazy", "W + max(A, 2w) (lazy load)"),
                          ("import_ready_bytes", f"in {t['import_ready']} constants on 4096 B (importable in place)")):
        tot.add_row(name, _size(t[name]), meaning)
    console.print(tot)


@user_errors
def inspect(
    file: Path = FILE,
    external_data: List[Path] = EXTERNAL,
    json: bool = typer.Option(False, "--json", help="Print the describe() report as JSON (schema vkx.describe/1)."),
    tensors: bool = typer.Option(False, "--tensors", help="Also list every constant tensor."),
) -> None:
    """Show what is inside a .pte: segments, delegate, VkGraph, constants, load-memory estimates."""
    from vkx.format.describe import describe

    d = describe(file, external_data)
    if json:
        print(jsonlib.dumps(d, indent=1))
    else:
        _print(d, tensors)


@user_errors
def validate(file: Path = FILE, external_data: List[Path] = EXTERNAL) -> None:
    """Check a .pte (and its external data) against every rule of docs/format.md; exit 2 on the first problem."""
    from vkx.format.validate import validate as run

    r = run(file, external_data)
    console.print(f"[green]ok[/] {r.path}: {r.segments} segments, {r.constants} constants "
                  f"({_size(r.constant_bytes)}, {r.layout})")
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {w}")
