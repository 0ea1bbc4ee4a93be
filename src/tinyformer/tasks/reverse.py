"""Sequence reversal (or sorting) with the encoder-decoder Transformer.

Loss: cross-entropy of the teacher-forced decoder, PAD ignored. Metrics: token
accuracy (teacher forced) and exact match (greedy decoding gets the whole
sequence right), plus the cross-attention alignment score: in the last layer,
averaged over heads, the weight each output position puts on the source digit
it must copy (the mirrored position for reversal) and the EOS row on EOS.
Batches are trimmed to their longest sequence, so no step computes padding
columns that no sequence in the batch needs.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tinyformer.config import RunConfig, TrainConfig
from tinyformer.data.reversal import EOS, PAD, DigitTokenizer, ReversalConfig, make_split
from tinyformer.errors import UserError
from tinyformer.generate.decoding import beam_search, greedy_decode
from tinyformer.models.seq2seq import Seq2SeqConfig, build_seq2seq


def seed_recipe_train() -> TrainConfig:
    """Batch 64, 10 epochs of 312 steps, Noam warmup 1,000, Adam betas 0.9/0.98, eps 1e-9."""
    return TrainConfig(
        max_iters=3120,
        batch_size=64,
        lr=128**-0.5 * 1000**-0.5,
        schedule="noam",
        warmup_iters=1000,
        beta2=0.98,
        eps=1e-9,
        weight_decay=0.0,
        grad_clip=0.0,
        eval_interval=312,
        eval_iters=1,
        log_interval=52,
    )


def trim(src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the padding columns that every row of the batch has."""
    return src[:, : int((src != PAD).sum(1).max())], tgt[:, : int((tgt != PAD).sum(1).max())]


class ReverseTask:
    name = "reverse"
    generative = False

    @staticmethod
    def default_config() -> RunConfig:
        return RunConfig(task="reverse", model=Seq2SeqConfig(), data=ReversalConfig(), train=seed_recipe_train())

    @staticmethod
    def build_model(model_config: Seq2SeqConfig) -> nn.Module:
        if getattr(model_config, "impl", "tinyformer") == "torch":
            from tinyformer.models.torch_seq2seq import TorchSeq2Seq

            return TorchSeq2Seq(model_config)
        return build_seq2seq(model_config)

    @staticmethod
    def load_tokenizer(path: Path) -> DigitTokenizer:
        return DigitTokenizer.load(path)

    def __init__(self, config: RunConfig, tokenizer: DigitTokenizer | None = None) -> None:
        d, m = config.data, config.model
        if m.max_len < d.longest + 2:
            raise UserError(
                f"model.max_len={m.max_len} is too short for sequences of {d.longest} digits (needs >= {d.longest + 2})"
            )
        self.config, self.tokenizer = config, tokenizer or DigitTokenizer()
        self.train = make_split(d.n_train, d.min_len, d.max_len, d.seed, d.variant, d.longest)
        self.val = make_split(d.n_val, d.min_len, d.val_max_len or d.max_len, d.seed + 1, d.variant, d.longest)

    def train_batch(self, batch_size: int, generator: torch.Generator):
        idx = torch.randint(len(self.train[0]), (batch_size,), generator=generator)
        src, tgt = trim(self.train[0][idx], self.train[1][idx])
        return src, tgt[:, :-1], tgt[:, 1:]  # source, decoder input, labels

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        src, tgt_in, labels = batch
        out = model(src, tgt_in, labels)
        return out.loss, {"token_acc": token_accuracy(out.logits, labels)}

    def batch_tokens(self, batch) -> int:
        return int((batch[2] != PAD).sum())

    def evaluate(self, model: nn.Module, iters: int, batch_size: int, generator: torch.Generator) -> dict:
        """The whole held-out set (iters and the generator are not needed: it is fixed)."""
        r = evaluate_split(model, *self.val)
        return {k: r[k] for k in ("loss", "token_acc", "exact_match")}


def token_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    real = labels != PAD
    return float((logits.argmax(-1) == labels)[real].float().mean())


def same_sequences(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B,) True where the decoded tokens equal the labels (both padded with PAD)."""
    width = max(pred.size(1), labels.size(1))
    a = torch.nn.functional.pad(pred, (0, width - pred.size(1)), value=PAD)
    b = torch.nn.functional.pad(labels, (0, width - labels.size(1)), value=PAD)
    return (a == b).all(1)


@torch.no_grad()
def evaluate_split(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, beam: int = 1, chunk: int = 500) -> dict:
    """Loss, token accuracy, exact match and exact match per source length."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss = tok = 0.0
    correct = []
    for i in range(0, len(src), chunk):
        s, t = (x.to(device) for x in trim(src[i : i + chunk], tgt[i : i + chunk]))
        out = model(s, t[:, :-1], t[:, 1:])
        loss += float(out.loss) * len(s)
        tok += token_accuracy(out.logits, t[:, 1:]) * len(s)
        ids = dict(bos_id=1, eos_id=EOS, pad_id=PAD, max_new=t.size(1) + 2)
        pred = greedy_decode(model, s, **ids) if beam == 1 else beam_search(model, s, beam=beam, **ids)
        correct.append(same_sequences(pred, t[:, 1:]).cpu())
    model.train(was_training)
    ok = torch.cat(correct)
    lengths = (src != PAD).sum(1) - 1  # digits, without EOS
    per_length = {int(n): float(ok[lengths == n].float().mean()) for n in lengths.unique()}
    return {
        "loss": loss / len(src),
        "token_acc": tok / len(src),
        "exact_match": float(ok.float().mean()),
        "per_length": per_length,
    }


@torch.no_grad()
def cross_alignment(model: nn.Module, src: torch.Tensor, variant: str = "reverse") -> tuple[float, torch.Tensor]:
    """Alignment score of one source (1, n + 1) and the last layer's head-mean cross-attention (T, S).

    Output position i (the decoder input at i predicts target token i) should look at
    the source digit it copies: n - 1 - i when reversing; the EOS row at the source EOS.
    """
    n = src.size(1) - 1
    digits = src[0, :n]
    target = digits.flip(0) if variant == "reverse" else digits.sort().values
    tgt_in = torch.cat([torch.tensor([1]), target])[None]  # (1, n + 1): BOS + target
    was_training = model.training
    model.eval()
    w = model(src, tgt_in, need_weights=True).cross_attentions[-1][0].mean(0)  # (T, S) = (n + 1, n + 1)
    model.train(was_training)
    if variant == "reverse":
        expected = [n - 1 - i for i in range(n)]
    else:  # where each sorted digit came from (stable)
        expected = digits.argsort(stable=True).tolist()
    score = (sum(float(w[i, j]) for i, j in enumerate(expected)) + float(w[n, n])) / (n + 1)
    return score, w
