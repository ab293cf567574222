"""CLI tests run the real console script, `vkx` beside the test interpreter, in a subprocess; a
successful export whose child process nothing checks (a fixture's, or one whose printed lines are
checked) runs in this process (`vkx_here`), which saves the child's import of torch."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vkx.cli import app

VKX = Path(sys.executable).parent / "vkx"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def vkx(*args, cwd: Path | None = None, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    """Run `vkx args...`; text output, never raises on a non-zero exit."""
    environment = {**os.environ, "VKX_VALIDATION": "1", **env}
    return subprocess.run([str(VKX), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=environment)


def vkx_here(*args) -> subprocess.CompletedProcess:
    """`vkx args...` run in this process (typer's CliRunner), as `vkx` gives it: for exports that
    succeed, whose output is checked but not their process (exit codes and error lines: `vkx`)."""
    done = CliRunner().invoke(app, list(map(str, args)))
    stderr = done.stderr + (f"{type(done.exception).__name__}: {done.exception}"
                            if done.exception and not isinstance(done.exception, SystemExit) else "")
    return subprocess.CompletedProcess(["vkx", *map(str, args)], done.exit_code, done.stdout, stderr)


def on_a_terminal(*args: str, stdout_too: bool = False, timeout: int = 300) -> tuple[str, int]:
    """What `vkx args` writes to a pseudo-terminal on stderr (and stdout with `stdout_too`; else
    stdout is a pipe), and its exit code."""
    leader, follower = pty.openpty()
    env = {**os.environ, "VKX_VALIDATION": "1", "COLUMNS": "100"}
    proc = subprocess.Popen([str(VKX), *args], stdout=follower if stdout_too else subprocess.PIPE,
                            stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.communicate(timeout=timeout)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace"), proc.returncode


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The stderr of a failed command, checked to be one `vkx: error:` line with exit code 2."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vkx: error: "), done.stderr
    assert done.stdout == "", done.stdout
    return lines[0]


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> Path:
    """A folder with mlp.py, mlp.pte (self-contained) and ext.pte + ext.ptd (weights outside), exported once."""
    folder = tmp_path_factory.mktemp("exported")
    (folder / "mlp.py").write_bytes((EXAMPLES / "mlp.py").read_bytes())
    for args in ([folder / "mlp.py", "-q"],
                 [folder / "mlp.py", "-q", "-o", folder / "ext.pte", "--external-data", folder / "ext.ptd"]):
        done = vkx_here("export", *args)
        assert done.returncode == 0, done.stderr
    return folder
