"""Prebuilt SPIR-V: every shader variant the op builders can request, compiled once with glslc at
build time into one archive shipped as package data (`vkx/shaders/spirv.zip`).

A variant is a shader and the `#define`s its builder passes (`variant_text`): element types, flags,
fused epilogues, never a shape (sizes are specialization or push constants). Every shader's builders
declare its whole variant space next to themselves (`vkx.loader.ops.variants`), and the archive is
that space, enumerated in full (docs/architecture.md, "Shader variants"). It holds one
`<shader>/<digest of the variant's text>.spv` per variant and `sources.json`, the digest of each
shader's source (with the headers it may include) it was built from. Nothing here imports Vulkan:
`python -m vkx.loader.gpu.spirv OUT` runs in the package build (setup.py) and `make shaders`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Union

import vkx.shaders
from vkx.loader import ops
from vkx.loader.errors import ShaderError

Defines = Mapping[str, Union[str, int]]
ARCHIVE = "spirv.zip"
SOURCES = "sources.json"
HEADERS = (".glslh",)
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
GLSLC_ARGS = ("-fshader-stage=compute", "--target-env=vulkan1.1", "-O")
"""SPIR-V 1.3, which every Vulkan 1.1 device accepts: every shader builds for it."""
PROGRESS_SECONDS = 3.0
"""The longest a build is silent: the whole archive takes minutes (15 on a busy 2-core machine)."""



def variant_text(defines: Defines) -> str:
    """The canonical spelling of a variant's defines: one `NAME=value` a line, sorted."""
    return "\n".join(f"{k}={v}" for k, v in sorted((str(k), str(v)) for k, v in defines.items()))



_declared: dict[str, frozenset[str]] = {}


def is_declared(shader: str, defines: Defines) -> bool:
    """Whether `defines` is one of `shader`'s declared variants (True for a shader no builder declares:
    a test's own). A miss enumerates the declaration again: a test may declare a variant after the
    first look."""
    if not ops.VARIANTS:
        ops.all_variants()  # registers every builder's declarations
    if shader not in ops.VARIANTS:
        return True
    text = variant_text(defines)
    if text not in _declared.get(shader, ()):
        _declared[shader] = frozenset(variant_text(d) for d in ops.VARIANTS[shader]())
    return text in _declared[shader]


def entry_name(shader: str, defines: Defines) -> str:
    """Where the variant's SPIR-V is in the archive."""
    return f"{shader}/{hashlib.sha256(variant_text(defines).encode()).hexdigest()[:24]}.spv"


def included(root: Path, text: bytes) -> set[str]:
    """The headers in `root` that a source includes, directly or through other headers (an include
    inside an `#if` counts: a superset of what a variant reads)."""
    found: set[str] = set()
    pending = [text]
    while pending:
        for name in INCLUDE.findall(pending.pop()):
            header = name.decode()
            if header not in found and header.endswith(HEADERS) and (root / header).is_file():
                found.add(header)
                pending.append((root / header).read_bytes())
    return found


def source_digest(root: Path, shader: str) -> str:
    """What a shader's SPIR-V is built from: glslc's arguments, its source and the headers it includes
    (editing a header rebuilds only the shaders that include it)."""
    source = (root / f"{shader}.comp").read_bytes()
    h = hashlib.sha256(" ".join(GLSLC_ARGS).encode() + b"\0" + source)  # a new target rebuilds everything
    for header in sorted(included(root, source)):
        h.update(header.encode() + b"\0" + (root / header).read_bytes())
    return h.hexdigest()


def glslc(source: Path, defines: Defines) -> bytes:
    """SPIR-V of `source` built with `defines` (headers from its folder); ShaderError on failure."""
    args = [f"-D{k}={v}" for k, v in sorted((str(k), str(v)) for k, v in defines.items())]
    cmd = ["glslc", *GLSLC_ARGS, "-I", str(source.parent), *args, str(source), "-o", "-"]
    try:
        proc = subprocess.run(cmd, capture_output=True)
    except OSError as error:
        raise ShaderError(f"glslc cannot be run ({error.strerror}): it builds {source.name}") from error
    if proc.returncode != 0:
        raise ShaderError(f"glslc failed on {source.name} {' '.join(args)}: "
                          f"{proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))  # no time stamps: the same sources, the same bytes
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _reusable(out: Path, digests: Mapping[str, str]) -> dict[str, bytes]:
    """The SPIR-V in an existing archive `out` of shaders whose sources are unchanged, by entry name."""
    try:
        with zipfile.ZipFile(out) as z:
            old = json.loads(z.read(SOURCES))
            same = {s for s, d in digests.items() if old.get(s) == d}
            return {n: z.read(n) for n in z.namelist() if n.split("/")[0] in same}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return {}


class _Progress:
    """How far a build is, on stderr: at each tenth of the variants and PROGRESS_SECONDS after the
    last report; rewritten in place on a terminal, a line each in a log."""

    def __init__(self, total: int):
        self.total, self.step = total, max(1, total // 10)
        self.began = self.last = time.perf_counter()
        self.in_place = sys.stderr.isatty()
        self.open = False
        """Whether the terminal's line is not ended yet."""

    def due(self) -> float:
        """Seconds until the next report is due."""
        return max(0.0, self.last + PROGRESS_SECONDS - time.perf_counter())

    def report(self, done: int) -> None:
        self.last = time.perf_counter()
        seconds = self.last - self.began
        text = f"vkx: compiled {done:,} of {self.total:,} shader variants ({seconds:.0f} s"
        if 0 < done < self.total:
            left = seconds / done * (self.total - done)
            text += f", about {left / 60:.0f} min left" if left >= 120 else f", about {left:.0f} s left"
        self.open = self.in_place and done < self.total
        print(f"\r{text})\x1b[K" if self.in_place else f"{text})", end="" if self.open else "\n",
              file=sys.stderr, flush=True)


def _compile(root: Path, todo: list[tuple[str, dict]], jobs: int | None, progress: bool) -> dict[str, bytes]:
    """glslc's SPIR-V of each (shader, defines) of `todo`, by entry name, `jobs` at a time (default:
    a CPU each); `progress`: how far it is (_Progress). The first failure cancels the compiles not begun."""
    finished: queue.SimpleQueue = queue.SimpleQueue()
    compiled: dict[str, bytes] = {}
    shown = _Progress(len(todo)) if progress and todo else None
    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        try:
            for shader, defines in todo:
                pool.submit(glslc, root / f"{shader}.comp", defines).add_done_callback(
                    lambda future, name=entry_name(shader, defines): finished.put((name, future)))
            for done in range(1, len(todo) + 1):
                while True:  # a report every PROGRESS_SECONDS while none finishes
                    try:
                        name, future = finished.get(timeout=shown.due() if shown else None)
                        break
                    except queue.Empty:
                        shown.report(done - 1)
                compiled[name] = future.result()
                if shown and (done % shown.step == 0 or done == len(todo) or shown.due() == 0):
                    shown.report(done)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            if shown and shown.open:
                print(file=sys.stderr)  # the error on a line of its own
            raise
    return compiled


def build(root: Path, out: Path, variants: Mapping[str, list[Defines]], jobs: int | None = None,
          progress: bool = False) -> dict:
    """Compile every variant of every shader in `root` into the archive `out` (written atomically;
    the variants of unchanged shaders are taken from the archive it replaces); `progress`: how far
    it is, on stderr (`_Progress`)."""
    missing = sorted(s for s in variants if not (root / f"{s}.comp").is_file())
    if missing:
        raise ShaderError(f"variants declared for shaders without a source in {root}: {missing}")
    digests = {s: source_digest(root, s) for s in sorted(variants)}
    reuse = _reusable(out, digests)
    work = [(shader, dict(d)) for shader, ds in sorted(variants.items()) for d in ds]
    todo = [w for w in work if entry_name(*w) not in reuse]
    compiled = _compile(root, todo, jobs, progress)
    code = {name: reuse.get(name) or compiled[name] for name in (entry_name(*w) for w in work)}
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compresslevel=9) as z:
            z.writestr(_entry(SOURCES), json.dumps(digests, indent=0))
            for name in sorted(code):
                z.writestr(_entry(name), code[name])
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return {"variants": len(work), "compiled": len(todo), "spirv_bytes": sum(map(len, code.values())),
            "archive_bytes": out.stat().st_size}


def is_current(out: Path, root: Path, variants: Mapping[str, list[Defines]]) -> bool:
    """Whether the archive `out` holds exactly `variants`, built from `root`'s sources as they are."""
    try:
        with zipfile.ZipFile(out) as z:
            sources = json.loads(z.read(SOURCES))
            names = set(z.namelist()) - {SOURCES}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False
    return (sources == {s: source_digest(root, s) for s in variants}
            and names == {entry_name(s, d) for s, ds in variants.items() for d in ds})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vkx.loader.gpu.spirv", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help=f"the archive to write (the package's shaders/{ARCHIVE})")
    parser.add_argument("--shaders", type=Path, help="the shader sources (default: the package's)")
    parser.add_argument("--if-stale", action="store_true",
                        help="leave an archive that already holds every variant of the sources as they are")
    args = parser.parse_args(argv)
    root = args.shaders or Path(vkx.shaders.__file__).parent
    began = time.perf_counter()
    variants = ops.all_variants()
    undeclared = sorted(p.stem for p in root.glob("*.comp") if p.stem not in variants)
    if undeclared:
        print(f"vkx: error: shaders no builder declares the variants of: {', '.join(undeclared)}", file=sys.stderr)
        return 2
    if args.if_stale and is_current(args.out, root, variants):
        print(f"{args.out}: current")
        return 0
    try:
        made = build(root, args.out, variants, progress=True)
    except ShaderError as error:
        print(f"vkx: error: {error}", file=sys.stderr)
        return 2
    print(f"{args.out}: {made['variants']} shader variants ({made['compiled']} compiled), "
          f"{made['spirv_bytes']:,} bytes of SPIR-V in "
          f"{made['archive_bytes']:,} bytes, {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
