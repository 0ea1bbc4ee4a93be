"""The import structure: no module of tinyformer imports itself back through others, lazy imports (inside
functions) included, and the model layers point one way (attention below layers)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tinyformer"


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def exists(module: str) -> bool:
    base = SRC.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """Every tinyformer module that `path` imports, at the top or inside a function: `from a.b import c` is
    a.b.c when that is a module, else a.b (the names come from a.b itself)."""
    here = module_of(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "tinyformer"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` steps up
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            if base.split(".")[0] != "tinyformer":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if exists(sub) else base)
    return found - {module_of(path)}


def graph() -> dict[str, set[str]]:
    return {module_of(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_back():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_loops_and_the_graph_holds_lazy_imports():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    gpt = imports_of(PACKAGE / "tasks" / "gpt.py")
    assert "tinyformer.generate.sampling" in gpt  # imported inside GPTTask.finish only
    assert "tinyformer.models.gpt" in gpt and "tinyformer.config" in gpt  # `from a import b`, either kind


def test_attention_imports_nothing_from_layers_or_models():
    """Blocks are made of attention; attention is made of nothing above it."""
    for module, imported in graph().items():
        if module.startswith("tinyformer.attention"):
            upward = {m for m in imported if m.startswith(("tinyformer.layers", "tinyformer.models"))}
            assert not upward, f"{module} imports {sorted(upward)}"
