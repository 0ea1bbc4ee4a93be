"""How closely tinyformer's BERT-style encoder reproduces Hugging Face's BertModel on the
offline MiniLM checkpoint: max absolute errors over a padded batch, real positions only.

Each backend is measured on its own path: the "sdpa" row runs the fused
`F.scaled_dot_product_attention` (no weights are asked for, so none are made);
the "manual" row writes softmax(QK^T / sqrt(Dh))V out and is also compared on
the attention weights of every layer, which only it can return.

    tinyformer bench bert-parity
"""

from __future__ import annotations

import torch

SENTENCES = [
    "The man saw the bird with the telescope.",
    "Time flies like an arrow; fruit flies like a banana.",
    "Colourless green ideas sleep furiously.",
]


def parity() -> dict[str, dict[str, float]]:
    """{backend: {"hidden": max |ours - HF| of the last hidden state, "attention": same for weights (manual)}}."""
    from tinyformer.hub import minilm_path
    from tinyformer.models.hf_bert import load_hf_bert
    from tinyformer.viz.hf import load_hf_encoder

    hf, tokenizer, _ = load_hf_encoder()
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    real = enc["attention_mask"].bool()  # (B, T)
    figures = {}
    with torch.no_grad():
        theirs = hf(**enc, output_attentions=True)
        for backend in ("sdpa", "manual"):
            ours = load_hf_bert(minilm_path(), backend=backend)
            out = ours(enc["input_ids"], enc["attention_mask"], need_weights=backend == "manual")
            figures[backend] = {"hidden": float((out.last_hidden_state - theirs.last_hidden_state)[real].abs().max())}
            if out.attentions is not None:
                figures[backend]["attention"] = max(
                    float((a - b).abs()[real[:, None, :, None].expand_as(a)].max())
                    for a, b in zip(out.attentions, theirs.attentions, strict=True)
                )
    return figures


def run_parity() -> int:
    figures = parity()
    print(f"{len(SENTENCES)} sentences, padded; max |ours - Hugging Face| over real positions:")
    print(f"  sdpa backend (fused F.scaled_dot_product_attention): last hidden state {figures['sdpa']['hidden']:.2e}")
    m = figures["manual"]
    print(
        f"  manual backend (weights written out): last hidden state {m['hidden']:.2e}, attention {m['attention']:.2e}"
    )
    return 0
