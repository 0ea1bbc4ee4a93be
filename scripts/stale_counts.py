"""For each module of src/tinyformer: how many sources of the lab guide go stale when it changes
(`tools.lab.stamps.code_of`), as a table; with --json FILE, also as {module: count}. Run it in a
checkout of any commit to compare (issue 56's figure: before and after staleness read the imports).

    python scripts/stale_counts.py [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from tinyformer.lab.sources import SOURCES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository's tools/, beside scripts/
from tools.lab.stamps import code_of  # noqa: E402


def counts() -> dict[str, int]:
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "src/tinyformer").rglob("*.py"))
    found = collections.Counter()
    for source in SOURCES.values():
        code = code_of(source.argv(False))
        for m in modules:  # a path of the code is a file, or a folder that holds it
            if any(m == c or m.startswith(c.rstrip("/") + "/") for c in code):
                found[m] += 1
    return {m.removeprefix("src/tinyformer/"): found[m] for m in modules}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    a = ap.parse_args()
    table = counts()
    for module, n in table.items():
        print(f"{module:<40} {n:>3}")
    print(f"{len(SOURCES)} sources; modules in no source's code: {sum(n == 0 for n in table.values())}")
    if a.json:
        Path(a.json).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
