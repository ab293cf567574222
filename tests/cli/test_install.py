"""The first hour (issue 43): the shader archive's build says how far it is; a checkout without the
archive says so in one line; the runtime-only install that the README gives has the tokenizer extra."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib

import pytest

from vkx.loader.gpu import spirv

from .conftest import ROOT, one_error_line

NO_ARCHIVE = """import sys
from pathlib import Path
from vkx.loader.gpu import shaders
shaders._prebuilt = shaders.Prebuilt(Path(sys.argv[1]))  # a checkout before `make shaders`
from vkx.cli import main
main(sys.argv[2:])
"""
"""`vkx ARGS...` with the package's archive at argv[1] (a path with no file)."""


def test_the_shader_build_says_how_far_it_is_every_few_seconds(tmp_path, monkeypatch, capsys):
    """The whole archive takes minutes (15 on a busy 2-core machine): a count of the variants done at
    least every PROGRESS_SECONDS, also while a tenth of them is not done yet."""
    fake = tmp_path / "bin" / "glslc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nsleep 0.5\nprintf 'SPIR-V'\n")  # a slow compiler
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(spirv, "PROGRESS_SECONDS", 0.1)
    (tmp_path / "s.comp").write_text("#version 450\nvoid main() {}\n")
    began = time.perf_counter()
    made = spirv.build(tmp_path, tmp_path / spirv.ARCHIVE, {"s": [{"V": i} for i in range(4)]}, jobs=1, progress=True)
    seconds = time.perf_counter() - began
    lines = capsys.readouterr().err.splitlines()
    assert made["compiled"] == 4
    assert all(re.fullmatch(r"vkx: compiled \d of 4 shader variants \(\d+ s(, about \d+ s left)?\)", line)
               for line in lines), lines
    assert lines[-1].startswith("vkx: compiled 4 of 4 ")
    assert len(lines) >= seconds / 0.1 / 2, (seconds, lines)  # 4 lines, one a variant, before


def no_archive(*args, glslc: bool, tmp_path) -> subprocess.CompletedProcess:
    """`vkx args` in a checkout without the shader archive, with or without glslc, a fresh cache."""
    env = {k: v for k, v in os.environ.items() if k != "VKX_SHADER_PATH"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), VKX_VALIDATION="1")
    if not glslc:
        env["PATH"] = str(tmp_path)  # nothing to run there
    return subprocess.run([sys.executable, "-c", NO_ARCHIVE, str(tmp_path / "spirv.zip"), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.vulkan
def test_no_archive_and_no_glslc_say_make_shaders_in_one_line(exported, tmp_path):
    line = one_error_line(no_archive("run", exported / "mlp.pte", glslc=False, tmp_path=tmp_path))
    assert line == f"vkx: error: no shader archive ({tmp_path / 'spirv.zip'}) and no glslc: `make shaders` builds it"


@pytest.mark.vulkan
def test_no_archive_with_glslc_says_so_once(exported, tmp_path):
    done = no_archive("run", exported / "mlp.pte", "--repeat", 1, glslc=True, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "shader archive" in line]
    assert said == [f"vkx: no shader archive ({tmp_path / 'spirv.zip'}): glslc compiles the shaders at load, "
                    "once each (`make shaders` builds the archive)"], done.stderr


def test_the_runtime_install_has_the_tokenizer_extra():
    """`vkx generate --prompt ... --tokenizer` needs tokenizers alone: the README's runtime-only install
    names the extra that brings it, and every extra the README names exists."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["tokenizer"] == ["tokenizers>=0.20"]
    assert "vkx[tokenizer]" in extras["llm"]
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^pip install 'vkx\[tokenizer\]' .*generate", readme, flags=re.M)
    named = {e for group in re.findall(r"pip install (?:-e )?'(?:vkx|\.)\[([a-z,]+)\]'", readme) for e in group.split(",")}
    assert "tokenizer" in named and named <= set(extras), named - set(extras)
