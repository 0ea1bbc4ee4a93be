"""The size and seam figures issue 57 asks for, measured on the tree at --root (a `src` folder holding
`tinyformer/`), with `ast` alone (nothing in the tree is imported, so any commit's export can be measured):

    python scripts/seam_counts.py                      # this checkout's src/
    git archive 5703d61 src | tar -x -C /tmp/before && python scripts/seam_counts.py --root /tmp/before/src

Prints: functions over 40 and over 60 lines (the longest named), files over 300 lines (named), the length of
`Trainer` (src/tinyformer/train/trainer.py), the modules outside tinyformer.train that import it (at their
top or inside functions), and the pairs of repeated six-line runs as the `duplicates` command counts them
(`--repo ROOT --seconds 60`; "n/a" where that command is not on PATH).

A function's length is its `def` line to its last line (decorators and docstring included); a nested
function counts on its own and inside the function that holds it. A file's length is its line count.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
TRAIN = "tinyformer.train"


@dataclass(frozen=True)
class Function:
    where: str  # path:line, relative to the root
    name: str  # qualified: Class.method, outer.inner
    lines: int


def modules(root: Path) -> list[Path]:
    return sorted((root / "tinyformer").rglob("*.py"))


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def functions(root: Path, path: Path) -> list[Function]:
    found: list[Function] = []
    rel = path.relative_to(root).as_posix()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append(Function(f"{rel}:{child.lineno}", name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def trainer_length(root: Path) -> int | None:
    path = root / "tinyformer/train/trainer.py"
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            return node.end_lineno - node.lineno + 1
    return None


def imported(root: Path, path: Path) -> set[str]:
    """Every module name `path` imports from, made absolute: `from a import b` gives a and a.b."""
    here = module_name(root, path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` steps up
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def train_importers(root: Path) -> list[str]:
    found = []
    for path in modules(root):
        me = module_name(root, path)
        if me == TRAIN or me.startswith(TRAIN + "."):
            continue
        if any(n == TRAIN or n.startswith(TRAIN + ".") for n in imported(root, path)):
            found.append(me)
    return found


def duplicate_pairs(root: Path) -> str:
    if shutil.which("duplicates") is None:
        return "n/a"
    out = subprocess.run(
        ["duplicates", "--repo", str(root), "--seconds", "60"], capture_output=True, text=True, check=False
    ).stdout
    first = out.splitlines()[0] if out else ""
    if first.startswith("no duplicates"):
        return "0"
    return first.split()[0] if first[:1].isdigit() else f"n/a ({first or 'no output'})"


def report(root: Path) -> None:
    paths = modules(root)
    every = sorted((f for p in paths for f in functions(root, p)), key=lambda f: -f.lines)
    print(f"root: {root}")
    for limit in (40, 60):
        over = [f for f in every if f.lines > limit]
        print(f"functions over {limit} lines: {len(over)}")
    for f in every[:1]:
        print(f"  longest: {f.name} ({f.where}), {f.lines} lines")
    for f in (f for f in every if f.lines > 40):
        print(f"    {f.lines:>4}  {f.name}  {f.where}")
    long_files = sorted(((len(p.read_text(encoding="utf-8").splitlines()), p) for p in paths), reverse=True)
    long_files = [(n, p) for n, p in long_files if n > 300]
    print(f"files over 300 lines: {len(long_files)}")
    for n, p in long_files:
        print(f"    {n:>4}  {p.relative_to(root).as_posix()}")
    length = trainer_length(root)
    print(f"Trainer: {length if length is not None else 'n/a'} lines")
    importers = train_importers(root)
    print(f"modules outside {TRAIN} importing it: {len(importers)}")
    for m in importers:
        print(f"    {m}")
    print(f"duplicate pairs (six-line runs): {duplicate_pairs(root)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="a src folder holding tinyformer/ (default: this one's)")
    report(ap.parse_args().root.resolve())


if __name__ == "__main__":
    main()
