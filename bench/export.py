"""Export benchmark: vkx export vs ExecuTorch 1.5.1 on a model with 1 GiB of fp32 weights.

The model is 16 × Linear(4096, 4096) + ReLU, batch 1 (W = 1 GiB in 32 constants).
Each measurement runs in a fresh subprocess that builds the model (seeded), notes
its RSS (the model's own footprint), imports the exporter (timed apart), exports,
and reports the export's wall time and the process's peak RSS (VmHWM from
/proc/self/status).

    python bench/export.py [--skip-executorch] [--rounds 2] [--layers 16] [--width 4096] [--out DIR]

The tools run alternately, each --rounds times, and each one's fastest run is
shown: in this VM, memory the guest touches for the first time (including page
cache) is several times slower than memory it has touched before, which would
otherwise penalise whichever tool runs first. Both write a durable file (fsync).

Goals: vkx ≥ 5× faster than ExecuTorch, and vkx's peak RSS ≤ model footprint + 10% of W.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1024 * 1024


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def build(layers: int, width: int):
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks).eval(), (torch.randn(1, width),)


def import_vkx():
    """vkx and what torch.export loads on first use (ExecuTorch's own imports load it too)."""
    import torch._dynamo  # noqa: F401
    import torch.export  # noqa: F401

    import vkx.export

    def export(model, inputs, path: Path) -> dict[str, float]:
        return vkx.export.export_model(model, inputs, path).seconds
    return export


def import_executorch():
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    def export(model, inputs, path: Path) -> dict[str, float]:
        program = torch.export.export(model, inputs)
        edge = to_edge_transform_and_lower(program, partitioner=[VulkanPartitioner()])
        with open(path, "wb") as file:
            file.write(edge.to_executorch().buffer)
            file.flush()
            os.fsync(file.fileno())  # the same durable write vkx's atomic writer makes
        return {}
    return export


def child(tool: str, layers: int, width: int, out: Path) -> None:
    """Build the model, import the exporter, export; print one JSON line of measurements."""
    import torch  # noqa: F401
    model, inputs = build(layers, width)
    footprint = status_kib("VmRSS") * 1024
    started = time.perf_counter()
    export = {"vkx": import_vkx, "executorch": import_executorch}[tool]()
    imported = time.perf_counter()
    after_imports = status_kib("VmRSS") * 1024
    path = out / f"{tool}.pte"
    stages = export(model, inputs, path)
    print(json.dumps({
        "tool": tool, "import_seconds": imported - started, "seconds": time.perf_counter() - imported,
        "stages": stages, "peak": status_kib("VmHWM") * 1024, "footprint": footprint,
        "imports": after_imports - footprint, "file": path.stat().st_size,
        "weights": sum(p.numel() * p.element_size() for p in model.parameters())}))


def measure(tool: str, args: argparse.Namespace, out: Path) -> dict:
    command = [sys.executable, __file__, "--child", tool, "--layers", str(args.layers),
               "--width", str(args.width), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{tool} run failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    (out / f"{tool}.pte").unlink()
    return result


def table(results: list[dict]) -> str:
    weights = results[0]["weights"]
    rows = [f"W = {weights / MIB:.0f} MiB of fp32 weights; model footprint (RSS after importing torch and "
            f"building the model) {results[0]['footprint'] / MIB:.0f} MiB",
            "",
            "| exporter | import s | export s | peak RSS MiB | peak − model MiB | % of W | of which imports MiB "
            "| file MiB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        over = r["peak"] - r["footprint"]
        rows.append(f"| {r['tool']} | {r['import_seconds']:.2f} | {r['seconds']:.2f} | {r['peak'] / MIB:.0f} | "
                    f"{over / MIB:.0f} | {100 * over / weights:.1f}% | {r['imports'] / MIB:.0f} | "
                    f"{r['file'] / MIB:.1f} |")
    ours = results[0]
    over = ours["peak"] - ours["footprint"]
    rows += ["", "vkx stages: " + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in ours["stages"].items()),
             f"goal peak ≤ model + 10% of W: {'met' if over <= 0.1 * weights else 'MISSED'} "
             f"({over / MIB:.0f} MiB vs {0.1 * weights / MIB:.0f} MiB; without the imports' "
             f"{ours['imports'] / MIB:.0f} MiB: {(over - ours['imports']) / MIB:.0f} MiB)"]
    if len(results) > 1:
        theirs = results[1]
        speedup = theirs["seconds"] / ours["seconds"]
        cold = (theirs["seconds"] + theirs["import_seconds"]) / (ours["seconds"] + ours["import_seconds"])
        rows += [f"goal ≥ 5× faster than ExecuTorch: {'met' if speedup >= 5 else 'MISSED'} ({speedup:.1f}× on the "
                 f"export, {cold:.1f}× with imports); ExecuTorch's peak RSS is {theirs['peak'] / ours['peak']:.2f}× "
                 f"vkx's"]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-executorch", action="store_true", help="measure vkx only")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tool, alternating; the fastest is shown")
    parser.add_argument("--out", type=Path, help="folder for the exported files [default: a temporary one]")
    parser.add_argument("--child", choices=["vkx", "executorch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name, value in (('--layers', args.layers), ('--width', args.width), ('--rounds', args.rounds)):
        if value < 1:
            parser.error(f"{name} must be at least 1, not {value}")
    if args.out is not None and not Path(args.out).is_dir():
        parser.error(f"--out {args.out}: no such folder")
    if args.child:
        child(args.child, args.layers, args.width, args.out)
        return
    tools = ["vkx"] if args.skip_executorch else ["vkx", "executorch"]
    runs: dict[str, list[dict]] = {tool: [] for tool in tools}
    with tempfile.TemporaryDirectory(dir=args.out) as folder:
        for _ in range(args.rounds):  # alternate, so no tool alone pays for memory the VM hands out first
            for tool in tools:
                runs[tool].append(measure(tool, args, Path(folder)))
    print(table([min(runs[tool], key=lambda r: r["seconds"]) for tool in tools]))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
