"""Every ```sh block of README.md runs as written, in order, in a copy of examples/ (`vkx` = the venv's
script), and writes nothing that git would see nor anything at the root but in out/; every command but
export and the benchmarks runs where torch cannot be imported, as in the runtime-only install; its ```text
blocks are installs alone. The bench scripts' bad arguments get one error line, before any work."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.llm.families import config, write_folder
from tests.llm.test_cli import write_tokenizer

from .conftest import EXAMPLES, ROOT, VKX
from .test_no_torch import BLOCK, python_path

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

# The set-up block installs Debian packages and runs the whole suite: not something a test can run.
SETUP = ["make demo   # exports examples/transformer.py, inspects it, runs it with --trace-memory",
         "make test   # the whole test suite, with Vulkan validation on"]
MODEL_FOLDER = "path/to/Llama-3.2-1B"
"""The README's Hugging Face model folder: here a two-layer Llama with random weights and a word-level tokenizer."""
SMALL = {"bench/load_memory.py": "--width 64", "bench/export.py": "--skip-executorch --rounds 1 --layers 2 --width 64",
         "bench/inspect_speed.py": "--sizes 1M,2M"}
"""Arguments added to each benchmark's line: its sizes made small enough for a test."""
INSTALLS = ("pip install ", "python -m vkx.loader.gpu.spirv ")
"""What a ```text block may hold: set-up a test does not run."""
NEEDS_TORCH = ("vkx export ", ".venv/bin/python bench/")
"""README commands that need the full install; the rest run as the runtime-only install (`vkx[tokenizer]`) would."""
IGNORED_AT_ROOT = {"out"}
"""What README commands may write at the repository root (besides examples/): a folder git ignores."""


def blocks(text: str, kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```$", text, flags=re.S | re.M)


def commands(block: str) -> list[str]:
    """A block's command lines, comments dropped."""
    return [c for c in (line.split("  #")[0].strip() for line in block.splitlines()) if c and not c.startswith("#")]


def git(*args: str, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_readme_text_blocks_are_installs_alone():
    """A command a test cannot run (an install) may sit in a ```text block; any other must be in ```sh."""
    text = (ROOT / "README.md").read_text()
    lines = [c for block in blocks(text, "text") for c in commands(block)]
    assert lines and all(c.startswith(INSTALLS) for c in lines), lines


def test_readme_commands_run_in_order(tmp_path, tmp_path_factory):
    sh = blocks((ROOT / "README.md").read_text(), "sh")
    assert sh[0].splitlines() == SETUP
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("*.pte", "*.ptd", "__pycache__"))
    # the benchmarks' lines name the venv's Python and bench/ from the root: the venv is this test's
    (tmp_path / ".venv").symlink_to(VKX.parents[1])
    (tmp_path / "bench").symlink_to(ROOT / "bench")
    folder = tmp_path / MODEL_FOLDER
    write_folder(folder, "llama", weights=True, cfg=config("llama", max_position_embeddings=512))
    write_tokenizer(folder / "tokenizer.json")
    # a repository of the copy, so that `git status` shows every file the commands write that .gitignore does not cover
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    git("init", "-q", cwd=tmp_path)
    git("add", "-A", cwd=tmp_path)
    staged = git("status", "--porcelain", "--untracked-files=all", cwd=tmp_path)
    at_root = set(os.listdir(tmp_path))
    env = {**os.environ, "VKX_VALIDATION": "1", "PATH": f"{VKX.parent}{os.pathsep}{os.environ['PATH']}"}
    blocker = tmp_path_factory.mktemp("no_torch")
    (blocker / "sitecustomize.py").write_text(BLOCK)
    runtime_only = {**env, "PYTHONPATH": python_path(blocker)}
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=runtime_only)
    assert probe.returncode == 1 and "blocked by the test" in probe.stderr, probe.stderr
    ran, without_torch = [], []
    for block in sh[1:]:
        for command in commands(block):
            bench = next((name for name in SMALL if f" {name}" in command), None)
            if bench:
                command += f" {SMALL[bench]}"
            full = command.startswith(NEEDS_TORCH)
            # pipefail: a command piped into grep or head must itself exit 0
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path,
                                  env=env if full else runtime_only, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            assert "vkx: error" not in done.stderr and "Traceback" not in done.stderr, f"{command}\n{done.stderr}"
            ran.append(bench or command.split()[1])
            if not full:
                without_torch.append(ran[-1])
    assert set(SMALL) <= set(ran) and {"generate", "perplexity"} <= set(ran), ran
    assert {"inspect", "validate", "run", "generate", "perplexity", "devices"} <= set(without_torch), without_torch
    assert (tmp_path / "examples" / "mlp.ptd").is_file() and (tmp_path / "examples" / "mlp-legacy.pte").is_file()
    assert (tmp_path / "out" / "timeline.png").is_file() and (tmp_path / "out" / "llama-int4.pte").is_file()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=tmp_path) == staged  # all written is ignored
    assert set(os.listdir(tmp_path)) - at_root <= IGNORED_AT_ROOT


def bench(script: str, *args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def error_line(done: subprocess.CompletedProcess, script: str) -> str:
    """argparse's refusal: exit 2, its usage, then one error line; no traceback, no output."""
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"{script}: error: "), done.stderr
    return last


@pytest.mark.parametrize("args, says", [
    (["--plot", "out/timeline.txt"], "not a file type matplotlib writes"),
    (["--plot", "."], "a folder, not a file"),
    (["--width", "0"], "'0' is not a whole number above 0"),
    (["--dtypes", "fp32,fp64"], "fp64: not one of"),
    (["--out", "file/sub"], "cannot make the folder file/sub"),
])
def test_load_memory_refuses_bad_arguments_before_the_work(tmp_path, args, says):
    (tmp_path / "file").write_text("")
    assert says in error_line(bench("load_memory.py", *args, cwd=tmp_path), "load_memory.py")
    assert sorted(os.listdir(tmp_path)) == ["file"]  # no folder made for an output it refuses


@pytest.mark.parametrize("args, says", [
    (["--sizes", "64Q"], "'64Q': not sizes such as 64M,1G"),
    (["--sizes", "100"], "100 bytes cannot hold 64 constants of 4 bytes"),
    (["--constants", "0"], "'0' is not a whole number above 0"),
    (["--dir", "missing"], "missing: no such folder"),
])
def test_inspect_speed_refuses_bad_arguments(tmp_path, args, says):
    assert says in error_line(bench("inspect_speed.py", *args, cwd=tmp_path), "inspect_speed.py")
