"""bench/reliability.py, the script that makes docs/safety.md's reliability table: every row tries
cases and finds no wrong answer, crash or lost file; the table in the docs has the script's rows."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import reliability

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "reliability.py"
NAMES = [row.name for row in reliability.ROWS]


@pytest.mark.vulkan
def test_every_row_tries_and_finds_nothing_wrong():
    done = subprocess.run([sys.executable, str(SCRIPT), "--count", "1", "--json"], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)["rows"]
    assert [r["name"] for r in rows] == NAMES
    for r in rows:
        assert r["tried"] > 0 and r["tried"] == sum(r[k] for k in ("refused", "right", "wrong", "crashes")), r
        assert (r["wrong"], r["crashes"], r["lost"]) == (0, 0, 0), r
    assert done.stderr.count("\n") == len(NAMES), done.stderr  # one progress line a row


def test_the_docs_table_has_the_scripts_rows():
    text = (ROOT / "docs" / "safety.md").read_text()
    table = text.split(reliability.BEGIN)[1].split(reliability.END)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| what was tried")]
    assert [row.split(" | ")[0][2:] for row in rows] == NAMES


@pytest.mark.parametrize("args, words", [
    (["--count", "0"], "argument --count: '0' is not a whole number of at least 1"),
    (["--count", "x"], "argument --count: 'x' is not a whole number of at least 1"),
    (["--rows"], "unrecognized arguments: --rows")])
def test_bad_arguments_get_one_line_before_any_work(args, words):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if not line.startswith(("usage:", " "))]
    assert errors == [f"reliability.py: error: {words}"]


def test_write_needs_the_markers(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "safety.md"
    doc.write_text("# no table here\n")
    monkeypatch.setattr(reliability, "DOC", doc)
    with pytest.raises(SystemExit) as exit:
        reliability.main(["--write", "--count", "1"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"reliability.py: error: --write: {doc} has no place")
    assert doc.read_text() == "# no table here\n"
