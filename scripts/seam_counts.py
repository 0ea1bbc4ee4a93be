"""The size and seam figures issue 57 asks for, measured on the tree at --root (a `src` folder holding
`tinyformer/`), with `ast` alone (nothing in the tree is imported, so any commit's export can be measured):

    python scripts/seam_counts.py                      # this checkout's src/
    git archive 5703d61 src | tar -x -C /tmp/before && python scripts/seam_counts.py --root /tmp/before/src

Prints: functions over 40 and over 60 lines (the longest named), files over 300 lines (named), the length of
`Trainer` (src/tinyformer/train/trainer.py), the modules outside tinyformer.train that import it (at their
top or inside functions), the pairs of places repeating a six-line run (named) as `tools/sizes.py` counts
them, and beside them the `duplicates` command's count (`--repo ROOT --seconds 60`; "n/a" where that command
is not on PATH).

The lengths and the pairs are measured as `tests/test_sizes.py` holds them to DESIGN.md's limits, by the same
code (`tools/sizes.py`): a function's length is its first line (a decorator's, else its `def`) to its last
(its docstring included); a nested function counts on its own and inside the function that holds it. A file's
length is its line count.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))  # the repository's tools/, beside scripts/
from tools.sizes import FILE_LINES, every_function, file_lengths, modules, repeated_pairs  # noqa: E402

ROOT = REPOSITORY / "src"
TRAIN = "tinyformer.train"


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
    every = every_function(root)
    print(f"root: {root}")
    for limit in (40, 60):
        over = [f for f in every if f.lines > limit]
        print(f"functions over {limit} lines: {len(over)}")
    for f in every[:1]:
        print(f"  longest: {f.name} ({f.where}), {f.lines} lines")
    for f in (f for f in every if f.lines > 40):
        print(f"    {f.lines:>4}  {f.name}  {f.where}")
    long_files = [(n, p) for n, p in file_lengths(root) if n > FILE_LINES]
    print(f"files over {FILE_LINES} lines: {len(long_files)}")
    for n, p in long_files:
        print(f"    {n:>4}  {p}")
    length = trainer_length(root)
    print(f"Trainer: {length if length is not None else 'n/a'} lines")
    importers = train_importers(root)
    print(f"modules outside {TRAIN} importing it: {len(importers)}")
    for m in importers:
        print(f"    {m}")
    pairs = repeated_pairs(root)
    print(f"pairs of places repeating a six-line run: {len(pairs)} (the duplicates command: {duplicate_pairs(root)})")
    for pair in pairs:
        print(f"    {pair}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="a src folder holding tinyformer/ (default: this one's)")
    report(ap.parse_args().root.resolve())


if __name__ == "__main__":
    main()
