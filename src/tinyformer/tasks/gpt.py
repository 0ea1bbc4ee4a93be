"""Character-level language modelling with MiniGPT on Tiny Shakespeare (or any text).

Loss: mean next-token cross-entropy. Evaluation: mean val loss over a fixed,
seeded set of random windows. The task is generative: after training, the CLI
writes sample.txt, a continuation of `sample.prompt`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from tinyformer.config import RunConfig
from tinyformer.data.tinyshakespeare import TokenSplits, read_text, resolve_path
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT, param_breakdown


class GPTTask:
    name = "gpt"
    generative = True  # its models continue text: sample.txt is written after training

    @staticmethod
    def default_config() -> RunConfig:
        return RunConfig(task="gpt", model=GPTConfig())

    @staticmethod
    def build_model(model_config: GPTConfig) -> MiniGPT:
        return MiniGPT(model_config)

    param_breakdown = staticmethod(param_breakdown)  # (part, formula, per copy, copies)

    @staticmethod
    def load_tokenizer(path: Path) -> CharTokenizer:
        return CharTokenizer.load(path)

    def __init__(self, config: RunConfig, tokenizer: CharTokenizer | None = None) -> None:
        """Read the text, fit (or reuse) the tokenizer and fix model.vocab_size to it."""
        text = read_text(resolve_path(config.data.path or None))
        self.tokenizer = tokenizer or CharTokenizer.from_text(text)
        V = self.tokenizer.vocab_size
        if config.model.vocab_size not in (0, V):
            raise UserError(f"model.vocab_size={config.model.vocab_size} but the tokenizer has {V} tokens")
        config.model = dataclasses.replace(config.model, vocab_size=V)
        self.config = config
        ids = torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
        self.splits = TokenSplits(ids, config.data.val_fraction, config.model.block_size)

    def train_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return self.splits.batch("train", batch_size, generator)

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        x, y = batch
        return model(x, y).loss, {}

    def batch_tokens(self, batch) -> int:
        return batch[0].numel()

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        """sample.txt: a continuation of `sample.prompt` by the finished model."""
        from tinyformer.generate.sampling import generate_text  # sampling happens after training

        (run_dir / "sample.txt").write_text(generate_text(model, self.tokenizer, self.config.sample), encoding="utf-8")

    def evaluate(self, model: nn.Module, iters: int, batch_size: int, generator: torch.Generator) -> dict[str, float]:
        device = next(model.parameters()).device
        total = 0.0
        for _ in range(iters):
            x, y = self.splits.batch("val", batch_size, generator)
            total += model(x.to(device), y.to(device)).loss.item()
        return {"loss": total / iters}
