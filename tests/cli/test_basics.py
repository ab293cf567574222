"""`vkx --version`, `-h`, help text, `vkx devices`, and the public Python API."""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

import vkx as api

from .conftest import ROOT, vkx

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


def test_public_api():
    names = dir(api)
    assert "export_model" in names and "load" in names and "Any" not in names
    from vkx.format.errors import VkxError
    assert api.VkxError is VkxError


def test_py_typed_ships():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["vkx"]
    assert (Path(api.__file__).parent / "py.typed").is_file()


def test_docs_cli_covers_every_command_and_schema():
    text = (ROOT / "docs" / "cli.md").read_text()
    for command in COMMANDS:
        assert f"## vkx {command}" in text, command
    for schema in ("vkx.export/1", "vkx.describe/1", "vkx.validate/1", "vkx.run/1", "vkx.devices/1"):
        assert schema in text, schema
    assert "## Exit codes" in text
