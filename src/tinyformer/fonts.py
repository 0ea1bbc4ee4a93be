"""Fonts for plot labels: Chinese, Japanese and Korean tokens must render as characters.

matplotlib falls back glyph by glyph through `font.family`, so we keep its
default font first and append an installed CJK font when labels need one.
"""

from __future__ import annotations

import sys
from pathlib import Path

CJK_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Serif CJK SC",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
)
_warned = False


def needs_cjk(labels: list[str]) -> bool:
    return any(
        "\u2e80" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" or "\uff00" <= ch <= "\uffef"
        for label in labels
        for ch in label
    )


def find_cjk_font() -> str | None:
    """An installed CJK font family, registering .ttc collections matplotlib's scan skips."""
    from matplotlib import font_manager

    def known() -> str | None:
        installed = {f.name for f in font_manager.fontManager.ttflist}
        return next((name for name in CJK_FAMILIES if name in installed), None)

    if (found := known()) is None:
        for path in font_manager.findSystemFonts():
            if any(key in Path(path).name.lower() for key in ("cjk", "wqy", "sourcehan", "simhei", "yahei")):
                font_manager.fontManager.addfont(path)
        found = known()
    return found


def use_fonts_for(labels: list[str]) -> None:
    """Add a CJK fallback font when `labels` need one; say once how to install one if none exists."""
    global _warned
    import matplotlib

    if not needs_cjk(labels):
        return
    font = find_cjk_font()
    if font is None:
        if not _warned:
            print(
                "note: no CJK font found, Chinese labels will show as boxes; install one, e.g. "
                "`apt-get install fonts-noto-cjk`",
                file=sys.stderr,
            )
            _warned = True
        return
    matplotlib.rcParams["font.family"] = ["DejaVu Sans", font]  # glyph-by-glyph fallback
