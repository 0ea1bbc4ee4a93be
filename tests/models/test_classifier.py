import pytest
import torch

from tinyformer.errors import UserError
from tinyformer.models.bert import BertConfig, BertForMaskedLM
from tinyformer.models.classifier import ClassifierConfig, TextClassifier, load_encoder_from

V = 30
SMALL = dict(vocab_size=V, labels=["a", "b", "c", "d"], n_embd=16, n_layer=2, n_head=2, d_ff=32, block_size=32)
SMALL |= dict(hidden=16, kernel_sizes=[2, 3], n_filters=8, dropout=0.0)
KINDS = [
    dict(encoder="transformer", pooling="mean"),
    dict(encoder="transformer", pooling="cls"),
    dict(encoder="cnn"),
    dict(encoder="rnn"),
    dict(encoder="lstm", bidirectional=True),
    dict(encoder="gru"),
    dict(encoder="gru", bidirectional=True, n_layer=1),
]
IDS = [f"{k['encoder']}-{k.get('pooling', '')}{'bi' if k.get('bidirectional') else ''}" for k in KINDS]


def model(**kw) -> TextClassifier:
    torch.manual_seed(0)
    return TextClassifier(ClassifierConfig(**(SMALL | kw))).eval()


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_extra_padding_never_changes_the_logits(kind):
    m = model(**kind)
    g = torch.Generator().manual_seed(1)
    lengths = [7, 3, 5, 1]
    ids = torch.randint(5, V, (4, 7), generator=g)
    mask = (torch.arange(7)[None] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    ids = ids * mask  # [PAD] = 0 after each row
    wide_ids = torch.cat([ids, torch.randint(5, V, (4, 6), generator=g)], 1)  # padding with random ids: only the mask
    wide_mask = torch.cat([mask, torch.zeros(4, 6, dtype=torch.long)], 1)  # says what is padding
    a = m(ids, mask).logits
    b = m(wide_ids, wide_mask).logits
    alone = torch.cat([m(ids[i : i + 1, :n], mask[i : i + 1, :n]).logits for i, n in enumerate(lengths)])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(a, alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_every_classifier_overfits_a_tiny_labelled_set(kind):
    """32 random texts with random labels out of 4: only a trained encoder separates them all."""
    m = model(**kind).train()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, V, (32, 9), generator=g)
    lengths = torch.randint(3, 10, (32,), generator=g)
    mask = (torch.arange(9)[None] < lengths[:, None]).long()
    ids, labels = ids * mask, torch.randint(0, 4, (32,), generator=g)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(300):
        loss = m(ids, mask, labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (m.eval()(ids, mask).logits.argmax(-1) == labels).float().mean().item()
        m.train()
        if acc == 1.0:
            break
    assert acc == 1.0


def test_only_the_transformer_returns_attention_maps():
    ids = torch.randint(5, V, (2, 6))
    out = model(encoder="transformer")(ids, need_weights=True)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (2, 2, 6, 6)
    assert model(encoder="lstm")(ids, need_weights=True).attentions is None


def test_encoder_loads_from_a_masked_lm_and_mismatches_are_named():
    mlm_config = BertConfig(vocab_size=V, block_size=32, n_layer=2, n_head=2, n_embd=16, d_ff=32, positions="rope")
    torch.manual_seed(5)
    mlm = BertForMaskedLM(mlm_config)
    clf = model(encoder="transformer")
    load_encoder_from(clf, mlm.state_dict(), mlm_config)
    for name, p in clf.encoder.state_dict().items():
        torch.testing.assert_close(p, mlm.bert.state_dict()[name], rtol=0, atol=0)
    with pytest.raises(UserError, match="n_layer=2, this classifier 3; set model.n_layer=2"):
        load_encoder_from(model(encoder="transformer", n_layer=3), mlm.state_dict(), mlm_config)
    with pytest.raises(UserError, match="set model.positions=rope"):
        load_encoder_from(model(encoder="transformer", positions="learned"), mlm.state_dict(), mlm_config)
    with pytest.raises(UserError, match="encoder='transformer'"):
        load_encoder_from(model(encoder="cnn"), mlm.state_dict(), mlm_config)


def test_config_names_bad_fields():
    with pytest.raises(UserError, match="model.encoder='bert' is not one of"):
        ClassifierConfig(encoder="bert")
    with pytest.raises(UserError, match="kernel_sizes"):
        ClassifierConfig(kernel_sizes=[])
