"""The sizes DESIGN.md section 2 holds as tests ("Limits are tests"), measured on the code itself (`ast` and
`tokenize`, nothing imported, so any commit's `src` can be measured): the length of every function, of every
file, and the pairs of places that repeat a six-line run.

`tests/test_sizes.py` holds `src/` to the limits below; `scripts/seam_counts.py` prints the same measures. A
function's length is its first line (a decorator's, else its `def`) to its last (its docstring included); a
nested function counts on its own and inside the function that holds it. A file's length is its line count.

Repeated runs are counted our own way, calibrated on the `duplicates` command (which CI machines do not have; on
the tree of issue 71 it counted 10 pairs, 9 of them in .py files, and this counts the same 9 and one more; at
5703d61 it counted 22 and this 22, at f6ebda4 21 and 20). Each module's lines are read without blank lines,
comments alone on their line, import statements, lines of lone punctuation (`)`, `],`, a docstring's closing
quotes) and lines of strings and punctuation alone (a one-line docstring, `"a",` or `("a", "b"),` in a table);
white space is folded. A line's shape folds its names to `N`, numbers to `0` and strings to `S`, keeping
keywords, operators and a trailing comment's words (a docstring's inner lines are kept as they read). A run is
six consecutive lines; two places share it when their six lines are the same to the letter, or have the same
shape and hold at least `SHAPE_TOKENS` tokens (a thinner shape, six `x: int,` say, is no repeat). A run standing
in more than `MOST_PLACES` places is an idiom, not a repeat. The runs two places share that overlap or touch on
both sides make one pair, so a long repeated block counts once.
"""

from __future__ import annotations

import ast
import io
import itertools
import keyword
import re
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

FUNCTION_LINES = 60  # no function longer
FILE_LINES = 300  # a file longer is a long file ...
LONG_FILES = 6  # ... and there are at most this many
PAIRS = 10  # places that repeat a run, at most
RUN = 6  # lines in a run
SHAPE_TOKENS = 28  # tokens a run needs to be a repeat by shape alone (about 5 a line)
MOST_PLACES = 8  # a run in more places than this is an idiom


def modules(root: Path = SRC) -> list[Path]:
    return sorted((root / "tinyformer").rglob("*.py"))


# ---- functions and files ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Function:
    where: str  # path:line of its `def`, relative to the root
    name: str  # qualified: Class.method, outer.inner
    lines: int


def functions(root: Path, path: Path) -> list[Function]:
    found: list[Function] = []
    rel = path.relative_to(root).as_posix()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append(Function(f"{rel}:{child.lineno}", name, child.end_lineno - first + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def every_function(root: Path = SRC) -> list[Function]:
    """Every function of the package, longest first."""
    return sorted((f for p in modules(root) for f in functions(root, p)), key=lambda f: -f.lines)


def file_lengths(root: Path = SRC) -> list[tuple[int, str]]:
    """(lines, path relative to the root) of every module, longest first."""
    found = ((len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(root).as_posix()) for p in modules(root))
    return sorted(found, key=lambda f: (-f[0], f[1]))


# ---- repeated runs ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    number: int  # in the file, from 1
    shape: str  # names, numbers and strings folded
    text: str  # as it reads, white space folded
    tokens: int  # its code's tokens, a comment's aside (a docstring's line: its words)


@dataclass(frozen=True)
class Place:
    path: str  # relative to the root
    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.path}:{self.first}-{self.last}"


@dataclass(frozen=True)
class Pair:
    a: Place
    b: Place
    shape: bool  # alike in shape only: no run of the pair is the same to the letter

    def __str__(self) -> str:
        return f"{self.a} ~ {self.b}" + (" (shape)" if self.shape else "")


SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING}
FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12 tokenizes an f-string's parts: one S
FSTRING_END = getattr(tokenize, "FSTRING_END", None)
PUNCTUATION = re.compile(r"\W*")  # no letter, digit or underscore


def fold(text: str) -> str:
    return " ".join(text.split())


def token_shape(tok: tokenize.TokenInfo) -> str:
    if tok.type == tokenize.NAME:
        return tok.string if keyword.iskeyword(tok.string) else "N"
    if tok.type == tokenize.NUMBER:
        return "0"
    if tok.type == tokenize.COMMENT:
        return fold(tok.string)
    return tok.string


def lines_of(text: str) -> list[Line]:
    """The lines of a module that count, each with its shape."""
    raw = text.splitlines()
    imports = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.update(range(node.lineno, node.end_lineno + 1))
    shapes: dict[int, list[tuple[int, str]]] = defaultdict(list)  # line -> (token type, shape) starting on it
    inside: set[int] = set()  # lines a string goes on to, after the one it starts on
    opened: tokenize.TokenInfo | None = None  # the f-string being read (3.12), and how deep in f-strings
    depth = 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == FSTRING_START:
            opened, depth = opened or tok, depth + 1
        elif tok.type == FSTRING_END:
            depth -= 1
            if depth == 0:
                shapes[opened.start[0]].append((tokenize.STRING, "S"))
                inside.update(range(opened.start[0] + 1, tok.end[0] + 1))
                opened = None
        elif depth == 0 and tok.type not in SKIP:
            shapes[tok.start[0]].append((tok.type, "S" if tok.type == tokenize.STRING else token_shape(tok)))
            if tok.type == tokenize.STRING:
                inside.update(range(tok.start[0] + 1, tok.end[0] + 1))
    found = []
    for number, line in enumerate(raw, 1):
        folded = fold(line)
        if number in imports or not folded or PUNCTUATION.fullmatch(folded):
            continue
        if number in inside:  # a docstring's (or a long string's) words
            found.append(Line(number, folded, folded, len(folded.split())))
            continue
        code = [(kind, s) for kind, s in shapes[number] if kind != tokenize.COMMENT]
        if all(kind in (tokenize.OP, tokenize.STRING) for kind, _ in code):
            continue  # a comment alone, lone punctuation (with a comment), strings and punctuation alone
        found.append(Line(number, " ".join(s for _, s in shapes[number]), folded, len(code)))
    return found


def repeated_pairs(root: Path = SRC) -> list[Pair]:
    """The pairs of places of the package that share a six-line run, each long repeated block once."""
    files = {p.relative_to(root).as_posix(): lines_of(p.read_text(encoding="utf-8")) for p in modules(root)}
    places: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)  # a run's shape -> where it starts
    for path, lines in files.items():
        for k in range(len(lines) - RUN + 1):
            places[tuple(line.shape for line in lines[k : k + RUN])].append((path, k))
    matches: dict[tuple[str, str], list[tuple[int, int, bool]]] = defaultdict(list)
    for where in places.values():
        if not 2 <= len(where) <= MOST_PLACES:
            continue
        for (pa, ka), (pb, kb) in itertools.combinations(where, 2):  # pa <= pb; in one file, ka < kb
            a, b = files[pa][ka : ka + RUN], files[pb][kb : kb + RUN]
            if pa == pb and kb - ka < RUN:
                continue  # one run repeating itself line by line
            same = [line.text for line in a] == [line.text for line in b]
            if same or sum(line.tokens for line in a) >= SHAPE_TOKENS:
                matches[pa, pb].append((ka, kb, same))
    pairs = []
    for (pa, pb), runs in matches.items():
        for a0, a1, b0, b1, same in blocks(sorted(runs)):
            a, b = files[pa], files[pb]
            pairs.append(Pair(Place(pa, a[a0].number, a[a1].number), Place(pb, b[b0].number, b[b1].number), not same))
    return sorted(pairs, key=lambda p: (p.a.path, p.a.first, p.b.path, p.b.first))


def blocks(runs: list[tuple[int, int, bool]]) -> list[tuple[int, int, int, int, bool]]:
    """Runs (start in a, start in b, same to the letter) that overlap or touch on both sides, merged into
    blocks: (first, last kept line in a, first, last in b, any run the same to the letter)."""
    merged: list[list] = []
    for ka, kb, same in runs:
        for m in merged:
            if m[0] - RUN <= ka <= m[1] + 1 and m[2] - RUN <= kb <= m[3] + 1:
                m[:] = [min(m[0], ka), max(m[1], ka + RUN - 1), min(m[2], kb), max(m[3], kb + RUN - 1), m[4] or same]
                break
        else:
            merged.append([ka, ka + RUN - 1, kb, kb + RUN - 1, same])
    return [tuple(m) for m in merged]
