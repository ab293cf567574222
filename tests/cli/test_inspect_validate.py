"""`vkx inspect` / `vkx validate`: strings from files reach the terminal escaped; external data is found
or asked for."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil

from tests.format.fmt_tiny import tiny_constants, tiny_graph
from vkx.format import ConstantPayload, IOSpec, ScalarType, write_program

from .conftest import one_error_line, vkx, vkx_here

EVIL_KEY = "[/]\x1b]0;owned\x07[bold red]key"
EVIL_OP = "\x1b[2J[/]aten.relu.default"


def write_evil(path):
    """The tiny program with a named-data key and an op name that carry rich markup and escape sequences."""
    graph = tiny_graph()
    chain = list(graph.chain)
    chain[2] = dataclasses.replace(chain[2], name=EVIL_OP)
    graph = dataclasses.replace(graph, chain=chain)
    payloads = []
    for i, data in enumerate(tiny_constants()):
        key = EVIL_KEY if i == 0 else hashlib.sha256(data).hexdigest()
        payloads.append(ConstantPayload(key, len(data), lambda data=data: data))
    write_program(path, graph, payloads, [IOSpec(ScalarType.FLOAT, (1, 4))], [IOSpec(ScalarType.FLOAT, (1, 3))])


def assert_no_raw_controls(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\x9b\x9d"), repr(text)


def test_crafted_strings_are_escaped(tmp_path):
    folder = tmp_path / "a[" / "[/]x\x1b[31m"  # a path with markup and an escape sequence in it
    folder.mkdir(parents=True)
    write_evil(folder / "evil.pte")
    done = vkx("inspect", folder / "evil.pte", "--tensors", COLUMNS="200")
    assert done.returncode == 0, done.stderr
    assert_no_raw_controls(done.stdout + done.stderr)
    assert "\\x1b[2J[/]aten.relu.default" in done.stdout  # shown, visibly, as it is in the file
    assert "named [/]\\x1b]0;owned\\x07[bold red]key" in done.stdout  # the segment table shows keys whole
    assert "[/]\\x1b]0;owned\\x07[bold red]key" in done.stdout  # the tensor list shows names whole
    assert "[/]x\\x1b[31m/evil.pte" in done.stdout
    done = vkx("validate", folder / "evil.pte", COLUMNS="200")
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr
    assert_no_raw_controls(done.stdout + done.stderr)
    assert "[/]x\\x1b[31m/evil.pte" in done.stdout + done.stderr


def test_inspect_lists_tensors_and_inputs_by_name(exported):
    done = vkx("inspect", exported / "mlp.pte", "--tensors", COLUMNS="100")
    assert done.returncode == 0, done.stderr
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:]]
            for line in done.stdout.splitlines() if line.count("│") == 5}
    assert rows["fc1.weight"] == ["FLOAT32", "256x64", "64.0 KiB (65,536 B)", rows["fc1.weight"][3]]
    assert rows["fc1.weight"][3].startswith("pte @") and set(rows) >= {"fc2.bias", "fc3.weight", "fc3.bias"}
    assert re.search(r"input +│ +\d+ │ x +│ FLOAT32", done.stdout), done.stdout
    ext = json.loads(vkx("inspect", exported / "ext.pte", "--json").stdout)
    assert {t["names"][0]: (t["dims"], t["file"].endswith("ext.ptd")) for t in ext["tensors"]}["fc3.weight"] == \
        ([10, 256], True)
    assert [t["name"] for t in ext["delegates"][0]["vulkan"]["graph"]["inputs"]] == ["x"]


def test_error_lines_escape_control_characters(tmp_path):
    line = one_error_line(vkx("inspect", tmp_path / "no\x1b[31mfile.pte"))
    assert "no\\x1b[31mfile.pte" in line


def test_missing_external_data_says_what_to_do(exported, tmp_path):
    shutil.copy(exported / "ext.pte", tmp_path / "alone.pte")
    line = one_error_line(vkx("validate", tmp_path / "alone.pte"))
    assert "its constants are in external data" in line and "pass --external-data FILE" in line
    done = vkx("inspect", tmp_path / "alone.pte")
    assert done.returncode == 0, done.stderr
    assert "needs external data: 6 named key(s) are in no file given" in done.stdout
    report = json.loads(vkx("inspect", tmp_path / "alone.pte", "--json").stdout)
    assert report["external"] == []
    assert [c["location"] for c in report["delegates"][0]["vulkan"]["graph"]["constants"]] == ["missing"] * 6


def test_same_stem_external_data_is_found_and_announced(exported, tmp_path):
    for name in ("ext.pte", "ext.ptd"):
        shutil.copy(exported / name, tmp_path / name)
    note = f"vkx: using external data {tmp_path / 'ext.ptd'} (found beside {tmp_path / 'ext.pte'})"
    for command in ("inspect", "validate"):
        done = vkx(command, tmp_path / "ext.pte")
        assert done.returncode == 0 and done.stderr.strip() == note, done.stderr
    report = json.loads(vkx("inspect", tmp_path / "ext.pte", "--json").stdout)
    assert [e["path"] for e in report["external"]] == [str(tmp_path / "ext.ptd")]
    assert {c["location"] for c in report["delegates"][0]["vulkan"]["graph"]["constants"]} == {str(tmp_path / "ext.ptd")}


def test_self_contained_pte_does_not_use_a_file_beside_it(exported, tmp_path):
    shutil.copy(exported / "mlp.pte", tmp_path / "mlp.pte")
    shutil.copy(exported / "ext.ptd", tmp_path / "mlp.ptd")
    done = vkx("validate", tmp_path / "mlp.pte")
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_validate_json(exported, tmp_path):
    done = vkx("validate", exported / "ext.pte", "--external-data", exported / "ext.ptd", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["schema"] == "vkx.validate/1" and report["ok"] is True
    assert report["constants"] == 6 and report["external"] == [str(exported / "ext.ptd")]
    (tmp_path / "junk.pte").write_bytes(b"\0" * 64)
    done = vkx("validate", tmp_path / "junk.pte", "--json")
    failed = json.loads(done.stdout)
    assert done.returncode == 2 and failed["schema"] == "vkx.validate/1" and failed["ok"] is False
    assert done.stderr == f"vkx: error: {failed['error']}\n"


def test_inspect_says_what_upload_import_does(exported, tmp_path):
    """inspect's import row says whether `vkx run --upload import` loads the file (every constant used in
    place, or a refusal), and run does what it says: the .ptd vkx wrote is aligned for it, a checkpoint's
    own tensors (safetensors packs them) are not."""
    said = vkx("inspect", exported / "ext.pte", COLUMNS="400")
    assert "all 6 constants importable in place" in said.stdout and "--upload import can load it" in said.stdout
    ran = vkx("run", exported / "ext.pte", "--upload", "import", "--repeat", "1", "--json")
    assert ran.returncode == 0 and json.loads(ran.stdout)["weight_paths"]["imported"] > 0, ran.stderr
    from tests.llm.families import write_folder
    write_folder(tmp_path / "m", "llama", weights=True)
    done = vkx_here("export", tmp_path / "m", "-o", tmp_path / "lm.pte", "--external-data",
                    tmp_path / "m" / "model.safetensors", "--max-seq-len", 16, "--prefill-len", 4, "-q")
    assert done.returncode == 0, done.stderr
    said = vkx("inspect", tmp_path / "lm.pte", COLUMNS="400")
    assert re.search(r"in \d+ of \d+ constants importable in place", said.stdout) \
        and "--upload import refuses this file" in said.stdout
    line = one_error_line(vkx("run", tmp_path / "lm.pte", "--method", "decode", "--upload", "import", "--repeat", "1"))
    assert "upload='import'" in line
