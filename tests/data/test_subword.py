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
    with pytest.raises(UserError, match="cannot read"):
        SubwordTokenizer.load(tmp_path / "missing.json")


def test_pad_batch_shapes():
    ids, mask = pad_batch([[2, 7, 3], [2, 3]])
    assert ids.tolist() == [[2, 7, 3], [2, 3, PAD_ID]]
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]] and mask.dtype == torch.long
