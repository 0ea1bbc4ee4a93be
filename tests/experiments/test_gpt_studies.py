"""The MiniGPT studies at --quick size: each writes its report from its own runs."""

import json
import math
import re

import pytest
import torch

from tests.conftest import needs_play
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.models.gpt import GPTConfig, MiniGPT


def table_rows(text: str, first: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith(first)]


def test_text_loss_scores_likely_text_lower_than_noise():
    from tests.conftest import SYNTHETIC

    tok = CharTokenizer.from_text(SYNTHETIC)
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.tensor(tok.encode(SYNTHETIC))
    for _ in range(80):
        s = torch.randint(len(ids) - 17, (16,))
        w = ids[s[:, None] + torch.arange(17)]
        loss = model(w[:, :-1], w[:, 1:]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    noise = "".join(tok.decode(torch.randint(tok.vocab_size, (200,), generator=torch.Generator().manual_seed(0))))
    from tinyformer.tasks.gpt import text_loss

    def loss(text: str) -> float:
        return text_loss(model, torch.tensor(tok.encode(text)))

    assert loss(SYNTHETIC[:200]) + 1.0 < loss(noise)


@pytest.mark.slow
@needs_play
def test_quick_ablation_report(quick_study):
    study = quick_study("ablation")
    text = study.report.read_text()
    rows = {r[0]: r for r in table_rows(text, "| ")[1:]}  # after the header row
    assert list(rows) == ["baseline", "1-layer", "1-head", "no-mask"]
    assert float(rows["baseline"][3]) > 0 and float(rows["no-mask"][4]) > 0  # numbers filled in from the runs
    samples = re.findall(r"### (?:baseline|1-layer|1-head|no-mask)\n\n```\n(.*?)\n```", text, re.S)
    assert [len(s) for s in samples] == [300] * 4
    # each sample, the one its loss under the baseline scores, is also a file the guide quotes (exercises 1, 3)
    files = [(study.folder / f"sample-{cell}.txt").read_text(encoding="utf-8") for cell in rows]
    assert files == [s + "\n" for s in samples]
    no_mask, baseline = float(rows["no-mask"][3]), float(rows["baseline"][3])
    said = "is lower than the baseline" if no_mask < baseline else "is not lower than the baseline"
    assert said in text  # the verdict follows the measured numbers
    judged_no_mask, judged_base = float(rows["no-mask"][4]), float(rows["baseline"][4])
    shows = "Its free generation shows it" if judged_no_mask > judged_base + 0.5 else "do not separate them"
    assert shows in text and (study.folder / "val_loss.png").is_file()


@pytest.mark.slow
@needs_play
def test_quick_scale_report_counts_parameters_both_ways(quick_study):
    study = quick_study("scale")
    text = study.report.read_text()
    rows = {r[0]: r for r in table_rows(text, "| ") if r[0] in ("base", "deep-8", "wide-256")}
    assert len(rows) == 3 and all(r[2] == r[3] for r in rows.values())  # formula == counted
    assert int(rows["deep-8"][2]) > int(rows["base"][2]) and int(rows["wide-256"][2]) > int(rows["deep-8"][2])
    assert "tokens per parameter" in text and (study.folder / "loss_vs_time.png").is_file()


@pytest.mark.slow
@needs_play
def test_quick_positions_report_says_learned_cannot_extrapolate(quick_study):
    text = quick_study("positions").report.read_text()
    head, same = text.split("at the same size and steps")
    rows = {r[0]: r[1:] for r in table_rows(head, "| ") if r[0] in ("learned", "sinusoidal", "rope", "rope + NTK")}
    assert rows["learned"][1].startswith("n/a: learned positions stop at 32")
    assert all(float(v) > 0 for k in ("sinusoidal", "rope", "rope + NTK") for v in rows[k])
    assert rows["rope"][0] == rows["rope + NTK"][0]  # at the trained context NTK scaling is the identity
    sizes = {r[0]: r[1:] for r in table_rows(same, "| ") if r[0] != "cell"}
    assert set(sizes) == {"learned", "llama"}  # MiniGPT beside the Llama-style GPT (the gpt_llama preset)
    learned, llama = (int(sizes[k][0].replace(",", "")) for k in ("learned", "llama"))
    assert abs(learned - llama) / learned < 0.05 and all(float(sizes[k][1]) > 0 for k in sizes)


@pytest.mark.slow
def test_quick_kv_cache_benchmark_report(quick_study):
    study = quick_study("kv-cache")
    text = study.report.read_text()
    assert text.count("| context | no cache ms/token | cache ms/token | cache speedup |") == 2
    assert "HF generate ms/token" in text and "µs per context token" in text
    assert (study.folder / "ms_per_token.png").is_file()


@pytest.mark.slow  # trains a BPE vocabulary; not a source of the lab guide, so it has its own folder
def test_quick_tokenizers_report_compares_bits_per_character(tmp_path, text_file):
    from tinyformer.experiments import tokenizers

    text = tokenizers.run(tmp_path, quick=True, data=str(text_file)).read_text()
    assert "| char | " in text and "| bpe | " in text and "val bpc by" in text
    char, bpe = (json.loads((tmp_path / n / "config.json").read_text()) for n in ("char", "bpe"))
    assert char["data"]["tokenizer"] == "char" and bpe["data"]["tokenizer"] == "bpe" and bpe["model"]["tie_weights"]
    rows = [json.loads(line) for line in (tmp_path / "bpe" / "metrics.jsonl").read_text().splitlines()]
    pairs = [(r["bpc"], r["loss"]) for r in rows if r.get("split") == "val"]
    assert pairs and all(b < lo / math.log(2) for b, lo in pairs)  # a BPE token spells more than one character
    assert (tmp_path / "bpc_vs_time.png").stat().st_size > 1000
