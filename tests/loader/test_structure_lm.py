"""Generation's room of its own: nothing on the load path imports `vkx.loader.lm`, and nothing asks a
method what kind it is (`hasattr` / `getattr` probes): `Method` and `PlanMethod` declare one interface,
`LoadedMethod`, which is what code asks."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LOAD_PATH = """
import json, sys
import numpy as np
import vkx, vkx.loader
from vkx.loader.upload import files, loading, report, stages
from vkx.loader.execute import method, plan
from vkx.loader import program
for path, options in (("tests/data/et_mlp.pte", {}), ("tests/data/et_llama_4w.pte", {"sequence_length": 1})):
    with vkx.load(path, **options) as p:  # an MLP; an LM that generation would take
        p.run_numpy(*[np.zeros(shape, dtype) for shape, dtype in p.input_specs])
        str(p.memory)
print(json.dumps(sorted(m for m in sys.modules if m == "vkx.loader.lm" or m.startswith("vkx.loader.lm."))))
"""


@pytest.mark.vulkan
def test_the_load_path_never_imports_the_lm_package():
    """Importing the loader's modules and loading, calling and closing a program leaves vkx.loader.lm
    unimported (a fresh process: this one may have imported it for other tests)."""
    out = subprocess.run([sys.executable, "-c", LOAD_PATH], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_no_loader_module_outside_lm_imports_it():
    """Statically too: outside loader/lm/ no loader module names vkx.loader.lm in an import (Program.generate
    reaches it on first use, by name, as vkx.loader's lazy entry points reach their modules)."""
    found = []
    for path in (ROOT / "loader").rglob("*.py"):
        if "lm" in path.relative_to(ROOT / "loader").parts[:-1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vkx.loader.lm") or \
                    isinstance(node, ast.Import) and any(a.name.startswith("vkx.loader.lm") for a in node.names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


KIND = re.compile(r"method|program|decode|prefill|delegate|\bplan\b", re.IGNORECASE)
"""What the object of a probe is named when it is a method or a program."""


def _probes(tree: ast.AST):
    """hasattr(x, ...) and getattr(x, "literal", default): asking an object whether it has a member."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            literal = len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
            if node.func.id == "hasattr" or node.func.id == "getattr" and literal:
                yield node


def test_no_hasattr_or_getattr_on_a_method_or_program():
    """No code in loader/ (lm/ included) or vkx/ tells a Method from a PlanMethod by probing for members
    (before: chains_greedy, record_ahead, argmax, a program's methods and llm)."""
    found = []
    for folder in ("loader", "vkx"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in _probes(ast.parse(path.read_text())):
                if KIND.search(ast.unparse(node.args[0])):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_method_and_plan_method_declare_one_interface():
    from vkx.loader.execute.method import LoadedMethod, Method
    from vkx.loader.execute.plan import PlanMethod
    assert issubclass(Method, LoadedMethod) and issubclass(PlanMethod, LoadedMethod)
    assert LoadedMethod.__abstractmethods__ == {"input_specs", "output_specs", "__call__", "run_numpy", "close"}
