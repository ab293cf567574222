"""Every ```sh block of README.md runs as written, in order, in a copy of examples/ (`vkx` = the venv's script)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from .conftest import EXAMPLES, ROOT, VKX

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

# The set-up block installs Debian packages and runs the whole suite: not something a test can run.
SETUP = ["make demo   # exports examples/transformer.py, inspects it, runs it with --trace-memory",
         "make test   # the whole test suite, with Vulkan validation on"]


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)


def git(*args: str, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_readme_commands_run_in_order(tmp_path):
    blocks = sh_blocks((ROOT / "README.md").read_text())
    assert blocks[0].splitlines() == SETUP
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("*.pte", "*.ptd", "__pycache__"))
    # a repository of the copy, so that `git status` shows every file the commands write that .gitignore does not cover
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    git("init", "-q", cwd=tmp_path)
    git("add", "-A", cwd=tmp_path)
    staged = git("status", "--porcelain", "--untracked-files=all", cwd=tmp_path)
    env = {**os.environ, "VKX_VALIDATION": "1", "PATH": f"{VKX.parent}{os.pathsep}{os.environ['PATH']}"}
    ran = 0
    for block in blocks[1:]:
        for line in block.splitlines():
            command = line.split("#")[0].strip()
            if not command:
                continue
            # pipefail: a command piped into grep or head must itself exit 0
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            assert "vkx: error" not in done.stderr, f"{command}\n{done.stderr}"
            ran += 1
    assert ran >= 10
    assert (tmp_path / "examples" / "mlp.ptd").is_file() and (tmp_path / "examples" / "mlp-legacy.pte").is_file()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=tmp_path) == staged  # all written is ignored
