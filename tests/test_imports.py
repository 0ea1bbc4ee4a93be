"""The import structure: no module of tinyformer imports itself back through others, and every import, at a
module's top or inside a function, points down the layer order (`LAYERS`), which docs/architecture.md shows."""

from __future__ import annotations

import re
from pathlib import Path

from tools import imports

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "tinyformer"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# The layer order, bottom first: each top-level module or package of tinyformer in its place. A module imports
# only what comes before its own place here, and within its own module or package; so the order within a layer
# counts too (attention below layers below models, the bottom modules below those that use them). "tinyformer"
# is the package's own __init__, which names its public API lazily and imports nothing.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "bottom",
        (
            "tinyformer",
            "errors",
            "interrupt",
            "extras",
            "course",
            "files",
            "fonts",
            "plots",
            "choices",
            "device",
            "measure",
            "hub",
            "timeplan",
            "runfolder",
        ),
    ),
    ("config", ("seeds", "overrides", "config")),
    ("data", ("data",)),
    ("models", ("attention", "layers", "models")),
    ("generate", ("generate",)),  # a model's forward or encode/decode only: tasks use it for their inference verb
    ("tasks", ("tasks",)),
    ("train", ("train",)),
    ("runs", ("runs",)),
    ("consumers", ("info", "viz", "export", "experiments", "bench")),
    ("api", ("results", "rerun", "api")),
    ("lab", ("lab",)),
    ("notebook", ("notebook",)),
    ("serve", ("serve",)),
    ("cli", ("cli", "__main__")),
)
ORDER = [name for _, names in LAYERS for name in names]

# Imports against the order that are known and being removed, each with why it is still here.


def graph() -> dict[str, set[str]]:
    return {module: set(found.every) for module, found in imports.graph().items()}


def name_of(module: str) -> str:
    """A module's name in `LAYERS`: that of its top-level module or package under tinyformer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def place(module: str) -> int:
    return ORDER.index(name_of(module))


def layer(module: str) -> str:
    return next(layer for layer, names in LAYERS if name_of(module) in names)


def upward(found: dict[str, imports.Imports]) -> dict[tuple[str, str], str]:
    """Every import that points up the order: (module, what it imports) -> a line that says where (its top, or
    inside a function) and the layers of both."""
    out = {}
    for module, imported in sorted(found.items()):
        for target in sorted(imported.every):
            if place(target) > place(module):
                where = "at its top" if target in imported.top else "inside a function"
                out[module, target] = f"{module} ({layer(module)}) imports {target} ({layer(target)}) {where}"
    return out


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
    gpt = imports.imports_of(PACKAGE / "tasks" / "gpt.py")
    assert "tinyformer.generate.sampling" in gpt.inside  # imported inside GPTTask.finish only
    assert "tinyformer.models.gpt" in gpt.top and "tinyformer.config" in gpt.top  # `from a import b`, either kind


def test_every_module_has_its_place_in_the_layers():
    unplaced = sorted(m for m in graph() if name_of(m) not in ORDER)
    assert not unplaced, f"add each to LAYERS (and docs/architecture.md's table): {unplaced}"


def test_no_import_points_up_the_layers():
    found = list(upward(imports.graph()).values())
    assert not found, "imports against the layer order (tests/test_imports.py LAYERS):\n" + "\n".join(found)


def test_the_order_check_names_an_upward_import_wherever_it_is():
    found = {
        "tinyformer.attention.masks": imports.Imports(frozenset(), frozenset({"tinyformer.models.gpt"})),
        "tinyformer.bench.serve": imports.Imports(frozenset({"tinyformer.serve.app"}), frozenset()),
        "tinyformer.models.gpt": imports.Imports(frozenset({"tinyformer.attention.masks"}), frozenset()),
    }
    assert list(upward(found).values()) == [
        "tinyformer.attention.masks (models) imports tinyformer.models.gpt (models) inside a function",
        "tinyformer.bench.serve (consumers) imports tinyformer.serve.app (serve) at its top",
    ]


# ---- the map in docs/architecture.md ---------------------------------------------------------------------
def shown(name: str) -> str:
    """A place of `LAYERS` as the map names it: a package `name/`, a module `name.py`."""
    if name == "tinyformer":
        return "__init__.py"
    return f"{name}/" if (PACKAGE / name).is_dir() else f"{name}.py"


def documented() -> tuple[str, list[tuple[str, list[str]]]]:
    """(the order line, [(layer, its modules in order)]) of docs/architecture.md's section "The layers"."""
    section = ARCHITECTURE.read_text(encoding="utf-8").split("## The layers", 1)[1].split("\n## ", 1)[0]
    line = re.search(r"```\n(.*?)\n```", section, re.S).group(1).strip()
    table = re.search(r"^\| layer \|.*?(?=\n[^|])", section, re.S | re.M).group(0).splitlines()
    rows = [r.split("|")[1:3] for r in table[2:]]  # under the header and its rule
    return line, [(name.strip(), re.findall(r"`([^`]+)`", modules)) for name, modules in rows]


def test_the_architecture_page_shows_this_order():
    line, rows = documented()
    assert line == " -> ".join(name for name, _ in LAYERS), f"docs/architecture.md: {line!r}"
    assert rows == [(name, [shown(n) for n in names]) for name, names in LAYERS]
