"""Memory and leak tests: each measurement runs in a fresh subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_py(code_or_module: str, *args: str, module: bool = False, timeout: int = 300) -> str:
    env = dict(os.environ)
    env.setdefault("VKX_VALIDATION", "0")  # memory numbers without the layer's own footprint
    cmd = [sys.executable, "-m", code_or_module, *args] if module else [sys.executable, "-c", code_or_module, *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


@pytest.fixture
def measure():
    def go(path, schedule, upload, *ext):
        return json.loads(run_py("tests.memory.measure", str(path), schedule, upload, *map(str, ext), module=True))
    return go
