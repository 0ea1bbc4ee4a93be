"""DESIGN.md's limits, held by `make check` ("Limits are tests", issue 71): no function in src/ over 60 lines, at
most 6 files over 300 lines, at most 10 pairs of places repeating a six-line run. Measured by `tools/sizes.py`,
the code `scripts/seam_counts.py` prints the same figures with; each failure names the offenders."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tools import sizes


def test_no_function_is_over_the_limit():
    over = [f for f in sizes.every_function() if f.lines > sizes.FUNCTION_LINES]
    named = "\n".join(f"  {f.where} {f.name}, {f.lines} lines" for f in over)
    assert not over, f"functions over {sizes.FUNCTION_LINES} lines (split each by meaning):\n{named}"


def test_few_files_are_over_the_limit():
    long = [(n, path) for n, path in sizes.file_lengths() if n > sizes.FILE_LINES]
    named = "\n".join(f"  {path}, {n} lines" for n, path in long)
    assert len(long) <= sizes.LONG_FILES, (
        f"{len(long)} files of src/ are over {sizes.FILE_LINES} lines, at most {sizes.LONG_FILES} may be (move a "
        f"coherent piece of one out):\n{named}"
    )


def test_few_places_repeat_a_six_line_run():
    pairs = sizes.repeated_pairs()
    named = "\n".join(f"  {pair}" for pair in pairs)
    assert len(pairs) <= sizes.PAIRS, (
        f"{len(pairs)} pairs of places in src/ repeat a six-line run, at most {sizes.PAIRS} may (write the logic "
        f"once where it is the same):\n{named}"
    )


# ---- the measures themselves, on small trees ----------------------------------------------------------------
def tree(root: Path, files: dict[str, str]) -> Path:
    """`files` (path under tinyformer/ -> its text, dedented) written under `root`/tinyformer -> `root`."""
    for name, text in files.items():
        path = root / "tinyformer" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def test_a_function_counts_from_its_decorator_and_a_nested_one_on_its_own_too(tmp_path):
    root = tree(tmp_path, {"a.py": "import functools\n\n\n@functools.cache\ndef f():\n    def g():\n        pass\n\n"})
    (tmp_path / "tinyformer" / "b.py").write_text("class C:\n    def m(self):\n        return 1\n")
    assert [(f.where, f.name, f.lines) for f in sizes.every_function(root)] == [
        ("tinyformer/a.py:5", "f", 4),  # @functools.cache to `pass`: the blank lines after it are not its own
        ("tinyformer/a.py:6", "f.g", 2),
        ("tinyformer/b.py:2", "C.m", 2),
    ]
    assert sizes.file_lengths(root) == [(8, "tinyformer/a.py"), (3, "tinyformer/b.py")]


BLOCK = """\
def forward(self, x, mask=None):
    scores = self.query(x) @ self.key(x).transpose(-2, -1)
    scores = scores.masked_fill(~mask, float("-inf")) if mask is not None else scores
    weights = torch.softmax(scores / self.scale, dim=-1)
    out = self.dropout(weights) @ self.value(x)
    return self.proj(out)
"""


def test_a_repeated_block_is_one_pair_however_long_and_comments_blank_lines_and_imports_do_not_count(tmp_path):
    longer = BLOCK + "\n\ndef more(a, b):\n    total = a.start + b.start\n    return total * 2\n"
    other = (
        "import torch\nfrom torch import nn\n\n# the same, written again\n"
        + BLOCK.replace("    weights", "\n    # softmax over the keys\n    weights")
        + "\n\ndef more(a, b):\n    total = a.start + b.start\n    return total * 2\n"
    )
    root = tree(tmp_path, {"a.py": longer, "b.py": other})
    (pair,) = sizes.repeated_pairs(root)
    assert str(pair) == "tinyformer/a.py:1-11 ~ tinyformer/b.py:5-17"  # blank lines and comments inside: one run
    assert not pair.shape


def test_a_repeat_by_shape_counts_when_the_run_holds_enough_and_a_thin_or_common_one_does_not(tmp_path):
    renamed = BLOCK.replace("forward", "attend").replace("scores", "s").replace("self.scale", "self.tau")
    thin = "CHOICES = {\n" + "".join(f'    "{k}": {k.upper()},\n' for k in "abcdefg") + "}\n"
    thin_again = "KINDS = {\n" + "".join(f'    "{k}": {k.upper()},\n' for k in "pqrstuv") + "}\n"
    root = tree(tmp_path, {"a.py": BLOCK, "b.py": renamed, "c.py": thin, "d.py": thin_again})
    (pair,) = sizes.repeated_pairs(root)  # the dicts: six `"k": K,` lines are too thin a shape to be a repeat
    assert str(pair) == "tinyformer/a.py:1-6 ~ tinyformer/b.py:1-6 (shape)" and pair.shape
    common = {f"m{i}.py": BLOCK for i in range(sizes.MOST_PLACES + 1)}  # in more places than that: an idiom
    assert sizes.repeated_pairs(tree(tmp_path / "common", common)) == []
