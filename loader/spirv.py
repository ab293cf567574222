"""Prebuilt SPIR-V: every shader variant the op builders can request, compiled once with glslc at
build time into one archive shipped as package data (`vkx/shaders/spirv.zip`).

A variant is a shader and the `#define`s its builder passes (`variant_text`): element types, flags,
fused epilogues, never a shape (sizes are specialization or push constants). Every shader's builders
declare its whole variant space next to themselves (`vkx.loader.ops.variants`), and the archive is
that space, enumerated in full (docs/architecture.md, "Shader variants"). It holds one
`<shader>/<digest of the variant's text>.spv` per variant and `sources.json`, the digest of each
shader's source (with the headers it may include) it was built from. Nothing here imports Vulkan:
`python -m vkx.loader.spirv OUT` runs in the package build (setup.py) and `make shaders`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
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


def build(root: Path, out: Path, variants: Mapping[str, list[Defines]], jobs: int | None = None,
          progress: bool = False) -> dict:
    """Compile every variant of every shader in `root` into the archive `out` (written atomically;
    the variants of unchanged shaders are taken from the archive it replaces); `progress`: a line on
    stderr at each tenth of the variants compiled."""
    missing = sorted(s for s in variants if not (root / f"{s}.comp").is_file())
    if missing:
        raise ShaderError(f"variants declared for shaders without a source in {root}: {missing}")
    digests = {s: source_digest(root, s) for s in sorted(variants)}
    reuse = _reusable(out, digests)
    work = [(shader, dict(d)) for shader, ds in sorted(variants.items()) for d in ds]
    todo = [w for w in work if entry_name(*w) not in reuse]
    compiled: dict[str, bytes] = {}
    began, step = time.perf_counter(), max(1, len(todo) // 10)
    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        for done, (w, code) in enumerate(zip(todo, pool.map(lambda w: glslc(root / f"{w[0]}.comp", w[1]), todo)), 1):
            compiled[entry_name(*w)] = code
            if progress and (done % step == 0 or done == len(todo)):  # a build of minutes says how far it is
                print(f"vkx: compiled {done:,} of {len(todo):,} shader variants ({time.perf_counter() - began:.0f} s)",
                      file=sys.stderr, flush=True)
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
    parser = argparse.ArgumentParser(prog="python -m vkx.loader.spirv", description=__doc__.splitlines()[0])
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
