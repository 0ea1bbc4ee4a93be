"""The import structure: no module of tinyformer imports itself back through others, lazy imports (inside
functions) included, and the model layers point one way (attention below layers)."""

from __future__ import annotations

from pathlib import Path

from tinyformer.lab import imports

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tinyformer"


def imports_of(path: Path) -> set[str]:
    """Every tinyformer module that `path` imports, at the top or inside a function (`tinyformer.lab.imports`,
    which the lab's staleness reads too)."""
    return set(imports.imports_of(path).every)


def graph() -> dict[str, set[str]]:
    return {module: set(found.every) for module, found in imports.graph().items()}


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
