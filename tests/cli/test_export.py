"""`vkx export`: says what it replaces, JSON with a schema, binary units."""
from __future__ import annotations

import json
import re

from .conftest import EXAMPLES, vkx_here


def test_export_says_when_it_replaces_a_file(tmp_path):
    model = tmp_path / "mlp.py"
    model.write_bytes((EXAMPLES / "mlp.py").read_bytes())
    first = vkx_here("export", model, "-q")
    assert first.returncode == 0 and "replaced" not in first.stdout, first.stderr
    second = vkx_here("export", model, "-q", "--external-data", tmp_path / "mlp.ptd")
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith(f"wrote {tmp_path / 'mlp.pte'} (replaced the existing file) + "
                                    f"{tmp_path / 'mlp.ptd'} (332.8 KiB): ")
    third = vkx_here("export", model, "--json", "--external-data", tmp_path / "mlp.ptd")
    report = json.loads(third.stdout)
    assert report["schema"] == "vkx.export/2"
    assert report["replaced"] == [str(tmp_path / "mlp.pte"), str(tmp_path / "mlp.ptd")]
    assert not re.search(r"\d (kB|MB|GB)\b", first.stdout + second.stdout)


def test_external_data_of_another_program_is_not_replaced_without_force(tmp_path):
    """An export replaces an --external-data file only when its output .pte was written with it; the
    audit's `-o b.pte --external-data a.ptd` replaced a.ptd, and a.pte then ran with b's weights."""
    from .conftest import one_error_line, vkx
    model = tmp_path / "mlp.py"
    model.write_bytes((EXAMPLES / "mlp.py").read_bytes())
    a_pte, a_ptd, b_pte = tmp_path / "a.pte", tmp_path / "a.ptd", tmp_path / "b.pte"
    assert vkx_here("export", model, "-q", "-o", a_pte, "--external-data", a_ptd).returncode == 0
    again = vkx_here("export", model, "-q", "-o", a_pte, "--external-data", a_ptd)  # the same target: its own file
    assert again.returncode == 0 and "(replaced the existing file)" in again.stdout, again.stderr
    checkpoint = tmp_path / "mine.safetensors"
    checkpoint.write_bytes(b"a checkpoint of your own")
    kept = a_ptd.read_bytes()
    for target, external in ((b_pte, a_ptd), (b_pte, checkpoint), (a_pte, checkpoint)):
        line = one_error_line(vkx("export", model, "-q", "-o", target, "--external-data", external))
        assert line == (f"vkx: error: --external-data {external} exists and {target} was not written with it "
                        "(another program's weights, or a file of your own): --force replaces it")
    assert a_ptd.read_bytes() == kept and checkpoint.read_bytes() == b"a checkpoint of your own"
    assert not b_pte.exists()
    forced = vkx_here("export", model, "-q", "-o", b_pte, "--external-data", checkpoint, "--force")
    assert forced.returncode == 0 and "(replaced the existing file)" in forced.stdout, forced.stderr
