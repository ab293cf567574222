"""`vkx inspect` / `vkx validate`: exit codes, one-line errors, --json schema, and no torch import."""
import json
import subprocess
import sys

import pytest

from .conftest import DATA, GOLDEN

# Runs the two commands in a fresh interpreter and reports whether torch, vulkan or numpy (via flatbuffers) got imported.
RUNNER = """
import sys, typer
from vkx import cmd_inspect
app = typer.Typer(pretty_exceptions_enable=False)
app.command("inspect")(cmd_inspect.inspect)
app.command("validate")(cmd_inspect.validate)
try:
    app(sys.argv[1:])
except SystemExit as e:
    code = e.code or 0
heavy = sorted(m for m in ("torch", "vulkan", "executorch", "numpy", "flatbuffers") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def run(*args):
    p = subprocess.run([sys.executable, "-c", RUNNER, *map(str, args)], capture_output=True, text=True, timeout=60)
    heavy = [line for line in p.stderr.splitlines() if line.startswith("HEAVY=")]
    assert heavy == ["HEAVY="], f"inspect imported heavy modules: {heavy}"
    stderr = "\n".join(line for line in p.stderr.splitlines() if not line.startswith("HEAVY="))
    return p.returncode, p.stdout, stderr


def test_inspect_json():
    code, out, err = run("inspect", GOLDEN / "tiny_named.pte", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["schema"] == "vkx.describe/2" and d["totals"]["W"] == 60


def test_inspect_tables_with_external_data():
    code, out, err = run("inspect", DATA / "et_mlp_ext.pte", "--external-data", DATA / "et_mlp_ext.ptd", "--tensors")
    assert code == 0, err
    assert "Segments" in out and "aten.linear.default" in out and "Tensors: " in out and "peak_lazy" in out


def test_validate_ok_and_missing_data(tmp_path):
    code, out, err = run("validate", DATA / "et_mlp_ext.pte", "--external-data", DATA / "et_mlp_ext.ptd")
    assert code == 0 and "ok" in out, err
    (tmp_path / "alone.pte").write_bytes((DATA / "et_mlp_ext.pte").read_bytes())  # no .ptd beside it
    code, out, err = run("validate", tmp_path / "alone.pte")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vkx: error: ") and "pass --external-data FILE" in lines[0]


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_errors_exit_2(tmp_path, command):
    (tmp_path / "junk.pte").write_bytes(b"\x00" * 100)
    for target in (tmp_path / "junk.pte", tmp_path / "absent.pte"):
        code, out, err = run(command, target)
        assert code == 2 and err.startswith("vkx: error: ") and len(err.strip().splitlines()) == 1, err
