"""How closely tinyformer's BERT-style encoder reproduces Hugging Face's BertModel on the
offline MiniLM checkpoint: max absolute errors over a padded batch, real positions only.

    tinyformer bench bert-parity
"""

from __future__ import annotations

import torch

SENTENCES = [
    "The man saw the bird with the telescope.",
    "Time flies like an arrow; fruit flies like a banana.",
    "Colourless green ideas sleep furiously.",
]


def run_parity() -> int:
    from tinyformer.models.bert import load_hf_bert, minilm_path
    from tinyformer.viz.hf import load_hf_encoder

    hf, tokenizer, name = load_hf_encoder()
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    real = enc["attention_mask"].bool()  # (B, T)
    with torch.no_grad():
        theirs = hf(**enc, output_attentions=True)
        print(f"{name}: {len(SENTENCES)} sentences padded to {real.size(1)} tokens; max |ours - Hugging Face|")
        for backend in ("sdpa", "manual"):
            ours = load_hf_bert(minilm_path(), backend=backend)
            out = ours(enc["input_ids"], enc["attention_mask"], need_weights=True)
            hidden = (out.last_hidden_state - theirs.last_hidden_state)[real].abs().max()
            att = max(
                (a - b).abs()[real[:, None, :, None].expand_as(a)].max()
                for a, b in zip(out.attentions, theirs.attentions, strict=True)
            )
            print(f"  {backend:>6} backend: last hidden state {hidden:.2e}, attention (all layers) {att:.2e}")
    return 0
