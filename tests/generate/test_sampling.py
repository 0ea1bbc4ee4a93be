import torch
from torch import nn

from tinyformer.generate.sampling import filter_logits, generate, next_token
from tinyformer.models.outputs import ModelOutput


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = torch.isfinite(filter_logits(logits, top_k=2))
    assert kept.tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    probs = torch.tensor([[0.5, 0.05, 0.3, 0.15]])
    logits = probs.log()
    assert torch.isfinite(filter_logits(logits, top_p=0.7)).tolist() == [[True, False, True, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.8)).tolist() == [[True, False, True, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.81)).tolist() == [[True, False, True, True]]
    assert torch.isfinite(filter_logits(logits, top_p=0.01)).tolist() == [[True, False, False, False]]


def test_temperature_zero_is_greedy_and_sampling_is_seeded():
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(next_token(logits, temperature=0), logits.argmax(-1, keepdim=True))
    a = [next_token(logits, 1.0, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(*a)
    draws = torch.cat(
        [next_token(logits, 1.0, top_k=3, generator=torch.Generator().manual_seed(s)) for s in range(50)], 1
    )
    top3 = logits.topk(3).indices
    assert all(int(d) in top3[i] for i in range(3) for d in draws[i])  # top-k is honoured


class Spy(nn.Module):
    """A 'model' that records how much context it was given."""

    def __init__(self, block_size=8, vocab=5):
        super().__init__()
        self.config = type("C", (), {"block_size": block_size})()
        self.vocab, self.seen = vocab, []
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        self.seen.append(idx.size(1))
        return ModelOutput(logits=torch.zeros(idx.size(0), idx.size(1), self.vocab))


def test_context_is_cropped_to_the_block_size():
    spy = Spy(block_size=8)
    out = generate(spy, torch.zeros(2, 3, dtype=torch.long), 20, temperature=0)
    assert out.shape == (2, 23)
    assert spy.seen[:6] == [3, 4, 5, 6, 7, 8] and max(spy.seen) == 8
