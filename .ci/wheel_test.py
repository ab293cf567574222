"""The wheel tested as users get it (issue 23): built from this clone, installed into a fresh venv
without torch (with the tokenizer extra, as the README installs the runtime), with no glslc on PATH
and an empty cache folder, where `vkx inspect`, `validate`, `run`, `generate` (token ids, and a
prompt with a tokenizer) and a `vkx.load()` script run on files the dev venv exported; then `vkx[export]`
in another fresh venv exports a model; and the sdist builds.

Run by `make wheel-test` (the dev venv's Python orchestrates; nothing here imports vkx). Each step
prints one PASS or FAIL line (a failure adds the tail of its output); the exit status is 1 when any
step failed. The checks of the suite run from the source tree, where shader sources and headers
sit beside the code; only an installed wheel shows what a user gets.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / ".venv" / "bin"
TORCH = "torch==2.13.0"  # pinned first, as the Makefile does: an unpinned torch pulls a CUDA build
PROMPT_IDS = "3,14,15,92"
STEP_SECONDS = 600

LOAD = '''
import shutil, sys
import numpy as np
import vkx
assert shutil.which("glslc") is None, shutil.which("glslc")
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("torch is importable in the runtime venv")
x = np.load(sys.argv[2])
with vkx.load(sys.argv[1]) as program:
    out = program(x)
assert "torch" not in sys.modules and type(out) is np.ndarray
want = np.load(sys.argv[3])
error = float(np.abs(out - want).max())
assert error <= 1e-4 * float(np.abs(want).max()), error
print(f"max |vkx - torch| {error:.3g}")
'''

DEV_FILES = '''
import sys
from pathlib import Path
import numpy as np
import torch
root, files = (Path(a) for a in sys.argv[1:3])
sys.path[:0] = [str(root), str(files)]
from mlp import get_model
from tests.llm.families import write_folder
from tests.llm.test_cli import write_tokenizer
module, (x,) = get_model()
with torch.no_grad():
    want = module.eval()(x)
np.save(files / "x.npy", x.numpy())
np.save(files / "want.npy", want.numpy())
write_folder(files / "llama", "llama", weights=True)
write_tokenizer(files / "llama" / "tokenizer.json")
'''
"""torch's output of examples/mlp.py for its example input, and a tiny Llama checkpoint with its tokenizer
(tests/llm)."""


class Steps:
    """Runs named steps, prints PASS/FAIL lines, remembers failures."""

    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: list[str] = []

    def run(self, name: str, argv: list, env: dict | None = None, cwd: Path | None = None,
            check=None) -> subprocess.CompletedProcess | None:
        """Run `argv`; the step passes when it exits 0 and `check(done)` (if given) returns a falsy
        value or raises nothing; a string it returns is the failure's reason."""
        began = time.perf_counter()
        try:
            done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd,
                                  timeout=STEP_SECONDS)
        except subprocess.TimeoutExpired as error:
            done = subprocess.CompletedProcess(argv, -1, error.stdout or "", error.stderr or "")
            done.stdout, done.stderr = (out.decode(errors="replace") if isinstance(out, bytes) else out
                                        for out in (done.stdout, done.stderr))
        seconds = time.perf_counter() - began
        why = (f"timed out after {STEP_SECONDS} s" if done.returncode == -1 else
               f"exit {done.returncode}" if done.returncode != 0 else None)
        if why is None and check is not None:
            try:
                why = check(done) or None
            except Exception as error:  # a check that cannot read the output fails the step
                why = f"{type(error).__name__}: {error}"
        if why is None:
            self.passed.append(name)
            print(f"PASS {name} ({seconds:.1f} s)", flush=True)
            return done
        self.failed.append(name)
        print(f"FAIL {name} ({seconds:.1f} s): {why}", flush=True)
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        print("\n".join(f"    {line[:300]}" for line in tail), flush=True)
        return None


def copy_sources(into: Path) -> Path:
    """The clone's files as git sees them (tracked and untracked-not-ignored), without build outputs."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def user_env(venv: Path, cache: Path) -> dict[str, str]:
    """A user's environment: the venv's bin alone on PATH (so no glslc), a fresh cache folder,
    validation on; nothing of this shell's PYTHONPATH or VKX_* settings; the Vulkan loader's own
    variables kept (they pick the driver)."""
    env = {"PATH": str(venv / "bin"), "HOME": str(cache.parent), "XDG_CACHE_HOME": str(cache),
           "VKX_VALIDATION": "1", "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("VK_") or k in ("LD_LIBRARY_PATH",)})
    return env


def main() -> int:
    began = time.perf_counter()
    steps = Steps()
    with tempfile.TemporaryDirectory(prefix="vkx-wheel-test-") as scratch:
        work = Path(scratch)
        source, dist, files = work / "source", work / "dist", work / "files"
        for folder in (source, dist, files):
            folder.mkdir()
        copy_sources(source)
        dev_env = {**os.environ, "VKX_VALIDATION": "1"}

        # files exported by the dev venv, and torch's outputs for them
        shutil.copy(ROOT / "examples" / "mlp.py", files / "mlp.py")
        steps.run("dev venv: export examples/mlp.py", [DEV / "vkx", "export", files / "mlp.py", "-q"], env=dev_env)
        steps.run("dev venv: torch's output for mlp, a tiny Llama folder", [DEV / "python", "-c", DEV_FILES, ROOT,
                                                                              files], env=dev_env)
        steps.run("dev venv: export the tiny Llama", [DEV / "vkx", "export", files / "llama", "-o", files / "lm.pte",
                                                      "--max-seq-len", "32", "--prefill-len", "8", "-q"], env=dev_env)

        # the wheel and the sdist, from a copy of the clone (no build/ in the checkout)
        steps.run("build the wheel", [DEV / "python", "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                      "-w", dist, source])
        steps.run("build the sdist", [DEV / "python", "-c", "import sys; from setuptools import build_meta; "
                                      "print(build_meta.build_sdist(sys.argv[1]))", dist], cwd=source,
                  check=lambda done: check_sdist(dist))
        wheels = sorted(dist.glob("vkx-*.whl"))
        if not wheels:
            print("FAIL no wheel was built: nothing to install")
            return finish(steps, began)
        wheel = wheels[0]

        # the runtime as the README installs it (the tokenizer extra): a fresh venv, no torch, no glslc, an empty cache
        run_venv, run_cache = work / "run-venv", work / "run-home" / "cache"
        run_cache.mkdir(parents=True)
        steps.run("runtime venv: pip install the wheel with its tokenizer extra",
                  make_venv(run_venv, [f"{wheel}[tokenizer]"]))
        env = user_env(run_venv, run_cache)
        vkx = run_venv / "bin" / "vkx"
        steps.run("runtime venv: no torch, no glslc", [run_venv / "bin" / "python", "-c",
                  "import importlib.util, shutil; assert importlib.util.find_spec('torch') is None; "
                  "assert shutil.which('glslc') is None, shutil.which('glslc')"], env=env)
        steps.run("runtime venv: vkx inspect", [vkx, "inspect", files / "mlp.pte"], env=env, cwd=work)
        steps.run("runtime venv: vkx validate", [vkx, "validate", files / "mlp.pte"], env=env, cwd=work,
                  check=lambda done: None if done.stdout.startswith("ok ") else done.stdout)
        steps.run("runtime venv: vkx run", [vkx, "run", files / "mlp.pte", "--json", "--repeat", "2"], env=env,
                  cwd=work, check=lambda done: None if json.loads(done.stdout)["outputs"] else "no outputs")
        steps.run("runtime venv: vkx generate", [vkx, "generate", files / "lm.pte", "--prompt-ids", PROMPT_IDS,
                                                 "--max-new-tokens", "4", "--json"], env=env, cwd=work,
                  check=lambda done: None if len(json.loads(done.stdout)["tokens"]) >= 1 else done.stdout)
        steps.run("runtime venv: vkx generate --prompt --tokenizer",
                  [vkx, "generate", files / "lm.pte", "--prompt", "w3 w14 w15", "--tokenizer",
                   files / "llama" / "tokenizer.json", "--max-new-tokens", "4"], env=env, cwd=work,
                  check=lambda done: None if done.stdout.strip() else "no text")
        steps.run("runtime venv: vkx.load() matches torch", [run_venv / "bin" / "python", "-c", LOAD,
                  files / "mlp.pte", files / "x.npy", files / "want.npy"], env=env, cwd=work)

        # the exporter: vkx[export] into another fresh venv (torch pinned first)
        export_venv, export_cache = work / "export-venv", work / "export-home" / "cache"
        export_cache.mkdir(parents=True)
        steps.run("export venv: pip install torch, then vkx[export]",
                  make_venv(export_venv, [TORCH], then=[f"{wheel}[export]"]))
        env = user_env(export_venv, export_cache)
        vkx = export_venv / "bin" / "vkx"
        steps.run("export venv: vkx export", [vkx, "export", files / "mlp.py", "-o", work / "exported.pte", "-q"],
                  env=env, cwd=work)
        steps.run("export venv: vkx run the export", [vkx, "run", work / "exported.pte", "--repeat", "1"],
                  env=env, cwd=work)
    return finish(steps, began)


def make_venv(venv: Path, install: list, then: list | None = None) -> list:
    """One command that makes `venv` and pip-installs `install` (then `then`) into it."""
    pip = f"{venv}/bin/python -m pip install -q --disable-pip-version-check --no-compile"
    script = f"{sys.executable} -m venv {venv} && {pip} {' '.join(map(str, install))}"
    if then:
        script += f" && {pip} {' '.join(map(str, then))}"
    return ["bash", "-c", script]


def check_sdist(dist: Path) -> str | None:
    """The sdist holds what a wheel is built from, the shader sources and headers included."""
    (sdist,) = dist.glob("vkx-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in tar.getnames()}
    shaders = [p for pattern in ("*.comp", "*.glslh") for p in (ROOT / "shaders").glob(pattern)]
    wanted = {"pyproject.toml", "README.md"} | {f"shaders/{p.name}" for p in shaders}
    missing = sorted(wanted - names)
    return f"{sdist.name} lacks {', '.join(missing)}" if missing else None


def finish(steps: Steps, began: float) -> int:
    print(f"wheel-test: {len(steps.passed)} passed, {len(steps.failed)} failed "
          f"in {time.perf_counter() - began:.0f} s", flush=True)
    for name in steps.failed:
        print(f"  failed: {name}")
    return 1 if steps.failed else 0


if __name__ == "__main__":
    sys.exit(main())
