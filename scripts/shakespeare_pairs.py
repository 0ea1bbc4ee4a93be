"""Write a small table of pairs for `tinyformer train seq2seq`, made from the words of Tiny Shakespeare.

    python scripts/shakespeare_pairs.py runs/words.tsv                   # word -> the word reversed
    python scripts/shakespeare_pairs.py runs/upper.tsv --target upper    # word -> WORD
    tinyformer train seq2seq --config configs/seq2seq_words.toml --data runs/words.tsv \\
        --source-col src --target-col tgt

The sources are the distinct words of 3-10 letters of the play, lower-cased, in the order they first
appear; the TSV has a header row with the columns src and tgt. The play is read as every tinyformer
command reads it: --data, else $TINYFORMER_DATA, else the verified download in the cache folder.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tinyformer.data.tinyshakespeare import read_text, resolve_path

TARGETS = {"reverse": lambda w: w[::-1], "upper": str.upper}


def words(text: str, shortest: int = 3, longest: int = 10) -> list[str]:
    """Distinct lower-case words of `shortest`-`longest` letters, in the order they first appear."""
    found = (w for w in re.findall(r"[a-z]+", text.lower()) if shortest <= len(w) <= longest)
    return list(dict.fromkeys(found))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="the .tsv file to write")
    p.add_argument("--target", choices=sorted(TARGETS), default="reverse", help="what the model should write")
    p.add_argument("--data", help="the play (default: $TINYFORMER_DATA, else the cached download)")
    a = p.parse_args()
    pairs = [(w, TARGETS[a.target](w)) for w in words(read_text(resolve_path(a.data)))]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("src\ttgt\n" + "".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    print(f"wrote {len(pairs):,} pairs ({a.target}) to {out}")


if __name__ == "__main__":
    main()
