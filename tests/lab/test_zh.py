"""The Chinese lab pages read as Chinese: no line break inside a sentence, no mistranslated terms.

Markdown turns a line break into a space, so a Chinese sentence continued on the next line shows a stray
space between two characters. Outside fenced code, a line may end in the middle of Chinese text only at a
sentence end (。！？；); everywhere else a paragraph stays on one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "docs" / "lab" / "templates" / "zh"
PAGES = ROOT / "docs" / "lab" / "zh"
FILES = sorted(TEMPLATES.glob("*.md")) + sorted(PAGES.glob("*.md"))

FENCE = re.compile(r"^\s*(```|~~~)")
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # ideographs
CJK_PUNCT = "\u3000-\u303f\uff00-\uffef\u2014\u2018\u2019\u201c\u201d\u2026"  # 、。（），：“” … and the like
SENTENCE_END = "。！？；"
ENDS_MID_SENTENCE = re.compile(rf"[{CJK}{CJK_PUNCT}]$")
STARTS_CJK = re.compile(rf"^[{CJK}{CJK_PUNCT}]")
# Wrong renderings: 种子配方 reads as "random-seed recipe" (the course's original recipe is meant), and
# 一袋数字 is 词袋 (bag of words).
MISTRANSLATIONS = ("种子配方", "一袋数字")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks."""
    found, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and m.group(1) == fence:
            fence = None
        elif fence is None:
            found.append((number, line))
    return found


def broken_sentences(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line` of each line that ends inside a Chinese sentence while the next line continues it."""
    lines = prose_lines(path.read_text(encoding="utf-8"))
    found = []
    for (number, line), (after, following) in zip(lines, lines[1:], strict=False):
        end = line.rstrip()
        if after != number + 1 or not end or end[-1] in SENTENCE_END:
            continue
        if ENDS_MID_SENTENCE.search(end) and STARTS_CJK.match(following):
            found.append(f"{path.relative_to(root)}:{number}: {end[-20:]!r} / {following[:20]!r}")
    return found


def test_there_are_chinese_pages():
    assert len([p for p in FILES if p.parent == TEMPLATES]) >= 4 and len(FILES) >= 8, FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_no_line_break_inside_a_chinese_sentence(path):
    found = broken_sentences(path)
    assert not found, "a Chinese sentence continues on the next line (join the lines):\n" + "\n".join(found)


def test_the_check_finds_a_break_only_inside_a_sentence(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("一句话，\n接着说。\n下一句。\n\n```text\n代码里\n可以换行\n```\n甲\n- 列表\n", encoding="utf-8")
    found = broken_sentences(page, root=tmp_path)
    assert [f.split(":")[1] for f in found] == ["1"], found


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_no_mistranslated_terms(path):
    found = [
        f"{path.relative_to(ROOT)}:{number}: {word}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for word in MISTRANSLATIONS
        if word in line
    ]
    assert not found, "\n".join(found)
