"""`vkx devices`: the Vulkan devices vkx can use, as `--device` and VKX_DEVICE number them."""
from __future__ import annotations

import json as jsonlib
from typing import Optional

import typer
from rich.table import Table

from vkx import paths
from vkx.cmd_run import Profile
from vkx.console import console, safe, size, user_errors

SCHEMA = "vkx.devices/1"
_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}


@user_errors
def devices(json: bool = typer.Option(False, "--json", help=f"Print one JSON object (schema {SCHEMA})."),
            profile: Optional[Profile] = typer.Option(
                None, "--profile", metavar="NAME",
                help=f"Show the limits in force under this device profile: {', '.join(p.value for p in Profile)} "
                     "[default: VKX_DEVICE_PROFILE].")) -> None:
    """List the Vulkan devices: index, name, type, memory heaps, whether the direct upload path exists,
    and the device profile in force with the limits kernels are chosen from."""
    paths.check_address_space("vkx devices", "the Vulkan driver")
    import vulkan as vk

    from vkx.loader.gpu.device import Device
    from vkx.loader.gpu.memory import Allocator

    found = []
    name = profile.value if profile else None
    first = Device("0", profile=name)
    count = len(vk.vkEnumeratePhysicalDevices(first.instance))
    for index in range(count):
        dev = first if index == 0 else Device(str(index), profile=name)
        try:
            found.append({"index": index, "name": dev.name, "type": _TYPES.get(dev.device_type, "other"),
                          "heap_bytes": list(dev.heap_sizes),
                          "direct_upload": Allocator(dev).direct_type() is not None,
                          "profile": dev.profile, "limits": dev.limits.describe()})
        finally:
            dev.close()
    if json:
        print(jsonlib.dumps({"schema": SCHEMA, "devices": found}))
        return
    table = Table(show_edge=False, header_style="bold")
    for column in ("index", "name", "type", "heaps", "direct upload", "profile"):
        table.add_column(column)
    for d in found:
        table.add_row(str(d["index"]), safe(d["name"]), d["type"], ", ".join(size(n) for n in d["heap_bytes"]),
                      "yes" if d["direct_upload"] else "no", d["profile"] or "none")
    console.print(table)
    for d in found:
        console.print(f"device {d['index']}, limits in force: {_limits(d['limits'])}", highlight=False)


def _limits(limits: dict) -> str:
    """The limits kernels are chosen from: Vulkan version, storage buffers, binding range, alignment, workgroup, shared memory, features."""
    return (f"Vulkan {limits['apiVersion']}, {limits['maxPerStageDescriptorStorageBuffers']} storage buffers a "
            f"stage, binding range {size(limits['maxStorageBufferRange'])}, offset alignment "
            f"{limits['minStorageBufferOffsetAlignment']}, workgroup {limits['maxComputeWorkGroupInvocations']} "
            f"invocations, shared memory {size(limits['maxComputeSharedMemorySize'])}, subgroup "
            f"{limits['subgroupSize']}; features: {', '.join(limits['features']) or 'none of the optional ones'}")
