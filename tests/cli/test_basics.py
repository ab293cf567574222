"""`vkx --version`, `-h`, help text, `vkx devices`, and the public Python API."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import vkx as api

from .conftest import ROOT, one_error_line, vkx

COMMANDS = ("export", "inspect", "validate", "run", "devices")


def test_version():
    done = vkx("--version")
    assert done.returncode == 0 and done.stdout == f"vkx {api.__version__}\n"


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_short_and_long_help(flag):
    done = vkx(flag)
    assert done.returncode == 0 and done.stdout.startswith("Usage: vkx ")
    assert all(f"  {command} " in done.stdout for command in COMMANDS)


def test_plain_vkx_prints_help_and_exits_2():
    done = vkx()
    assert done.returncode == 2 and done.stdout.startswith("Usage: vkx ")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_type_placeholders_and_no_boxes(command):
    done = vkx(command, "-h", COLUMNS="100")
    assert done.returncode == 0, done.stderr
    placeholders = re.findall(r"<(?:bool|str|int|path|file|float|list\[[^>]*\]|int range)>", done.stdout)
    assert placeholders == [] and "╭" not in done.stdout, done.stdout


def test_run_help_lists_the_choices():
    text = " ".join(vkx("run", "-h", COLUMNS="100").stdout.split())
    assert "--schedule <lazy|eager>" in text and "--upload <auto|staging|direct|import>" in text


def test_devices_table_and_json():
    done = vkx("devices", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema"] == "vkx.devices/1" and report["devices"]
    first = report["devices"][0]
    assert first["index"] == 0 and first["type"] in ("other", "integrated", "discrete", "virtual", "cpu")
    assert all(isinstance(n, int) and n > 0 for n in first["heap_bytes"]) and isinstance(first["direct_upload"], bool)
    table = vkx("devices", COLUMNS="200")
    assert table.returncode == 0 and first["name"] in table.stdout
    assert re.search(r"\d (GiB|MiB)", table.stdout)


def test_devices_show_the_profile_in_force():
    done = vkx("devices", "--json", "--profile", "android-baseline-2022")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)["devices"][0]
    assert first["profile"] == "android-baseline-2022"
    assert first["limits"]["maxComputeWorkGroupInvocations"] <= 128
    assert first["limits"]["minStorageBufferOffsetAlignment"] >= 256
    assert "storageBuffer16BitAccess" not in first["limits"]["features"]
    assert first["limits"]["apiVersion"] == "1.1.106" and first["limits"]["maxPerStageDescriptorStorageBuffers"] == 4
    table = vkx("devices", COLUMNS="200", VKX_DEVICE_PROFILE="adreno-7xx")
    assert table.returncode == 0 and "adreno-7xx" in table.stdout and "subgroup 128" in table.stdout
    assert one_error_line(vkx("devices", "--profile", "phone")) == (
        "vkx: error: --profile: phone is not one of android-baseline-2022, android-15, android-16, adreno-7xx")


def test_public_api():
    names = dir(api)
    assert "export_model" in names and "load" in names and "Any" not in names
    from vkx.format.errors import VkxError
    assert api.VkxError is VkxError


def test_the_wheel_ships_py_typed_and_needs_torch_only_to_export(tmp_path):
    """pip's own build of the wheel (from a copy of the sources, so that the checkout gets no build/)."""
    import shutil
    import subprocess
    import sys
    import zipfile
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("vkx", "format", "export", "loader", "shaders"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.spv"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("vkx-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"vkx/py.typed", "vkx/loader/execute/method.py", "vkx/loader/gpu/profiles.json", "vkx/format/names.py"} <= names
    assert any(n.startswith("vkx/shaders/") and n.endswith(".comp") for n in names)
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    torch = [r for r in requires if r.startswith("torch")]
    assert torch == ['torch<2.14,>=2.13; extra == "export"'], requires
    assert any(r.startswith("numpy") for r in requires) and any(r.startswith("vulkan") for r in requires)


def test_docs_cli_covers_every_command_and_schema():
    text = (ROOT / "docs" / "cli.md").read_text()
    for command in COMMANDS:
        assert f"## vkx {command}" in text, command
    for schema in ("vkx.export/2", "vkx.describe/2", "vkx.validate/1", "vkx.run/2", "vkx.devices/1"):
        assert schema in text, schema
    assert "## Exit codes" in text


@pytest.mark.parametrize("module, name", [("program", "Program"), ("execute.method", "Method"), ("execute.plan", "PlanMethod")])
def test_program_documents_all_it_exposes(module, name):
    """Every public method and property of Program, Method and PlanMethod has a docstring, and so has
    every public attribute its __init__ sets (an attribute docstring: the string right after the
    assignment)."""
    import ast
    import importlib
    import inspect

    cls = getattr(importlib.import_module(f"vkx.loader.{module}"), name)
    missing = [name for name, member in inspect.getmembers(cls)
               if not name.startswith("_") and not inspect.getdoc(member)]
    init = ast.parse(inspect.getsource(cls)).body[0]
    body = next(f for f in init.body if isinstance(f, ast.FunctionDef) and f.name == "__init__").body
    for statement, after in zip(body, body[1:] + [None]):
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and not target.attr.startswith("_"):
                documented = (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                              and isinstance(after.value.value, str))
                if not documented:
                    missing.append(target.attr)
    assert missing == [], missing
