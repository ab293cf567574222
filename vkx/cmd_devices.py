"""`vkx devices`: the Vulkan devices vkx can use, as `--device` and VKX_DEVICE number them."""
from __future__ import annotations

import json as jsonlib

import typer
from rich.table import Table

from vkx.console import console, safe, size, user_errors

SCHEMA = "vkx.devices/1"
_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}


@user_errors
def devices(json: bool = typer.Option(False, "--json", help="Print one JSON object (schema vkx.devices/1).")) -> None:
    """List the Vulkan devices: index, name, type, memory heaps, and whether the direct upload path exists."""
    import vulkan as vk

    from vkx.loader.device import Device
    from vkx.loader.memory import Allocator

    found = []
    first = Device("0")
    count = len(vk.vkEnumeratePhysicalDevices(first.instance))
    for index in range(count):
        dev = first if index == 0 else Device(str(index))
        try:
            found.append({"index": index, "name": dev.name, "type": _TYPES.get(dev.device_type, "other"),
                          "heap_bytes": list(dev.heap_sizes),
                          "direct_upload": Allocator(dev).direct_type() is not None})
        finally:
            dev.close()
    if json:
        print(jsonlib.dumps({"schema": SCHEMA, "devices": found}))
        return
    table = Table(show_edge=False, header_style="bold")
    for column in ("index", "name", "type", "heaps", "direct upload"):
        table.add_column(column)
    for d in found:
        table.add_row(str(d["index"]), safe(d["name"]), d["type"], ", ".join(size(n) for n in d["heap_bytes"]),
                      "yes" if d["direct_upload"] else "no")
    console.print(table)
