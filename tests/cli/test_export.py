"""`vkx export`: says what it replaces, JSON with a schema, binary units."""
from __future__ import annotations

import json
import re

from .conftest import EXAMPLES, vkx


def test_export_says_when_it_replaces_a_file(tmp_path):
    model = tmp_path / "mlp.py"
    model.write_bytes((EXAMPLES / "mlp.py").read_bytes())
    first = vkx("export", model, "-q")
    assert first.returncode == 0 and "replaced" not in first.stdout, first.stderr
    second = vkx("export", model, "-q", "--external-data", tmp_path / "mlp.ptd")
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith(f"wrote {tmp_path / 'mlp.pte'} (replaced the existing file) + "
                                    f"{tmp_path / 'mlp.ptd'} (332.5 KiB): ")
    third = vkx("export", model, "--json", "--external-data", tmp_path / "mlp.ptd")
    report = json.loads(third.stdout)
    assert report["schema"] == "vkx.export/2"
    assert report["replaced"] == [str(tmp_path / "mlp.pte"), str(tmp_path / "mlp.ptd")]
    assert not re.search(r"\d (kB|MB|GB)\b", first.stdout + second.stdout)
