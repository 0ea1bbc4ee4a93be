"""Issue 56's tokenizer figures, printed: the sha256 of the WordPiece and byte-level BPE vocabularies trained
on Tiny Shakespeare's training split in 4 fresh processes with 1 and 2 threads, by tinyformer's trainer
(`tinyformer.data.merges`) and by Hugging Face `tokenizers`' own; and the training time of each (median of
3, side by side in this one run). Run it on an idle machine:

    TINYFORMER_DATA=../shared/data/tinyshakespeare.txt python scripts/tokenizer_figures.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

ONE = r"""
import hashlib, json, os, sys, time
from pathlib import Path
from tinyformer.data.tinyshakespeare import read_text, resolve_path
text = read_text(resolve_path(None))
train = text[: int(len(text) * 0.9)].split("\n\n")
who, kind = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if who == "ours":
    from tinyformer.data.bpe import BPETokenizer
    from tinyformer.data.subword import SubwordTokenizer
    tok = SubwordTokenizer.train(train, 2000) if kind == "wordpiece" else BPETokenizer.train(train, 4096)
    vocab = tok.hf.get_vocab()
else:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=specials, show_progress=False)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        trainer = trainers.BpeTrainer(vocab_size=4096, initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(train, trainer=trainer)
    vocab = tok.get_vocab()
seconds = time.perf_counter() - t0
digest = hashlib.sha256(json.dumps(sorted(vocab.items(), key=lambda kv: kv[1])).encode()).hexdigest()[:16]
print(json.dumps({"sha": digest, "s": seconds, "size": len(vocab)}))
"""


def run(who: str, kind: str, threads: str) -> dict:
    import json

    env = {**os.environ, "RAYON_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
    out = subprocess.run([sys.executable, "-c", ONE, who, kind], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores")
    for kind in ("wordpiece", "bpe"):
        for who in ("ours", "tokenizers"):
            rows = [run(who, kind, threads) for threads in ("1", "2", "1", "2")]
            shas = sorted({r["sha"] for r in rows})
            med = statistics.median(r["s"] for r in rows)
            print(
                f"{kind:<9} {who:<10} vocab {rows[0]['size']:>5}: {len(shas)} distinct vocabularies in 4 processes "
                f"(threads 1, 2, 1, 2) {', '.join(shas)}; training {med:.2f} s (median of 4)"
            )


if __name__ == "__main__":
    main()
