"""The benchmark's reference must compute the same function as MiniGPT, or its speed
ratio compares different work."""

import torch

from tinyformer.bench.reference import RefGPT
from tinyformer.models.gpt import GPTConfig, MiniGPT


def test_reference_is_minigpt_written_plainly():
    torch.manual_seed(0)
    ours = MiniGPT(GPTConfig(vocab_size=65)).eval()
    ref = RefGPT(65).eval()
    assert sum(p.numel() for p in ref.parameters()) == sum(p.numel() for p in ours.parameters()) == 824_832
    rename = {"tok_emb": "tok", "pos_emb": "pos", "mlp.fc": "mlp.0", "mlp.proj": "mlp.2"}
    state = {}
    for key, value in ours.state_dict().items():
        for a, b in rename.items():
            key = key.replace(a, b)
        state[key] = value
    ref.load_state_dict(state)
    x = torch.randint(0, 65, (2, 128))
    y = torch.randint(0, 65, (2, 128))
    torch.testing.assert_close(ref(x, y), ours(x, y).loss, atol=1e-5, rtol=0)
