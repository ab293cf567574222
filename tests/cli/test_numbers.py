"""Numbers that agree and output a person can use (issue 27), through the real console script."""
from __future__ import annotations

import json
import os
import re
import resource
import subprocess

import numpy as np
import pytest

import vkx as api
from vkx.format.describe import EAGER_PEAK, LAZY_PEAK

from .conftest import EXAMPLES, ROOT, VKX, on_a_terminal, one_error_line, vkx, vkx_here


@pytest.fixture(scope="module")
def bf16(tmp_path_factory):
    """examples/mlp.py exported in bfloat16, and its export report."""
    folder = tmp_path_factory.mktemp("bf16")
    done = vkx_here("export", EXAMPLES / "mlp.py", "--dtype", "bf16", "-o", folder / "mlp-bf16.pte", "--json")
    assert done.returncode == 0, done.stderr
    return folder / "mlp-bf16.pte", json.loads(done.stdout)


def _json(*args) -> dict:
    done = vkx(*args, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1  # one line
    return json.loads(done.stdout)


def test_run_shows_dtypes_as_stored_and_writes_them(bf16, tmp_path):
    path, _ = bf16
    done = vkx("run", path, "--repeat", "1", "--output", tmp_path / "out.safetensors")
    assert done.returncode == 0, done.stderr
    assert re.search(r"0 +│ 4×10 +│ bfloat16", done.stdout), done.stdout
    assert _json("run", path, "--repeat", "1")["outputs"] == [{"shape": [4, 10], "dtype": "bfloat16"}]
    import torch
    from safetensors.torch import load_file

    from vkx.cmd_run import _random_inputs  # the inputs `vkx run --seed 0` used
    written = load_file(tmp_path / "out.safetensors")["output_0"]
    assert written.dtype is torch.bfloat16 and written.shape == (4, 10)
    with api.load(path) as program:
        want = program(*(torch.from_numpy(x).to(torch.bfloat16) for x in _random_inputs(program.input_specs, 0)))
    assert torch.equal(written, want) and want.abs().max() > 0.01


def test_constant_counts_agree(bf16, exported):
    path, report = bf16
    described = _json("inspect", path)
    assert report["constants"] == described["totals"]["constants"] == _json("validate", path)["constants"] == 6
    assert report["constant_references"] == sum(len(d["vulkan"]["graph"]["constants"]) for d in described["delegates"])
    line = vkx_here("export", exported / "mlp.py", "-q", "-o", exported / "again.pte").stdout
    assert " 6 constants (" in line
    assert "6 constants" in vkx("inspect", path).stdout and "6 constants" in vkx("validate", path).stdout


def test_one_peak_formula_everywhere(exported):
    shown = " ".join(vkx("inspect", exported / "mlp.pte").stdout.split())
    assert f"{LAZY_PEAK} (lazy load, the default)" in shown and f"{EAGER_PEAK} (eager load)" in shown
    for doc in ("README.md", "docs/memory.md", "docs/format.md", "docs/cli.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert LAZY_PEAK in text, doc
        assert not re.search(r"W \+ max\(A|2W \+ A \+ w\b", text), doc
    d = _json("inspect", exported / "mlp.pte")["totals"]
    assert d["peak_lazy"] == d["W"] + d["A"] + d["IO"] + d["state"]
    assert d["peak_eager"] == 2 * d["W"] + d["A"] + d["IO"] + d["w"] + d["state"]


@pytest.mark.parametrize("which", ["mlp", "bf16"])
def test_importable_estimate_is_what_the_loader_imports(exported, bf16, which):
    path = exported / "mlp.pte" if which == "mlp" else bf16[0]
    estimate = _json("inspect", path)["totals"]
    ran = _json("run", path, "--upload", "import", "--repeat", "1")
    assert ran["weight_paths"]["imported"] == estimate["import_ready_bytes"] == estimate["W"] == ran["weight_bytes"]


def test_device_table_shows_imported_weights(exported):
    done = vkx("run", exported / "mlp.pte", "--upload", "import", "--trace-memory", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    rows = {line[:28].strip(): line[28:].split() for line in done.stdout.splitlines()}
    assert rows["phase"] == ["weights", "imported", "state", "activations", "staging", "io"]
    after = rows["after prepack"]
    assert float(after[0]) == 0.0 and float(after[1]) > 0  # weights used in place: under imported, not weights


def test_piped_names_and_lines_are_never_cut(exported):
    done = vkx("inspect", exported / "mlp.pte", "--tensors", COLUMNS="40")
    assert done.returncode == 0, done.stderr
    assert re.search(r"VulkanBackend delegate 0 of plan 0: blob .* legacy section 0 B\n", done.stdout)
    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"):
        assert re.search(rf"│ {re.escape(name)} +│ FLOAT32", done.stdout), name


def test_repeats_show_progress(exported):
    shown = on_a_terminal("run", str(exported / "mlp.pte"), "--repeat", "30")[0]
    assert "runs" in shown and "30/30" in shown


def test_a_failed_export_leaves_no_progress_rows(tmp_path):
    (tmp_path / "bad.py").write_text("def get_model():\n    raise ValueError('boom')\n")
    shown = on_a_terminal("export", str(tmp_path / "bad.py"), stdout_too=True)[0]
    assert "import torch" in shown  # the wait for torch is announced
    assert "vkx: error: " in shown and "get_model() raised ValueError: boom" in shown
    drawn = shown[:shown.index("vkx: error: ")]
    tail = drawn[drawn.rindex("\x1b[?25h"):]  # after the display stopped: only erasing, no text
    assert "\x1b[2K" in tail and re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\s", "", tail) == "", repr(tail)
    assert "get_model() raised ValueError: boom" in one_error_line(vkx("export", tmp_path / "bad.py"))  # piped


def test_export_seconds_include_importing_torch(exported):
    report = _json("export", exported / "mlp.py", "-o", exported / "timed.pte")
    stages = report["stage_seconds"]
    assert list(stages)[0] == "import" and stages["import"] > 0.2  # torch's import: seconds, not nothing
    assert report["seconds"] >= sum(stages.values())


def test_memory_is_a_typed_object_that_prints_the_cli_table(exported):
    with api.load(exported / "mlp.pte", trace_memory=True) as program:
        program(np.ones((4, 64), np.float32))
        memory = program.memory
    assert memory.W == memory["weight_bytes"] == 340008 and memory.A >= 9216
    assert memory.peak == memory["ledger"]["peak_total"] >= memory.W
    assert list(memory.phases) == ["before load", "after graph build", "prepack start", "after prepack",
                                   "after activation allocation", "after execute"]
    assert memory.phases["after execute"].rss >= memory.phases["before load"].rss
    done = vkx("run", exported / "mlp.pte", "--trace-memory", "--repeat", "1")

    def shape(text: str) -> list[str]:
        return [re.sub(r"[\d,.]+", "#", " ".join(line.split())) for line in text.splitlines()]
    printed = shape(str(memory))
    cli = shape(done.stdout)
    start = cli.index(printed[0])
    assert cli[start:start + len(printed)] == printed


def test_plot_draws_the_memory_timeline(exported, tmp_path):
    done = vkx("run", exported / "mlp.pte", "--repeat", "1", "--plot", tmp_path / "timeline.png")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {tmp_path / 'timeline.png'}" in done.stdout
    (tmp_path / "hide" / "matplotlib").mkdir(parents=True)
    (tmp_path / "hide" / "matplotlib" / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    line = one_error_line(vkx("run", exported / "mlp.pte", "--plot", tmp_path / "t2.png",
                              PYTHONPATH=str(tmp_path / "hide")))
    assert line == "vkx: error: --plot needs matplotlib, which is not installed: pip install matplotlib"
    assert not (tmp_path / "t2.png").exists()
    assert "must be a .png" in one_error_line(vkx("run", exported / "mlp.pte", "--plot", tmp_path / "t.svg"))


def test_inspect_json_is_compact_without_repetition(exported):
    done = vkx("inspect", exported / "mlp.pte", "--json")
    d = json.loads(done.stdout)
    assert done.stdout.count("\n") == 1 and len(done.stdout) < 8000
    assert d["schema"] == "vkx.describe/2" and "vulkan" not in d
    assert d["delegates"][0]["compile_specs"]["vkx.io_names"] == {"json": {"inputs": ["x"], "outputs": [None]}}


def test_output_onto_a_full_disk_is_one_line_and_no_file(exported, tmp_path):
    """A file-size limit makes write() fail with EFBIG, as a full disk fails it with ENOSPC."""
    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))  # the outputs file needs 216 bytes
    env = {**os.environ, "VKX_VALIDATION": "1"}
    done = subprocess.run([str(VKX), "run", str(exported / "mlp.pte"), "--repeat", "1", "--output",
                           str(tmp_path / "out.safetensors")], capture_output=True, text=True, env=env,
                          preexec_fn=small_files)
    line = one_error_line(done)
    assert line == f"vkx: error: {tmp_path / 'out.safetensors'}: cannot write: File too large"
    assert list(tmp_path.iterdir()) == []
