"""The package's shape: no import cycle between vkx's modules, no vkx import hidden in a function
outside the command line and the lazy package entry points, each class name defined once, every
module on docs/architecture.md's map (and every loader module in `vkx.loader`'s index)."""
import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"vkx": "vkx", "format": "vkx.format", "export": "vkx.export", "loader": "vkx.loader"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """module name -> (its file, whether it is a package's __init__)."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            if "generated" in path.parts:
                continue
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            name = ".".join([package, *(parts[:-1] if is_init else parts)])
            out[name] = (path, is_init)
    return out


def _targets(node: ast.AST, module: str, is_init: bool, known: dict) -> list[str]:
    """The vkx modules an import statement names (a package's submodules where it names them)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".")
        base = base[:len(base) - node.level + (1 if is_init else 0)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in known]
    if not out and source in known and not known[source][1]:
        out = [source]
    return out


def _module_level(tree: ast.Module):
    """Statements run at import (inside module-level if/try too), without `if TYPE_CHECKING:` blocks."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.If, ast.Try)):
            stack += node.body + node.orelse + getattr(node, "handlers", []) + getattr(node, "finalbody", [])
        elif isinstance(node, ast.ExceptHandler):
            stack += node.body
        else:
            yield node


def test_no_import_cycles():
    known = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, (path, is_init) in known.items():
        if is_init:
            continue  # a package's entry points are lazy; its submodules import one another
        for node in _module_level(ast.parse(path.read_text())):
            edges[name].update(t for t in _targets(node, name, is_init, known) if not known[t][1])
    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert cycles == [], cycles


def test_no_vkx_import_inside_a_function():
    """Outside the command line (which imports torch and Vulkan only for the commands that need
    them) and the packages' lazy entry points, every vkx import is at the top of its module."""
    known = _modules()
    hidden = []
    for name, (path, is_init) in known.items():
        if is_init or name.startswith(("vkx.cli", "vkx.cmd_")):
            continue
        tree = ast.parse(path.read_text())
        top = set(map(id, _module_level(tree)))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                text = ast.unparse(node)
                if "vkx" in text or (isinstance(node, ast.ImportFrom) and node.level):
                    if not any(isinstance(p, ast.If) for p in ast.walk(tree) if node in getattr(p, "body", [])
                               and "TYPE_CHECKING" in ast.unparse(getattr(p, "test", ast.Constant(0)))):
                        hidden.append(f"{name}: {text}")
    assert hidden == [], hidden


def test_each_class_name_is_defined_once():
    where: dict[str, list[str]] = defaultdict(list)
    for name, (path, _) in _modules().items():
        if name.split(".")[1:2] in (["format"], ["export"], ["loader"]):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(name)
    twice = {cls: mods for cls, mods in where.items() if len(mods) > 1}
    assert twice == {}, twice


def test_every_module_is_on_the_map():
    """docs/architecture.md's map names each module and subpackage of format/ and export/ (the op
    declarations as `op_*`), and each module of loader/ and of its rooms in the room's row; the
    loader's index names each of its modules and rooms, and each room's docstring its modules."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("## The map")
    the_map = text[start:text.index("\n## ", start)]
    missing = []

    def check(folder: str, index: str | None) -> None:
        rows = " ".join(line for line in the_map.splitlines() if line.startswith(f"| `{folder}/`"))
        modules = [p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"]
        packages = [p.name for p in (ROOT / folder).iterdir() if (p / "__init__.py").is_file()]
        for name in sorted(modules + packages):
            spelled = f"`{name}/`" if name in packages else "`op_*`" if name.startswith("op_") else f"`{name}`"
            if spelled not in rows and not (name in packages and f"| `{folder}/{name}/`" in the_map):
                missing.append(f"docs/architecture.md: {folder}/{name}")
            if index is not None and not re.search(rf"\b{name}\s\(", index):
                missing.append(f"{folder}/__init__.py: {name}")

    def index_of(folder: str) -> str:
        return ast.get_docstring(ast.parse((ROOT / folder / "__init__.py").read_text())) or ""

    check("format", None)
    check("export", None)
    check("loader", index_of("loader"))
    rooms = [p.name for p in (ROOT / "loader").iterdir() if (p / "__init__.py").is_file() and p.name != "ops"]
    assert sorted(rooms) == ["build", "execute", "gpu", "lm", "upload"]
    for room in rooms:
        check(f"loader/{room}", index_of(f"loader/{room}"))
    assert missing == [], missing
