"""Every `tinyformer ...` command the README and the lab guide print parses with the CLI's own parser.

Nothing runs: each line is handed to `build_parser().parse_args`, which exits with code 2 on an unknown
command, flag or choice. `[--quick]` (the docs' mark for an optional flag) is parsed with the flag in.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tinyformer.cli import build_parser
from tinyformer.lab.sources import SOURCES

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
INLINE = re.compile(r"`(tinyformer [^`]+)`")


def commands(path: Path) -> list[str]:
    """`tinyformer ...` lines of code fences, and inline code spans that start with `tinyformer `."""
    found, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            if line.lstrip().startswith("tinyformer "):
                found.append(line.strip())
        else:
            found += INLINE.findall(line)
    return found


def argv(line: str) -> list[str]:
    line = re.sub(r"\[(--?[\w-]+(?: [^\]]+)?)\]", r"\1", line)  # "[--quick]" -> "--quick"
    return shlex.split(line, comments=True)[1:]


def where_printed() -> dict[str, list[str]]:
    """Each distinct command -> the files that print it (the lab's pages and templates repeat most of them)."""
    found: dict[str, list[str]] = {}
    for p in DOCS:
        for c in commands(p):
            found.setdefault(c, []).append(str(p.relative_to(ROOT)))
    return found


WHERE = where_printed()


def test_the_docs_print_commands():
    """An extractor that finds nothing would pass every case below: the README alone shows over a dozen, the
    manual dozens."""
    from_readme = [c for c, files in WHERE.items() if "README.md" in files]
    from_manual = [c for c, files in WHERE.items() if "docs/manual.md" in files]
    assert len(from_readme) >= 15 and len(from_manual) >= 40, (len(from_readme), len(from_manual))


@pytest.mark.parametrize("line", list(WHERE), ids=[c[:90] for c in WHERE])
def test_command_parses(line):
    """Parsed once however many pages print it; a failure names them all."""
    try:
        build_parser().parse_args(argv(line))
    except SystemExit as e:
        assert e.code == 0, f"{', '.join(WHERE[line])} print a command that does not parse (exit {e.code})"


@pytest.mark.parametrize("name", list(SOURCES))
def test_lab_source_commands_parse(name):
    """The commands `tinyformer lab build --train` runs are the ones the guide prints: they must parse too."""
    for raw in SOURCES[name].argv(False) + SOURCES[name].argv(True):
        build_parser().parse_args([a.replace("{dir}", f"runs/{name}").replace("{runs}", "runs") for a in raw])


def test_a_bad_command_is_caught(capsys):
    """The check itself: a flag that does not exist makes parse_args exit with 2."""
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv("tinyformer train gpt --no-such-flag"))
    assert e.value.code == 2


def test_a_source_reads_only_sources_made_before_it():
    """`lab build --train` makes the sources in the registry's order: a view of a run must come after the run."""
    made: list[str] = []
    for name, source in SOURCES.items():
        for raw in source.argv(False) + source.argv(True):  # at full size and at CI size
            for arg in raw:
                if arg.startswith("{runs}/"):
                    read = arg.removeprefix("{runs}/")
                    assert any(read == m or read.startswith(m + "/") for m in made), (name, read)
        made.append(name)


def test_a_printed_source_command_is_what_a_shell_splits_back():
    """The guide prints a source's command where a value is missing: pasted into a shell, it must give the CLI the
    same arguments (unquoted, `exact_match>=0.99` would redirect the output into a file named `=0.99`)."""
    from tinyformer.lab.placeholders import command_text

    args = ["train", "reverse", "--set", "train.stop_at=exact_match>=0.99", "--out", "{dir}", "7 3 0", "it's", "a!b"]
    line = command_text(args, "runs", "runs/x")
    assert '--set "train.stop_at=exact_match>=0.99" --out runs/x "7 3 0"' in line
    assert shlex.split(line) == [a.replace("{dir}", "runs/x") for a in args]
    cell = SOURCES["experiments/reverse-ablation/one-head"]
    assert shlex.split(command_text(cell.argv(False)[0], "runs", "runs/one-head")) == [
        a.replace("{dir}", "runs/one-head") for a in cell.argv(False)[0]
    ]
