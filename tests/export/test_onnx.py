"""`tinyformer export onnx`: the language model (with its attention on request) and the reversal encoder-decoder
as graphs that onnxruntime runs as PyTorch does. The command checks itself; these tests check again, on inputs
of their own: other lengths and batches, the attention output, greedy decoding with the graphs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.cli_helpers import cli
from tinyformer import api
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.export.onnx import _session, export_onnx, onnx_greedy, reversal_greedy
from tinyformer.generate.sampling import generate
from tinyformer.models.gpt import GPTConfig, MiniGPT

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytestmark = pytest.mark.slow  # each export traces the model: seconds


def test_a_language_model_and_its_attention_run_in_onnxruntime_as_in_pytorch(trained, tmp_path):
    r = cli("export", "onnx", str(trained), str(tmp_path / "lm"), "--attention")
    assert r.returncode == 0, r.stderr
    assert "100 greedy tokens identical" in r.stdout and "largest difference from PyTorch" in r.stdout
    assert sorted(p.name for p in (tmp_path / "lm").iterdir()) == ["model.onnx", "tokenizer.json"]
    run = api.load(trained)
    model = run.model.float().eval()
    session = _session(tmp_path / "lm" / "model.onnx")
    ids = torch.randint(0, model.config.vocab_size, (3, 32), generator=torch.Generator().manual_seed(5))
    for B, T in ((3, 32), (2, 9), (1, 1)):
        logits, attention = session.run(None, {"ids": ids[:B, :T].numpy()})
        with torch.no_grad():
            want = model(ids[:B, :T], need_weights=True)
        assert np.abs(logits - want.logits.numpy()).max() <= 1e-4
        assert attention.shape == (1, B, 2, T, T)  # (layers, batch, heads, T, T)
        assert np.abs(attention - torch.stack(want.attentions).numpy()).max() <= 1e-4
    prompt = run.tokenizer.encode("ROMEO:")
    with torch.no_grad():
        ours = generate(model, torch.tensor([prompt]), 80, temperature=0)[0].tolist()
    assert onnx_greedy(session, prompt, 80, model.config.block_size) == ours  # 80 > block_size: the window slides


def test_a_llama_style_model_exports_for_lengths_past_its_block_size(tmp_path):
    torch.manual_seed(0)
    c = GPTConfig(
        vocab_size=20, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, positions="rope", ffn="swiglu",
        norm="rmsnorm", norm_eps=1e-6, bias=False,
    )  # fmt: skip
    model = MiniGPT(c).eval()
    tokenizer = CharTokenizer(list("abcdefghijklmnopqrst"))
    run = SimpleNamespace(
        model=model,
        tokenizer=tokenizer,
        config=SimpleNamespace(task="gpt", sample=SimpleNamespace(prompt="abc")),
        path=tmp_path / "run",  # no export goes into the run's own folder
    )
    result = export_onnx(run, tmp_path / "out")
    assert result.graphs == ["model.onnx"] and result.max_diff <= 1e-4
    session = _session(tmp_path / "out" / "model.onnx")
    ids = torch.randint(0, 20, (1, 40), generator=torch.Generator().manual_seed(1))  # 2.5x block_size
    with torch.no_grad():
        want = model(ids).logits.numpy()
    assert np.abs(session.run(None, {"ids": ids.numpy()})[0] - want).max() <= 1e-4


def test_the_reversal_model_exports_as_an_encoder_and_a_decoder_step_that_decode_greedily(reversal_run, tmp_path):
    from tinyformer.data.reversal import BOS, EOS, PAD, make_split
    from tinyformer.tasks.reverse import decode

    r = cli("export", "onnx", str(reversal_run), str(tmp_path / "rev"))
    assert r.returncode == 0, r.stderr
    assert "greedy outputs identical" in r.stdout
    encoder, decoder = (_session(tmp_path / "rev" / f"{g}.onnx") for g in ("encoder", "decoder"))
    run = api.load(reversal_run)
    model = run.model.float().eval()
    src, tgt = make_split(16, 3, 12, seed=777, width=12)  # other inputs than the command's own
    memory = encoder.run(None, {"src": src.numpy()})[0]
    with torch.no_grad():
        enc = model.encode(src)
        assert np.abs(memory - enc.memory.numpy()).max() <= 1e-4
        step = decoder.run(None, {"tgt_in": tgt[:, :4].numpy(), "memory": memory, "src": src.numpy()})[0]
        want = model.decode(tgt[:, :4], enc.memory, enc.src_valid).logits[:, -1]
        assert np.abs(step - want.numpy()).max() <= 1e-4
        ours = decode(model, src)
    assert torch.equal(reversal_greedy(encoder, decoder, src, BOS, EOS, PAD, ours.size(1)), ours)


def test_what_onnx_export_does_not_take_is_one_line(reversal_run, tmp_path):
    r = cli("export", "onnx", str(reversal_run), str(tmp_path / "x"), "--attention")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--attention is for a language model" in r.stderr
