import pytest
import torch

from tinyformer.errors import UserError
from tinyformer.export import export_hf
from tinyformer.generate.sampling import generate
from tinyformer.models.gpt import GPTConfig, MiniGPT

transformers = pytest.importorskip("transformers")


def random_gpt(**kw) -> MiniGPT:
    """A MiniGPT whose every parameter (biases and LayerNorms too) is random, so a misplaced one shows."""
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=23, block_size=24, n_layer=2, n_head=4, n_embd=32, **kw)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_hf_gpt2_loads_the_export_and_computes_the_same_function(tmp_path, qkv_bias):
    model = random_gpt(qkv_bias=qkv_bias)
    hf = transformers.GPT2LMHeadModel.from_pretrained(export_hf(model, tmp_path / "hf")).eval()
    idx = torch.randint(0, 23, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(idx).logits, hf(idx).logits
    assert (ours - theirs).abs().max() < 1e-4
    prompt = idx[:1, :4]
    with torch.no_grad():
        hf_tokens = hf.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(model, prompt, 20, temperature=0), hf_tokens)


def test_other_position_kinds_are_refused(tmp_path):
    with pytest.raises(UserError, match="positions='rope'.*only learned positions"):
        export_hf(random_gpt(positions="rope"), tmp_path / "x")
    assert not (tmp_path / "x").exists()
