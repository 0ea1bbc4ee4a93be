"""tinyformer's import graph, read from the code itself (`ast`, nothing imported): which modules of the package
each module imports, at its top (run when it is imported) and inside its functions (run when they are called).

The lab's staleness reads it (`tools.lab.stamps.code_of`: a source's code is every module its commands can
run), and `tests/test_imports.py` holds the package's structure to it (no cycles, the layers' order). It reads
the clone's `src/tinyformer`, beside this folder.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "tinyformer"


@dataclass(frozen=True)
class Imports:
    top: frozenset[str]  # imported when the module is: its top level (a class body's included)
    inside: frozenset[str]  # imported inside its functions, when one runs

    @property
    def every(self) -> frozenset[str]:
        return self.top | self.inside


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def path_of(module: str) -> Path | None:
    """The file of a module of the package (a package: its __init__.py), None when it has none."""
    base = SRC.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def imports_of(path: Path) -> Imports:
    """The tinyformer modules `path` imports: `from a.b import c` is a.b.c when that is a module, else a.b (the
    names come from a.b itself)."""
    here = module_of(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    top: set[str] = set()
    inside: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            found = named(child, package)
            (inside if in_function else top).update(found)
            deeper = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, deeper)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    me = module_of(path)
    return Imports(frozenset(top - {me}), frozenset(inside - top - {me}))


def named(node: ast.AST, package: list[str]) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == "tinyformer"}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:  # relative: from the package `level - 1` steps up
        base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
    if base.split(".")[0] != "tinyformer":
        return set()
    return {f"{base}.{a.name}" if path_of(f"{base}.{a.name}") else base for a in node.names}


@functools.cache
def graph() -> dict[str, Imports]:
    """Every module of the package -> what it imports."""
    return {module_of(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def parents(module: str) -> list[str]:
    """The packages importing `module` runs first: tinyformer, tinyformer.a, ... (its own __init__ aside)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def closure(run: list[str], imported: list[str] = ()) -> set[str]:
    """The modules that can run when the modules of `run` are used (everything they import, inside their
    functions too, at any depth) and those of `imported` are only imported (their top level, at any depth);
    each with the packages above it."""
    edges = graph()
    seen: dict[str, bool] = {}  # module -> followed inside its functions too
    todo = [(m, True) for m in run] + [(m, False) for m in imported]
    while todo:
        module, used = todo.pop()
        if module not in edges or seen.get(module, False) or (module in seen and not used):
            continue
        seen[module] = used
        todo += [(p, False) for p in parents(module)]
        todo += [(m, used) for m in (edges[module].every if used else edges[module].top)]
    return set(seen)


# ---- what runs: names, not whole modules -----------------------------------------------------------------
ALL = None  # every name of a module (it was imported as a module object: any of its names can be used)


@dataclass
class Unit:
    """A module read for what each of its top-level names needs: `names[name]` (and `names[""]`, the top
    level itself, run when the module is imported) -> the (module, name or ALL) it refers to, and the names of
    its own module it refers to."""

    names: dict[str, tuple[set[tuple[str, str | None]], set[str]]]


@functools.cache
def unit(module: str) -> Unit:
    path = path_of(module)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module.split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    aliases: dict[str, tuple[str, str | None]] = {}  # a top-level import's name -> (module, name or ALL)
    own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for node in tree.body:
        aliases.update(bound(node, package))
    names: dict[str, tuple[set, set]] = {}
    for node in tree.body:
        key = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ""
        refs, calls = names.setdefault(key, (set(), set()))
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                refs.update(bound(sub, package).values())  # a lazy import, or the top level's own
            elif isinstance(sub, ast.Name):
                if sub.id in own and sub.id != key:
                    calls.add(sub.id)
                elif sub.id in aliases:
                    refs.add(aliases[sub.id])
    return Unit(names)


def bound(node: ast.AST, package: list[str]) -> dict[str, tuple[str, str | None]]:
    """The names an import statement binds -> (tinyformer module, the name taken from it, or ALL)."""
    out: dict[str, tuple[str, str | None]] = {}
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] == "tinyformer":
                out[a.asname or a.name.split(".")[0]] = (a.name, ALL)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
        if base.split(".")[0] == "tinyformer":
            for a in node.names:
                sub = f"{base}.{a.name}"
                out[a.asname or a.name] = (sub, ALL) if path_of(sub) else (base, a.name)
    return out


def reach(starts: list[tuple[str, str | None]], opaque: tuple[str, ...] = ()) -> set[str]:
    """The modules whose code can run from `starts` ((module, one of its top-level names, or ALL)): each module
    reached has its top level run (and its packages'), and of its names those reached, with what they refer
    to in turn. A module under a prefix of `opaque` is imported but not followed, unless `starts` names it
    (the CLI: every command imports all its modules, and runs one of them)."""
    followed: dict[str, set[str]] = {}  # module -> its names followed ("" : its top level)
    entered = {m for m, _ in starts}
    todo = list(starts)
    while todo:
        module, name = todo.pop()
        if path_of(module) is None:
            continue
        if module not in followed:
            followed[module] = set()
            todo += [(p, "") for p in parents(module)] + [(module, "")]
        if module.startswith(opaque) and module not in entered:
            continue
        names = unit(module).names
        for key in names if name is ALL else [name if name in names else ""]:
            if key in followed[module]:
                continue
            followed[module].add(key)
            refs, calls = names[key]
            todo += list(refs) + [(module, c) for c in calls]
    return set(followed)
