"""Messages a person can act on (issue 27, item 5) and names that cannot hide text (issue 26, item 8),
through the real console script."""
from __future__ import annotations

import json
import os
import re
import subprocess

from .conftest import VKX, one_error_line, vkx

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE


def test_device_option_is_not_blamed_on_the_environment(exported):
    line = one_error_line(vkx("run", exported / "mlp.pte", "--device", "7"))
    assert line.startswith("vkx: error: device 7: only ") and "VKX_DEVICE" not in line
    env = {k: v for k, v in os.environ.items() if k != "VKX_DEVICE"}
    done = subprocess.run([str(VKX), "run", str(exported / "mlp.pte")], capture_output=True, text=True,
                          env={**env, "VKX_DEVICE": "7"})
    assert one_error_line(done).startswith("vkx: error: VKX_DEVICE=7: only ")


def test_random_bytes_are_not_an_executorch_program(tmp_path):
    (tmp_path / "noise.pte").write_bytes(bytes(range(256)) * 12)
    for command in ("inspect", "validate", "run"):
        assert "not an ExecuTorch program" in one_error_line(vkx(command, tmp_path / "noise.pte"))


def test_a_truncated_file_says_truncated(exported, tmp_path):
    data = (exported / "mlp.pte").read_bytes()
    for cut in (200, 2000, len(data) - 1):
        (tmp_path / "cut.pte").write_bytes(data[:cut])
        for command in ("inspect", "validate"):
            assert "the file is truncated" in one_error_line(vkx(command, tmp_path / "cut.pte")), cut


def test_integer_dtype_points_to_quantize(tmp_path):
    line = one_error_line(vkx("export", tmp_path / "m.py", "--dtype", "int8"))
    assert line == ("vkx: error: --dtype: int8 is not a floating type: "
                    "for int8 weights use --quantize int8")
    assert "fp64 is not one of keep, fp32, fp16, bf16" in one_error_line(vkx("export", "m.py", "--dtype", "fp64"))


def test_piped_into_head_exits_0(exported):
    for args in (["inspect", exported / "mlp.pte"], ["inspect", exported / "mlp.pte", "--json"],
                 ["run", exported / "mlp.pte", "--repeat", "2", "--trace-memory"]):
        command = " ".join(f"'{a}'" for a in [VKX, *args]) + " | head -n 0"  # gone before vkx writes
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True,
                              env={**os.environ, "VKX_VALIDATION": "1"})
        # a cold pipeline cache adds its one note ("vkx: compiled 3 compute pipelines ..."); nothing else
        noise = [line for line in done.stderr.splitlines() if not line.startswith("vkx: compiled ")]
        assert done.returncode == 0 and noise == [], (args, done.returncode, done.stderr)


def test_validate_help_names_no_file_a_pip_user_lacks():
    done = vkx("validate", "--help")
    assert done.returncode == 0 and "docs/" not in done.stdout


def test_bidirectional_controls_are_escaped_in_names(exported, tmp_path):
    # the key fc1.bias becomes "fc<RLO>bia": the same 8 bytes of UTF-8, so the file stays valid
    data = (exported / "mlp.pte").read_bytes()
    hidden = f"fc{RLO}bia"
    (tmp_path / f"a{RLO}b.pte").write_bytes(data.replace(b"fc1.bias", hidden.encode()))
    done = vkx("inspect", tmp_path / f"a{RLO}b.pte", "--tensors")
    assert done.returncode == 0, done.stderr
    assert RLO not in done.stdout and "fc\\u202ebia" in done.stdout and "a\\u202eb.pte" in done.stdout
    assert json.loads(vkx("inspect", tmp_path / f"a{RLO}b.pte", "--json").stdout)["tensors"][1]["names"] == [hidden]
    line = one_error_line(vkx("inspect", tmp_path / f"no{RLO}\u200bfile\u2028.pte"))
    assert re.search(r"no\\u202e\\u200bfile\\u2028\.pte", line) and RLO not in line


def test_a_name_with_a_line_break_stays_on_the_error_line(exported, tmp_path):
    """A file name is the user's text: its line break is written as an escape, never as a second line."""
    named = tmp_path / "two\nlines.pte"
    named.write_bytes(b"x")
    for command in ("inspect", "validate", "run"):
        assert one_error_line(vkx(command, named)).endswith("two\\x0alines.pte: header: 1 bytes is too short "
                                                             "for a program"), command
        assert "gone\\x0afile.pte" in one_error_line(vkx(command, tmp_path / "gone\nfile.pte"))


def test_ops_vkx_cannot_lower_are_listed_a_line_each_under_the_error(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                     "        return x.cumprod(0).sort().values\n\n"
                     "def get_model():\n    return M(), (torch.randn(3),)\n")
    done = vkx("export", model)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        "vkx: error: the model uses 2 op(s) vkx cannot lower:",
        "  aten.cumprod.default (not supported) at model.py:5: return x.cumprod(0).sort().values",
        "  aten.sort.default (not supported) at model.py:5: return x.cumprod(0).sort().values"]
    assert not (tmp_path / "model.pte").exists()
