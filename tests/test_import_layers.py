"""The package's layers import downward only, and no two modules import each other, even for type hints."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1] / "thoughtloom"

#: Each layer may import its own and lower layers (a higher number may import a lower one).
LAYERS = {
    # tools sits between tasks and search: a search may grant tools; tools never see a search.
    # _version, checkout, filelocks and words import nothing of thoughtloom: any layer may use them.
    "_version": 0, "checkout": 0, "filelocks": 0, "words": 0, "graph": 0, "llm": 1, "grounding": 2, "tasks": 3, "tools": 3.5, "search": 4, "control": 5, "store": 6, "run": 7,
    "eval": 8, "views": 8, "api": 9, "cli": 9, "__main__": 10, "": 10,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every thoughtloom module this one imports, anywhere in it (TYPE_CHECKING blocks included)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        return name or None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        for name in names:
            hit = resolve(name)
            if hit and hit != module and not module.startswith(hit + "."):
                found.add(hit)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_two_modules_import_each_other() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def test_lower_layers_never_import_higher_ones() -> None:
    upward = sorted(
        f"{m} -> {t}" for m, targets in _graph().items() for t in targets
        if LAYERS[_layer(t)] > LAYERS[_layer(m)]
    )
    assert upward == []
