"""Language modelling with MiniGPT on Tiny Shakespeare (or any text): characters, byte-level BPE, or GPT-2.

The tokenizer: characters (`data.tokenizer=char`, the default), a byte-level BPE learned on the training
split (`data.tokenizer=bpe`, `data.vocab_size`), or, with `model.init_from=gpt2` (a hub id or a Hugging Face
folder), GPT-2's own tokenizer and weights: the architecture then comes from the checkpoint's config.json
(`tinyformer.models.gpt2`) and training continues on the user's text.

Loss: mean next-token cross-entropy. Evaluation: mean val loss over a fixed, seeded set of random windows
(or, `train.eval_batches=fresh` as the MiniGPT lab, new windows of both splits each time), and the same in bits
per character (`bpc`), so character and subword runs compare. After training,
sample.txt continues `sample.prompt`; `tinyformer sample` continues any prompt and `tinyformer eval`
scores the held-out split (or a text file) in loss, perplexity and bits per character.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from tinyformer import course
from tinyformer.config import DataConfig, RunConfig, SampleConfig, resolve
from tinyformer.data.bpe import BPETokenizer, folder_tokenizer, load_text_tokenizer
from tinyformer.data.tinyshakespeare import TokenSplits, read_text, resolve_path
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.device import check_memory, inference, model_device
from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT, param_breakdown
from tinyformer.models.hf_lm import config_from_hf, family, import_hf
from tinyformer.models.protocols import Attentive, CausalLM
from tinyformer.runfolder import SAMPLE, is_run
from tinyformer.seeds import derive
from tinyformer.tasks.base import Task, fit_model
from tinyformer.tasks.cards import CARDS

FRESH = 1_000_003  # `train.eval_batches=fresh`: a prime spacing the seeds of successive evaluations' draws


class GPTTask(Task):
    card = CARDS["gpt"]
    views = ("generate", "attention")
    protocols = (CausalLM, Attentive)

    @classmethod
    def default_config(cls) -> RunConfig:
        """The MiniGPT lab's recipe (`tinyformer.course.LAB`)."""
        return resolve(RunConfig(task=cls.name, model=GPTConfig()), [course.layer(course.LAB)], [])

    @classmethod
    def load_tokenizer(cls, path: Path) -> CharTokenizer | BPETokenizer:
        return load_text_tokenizer(path)

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer: CharTokenizer | BPETokenizer | None = None) -> GPTTask:
        """Read the text, split it, fit (or reuse) the tokenizer and fix model.vocab_size to it.

        With `model.init_from` (and no tokenizer given, i.e. a new run), the architecture and the tokenizer
        are the checkpoint's."""
        if tokenizer is None and config.model.init_from:
            config, tokenizer = from_pretrained(config)
        text = read_text(resolve_path(config.data.path or None))
        n = int(len(text) * (1 - config.data.val_fraction))  # characters of the train split
        tokenizer = tokenizer or fit_tokenizer(config.data, text, n)
        task = cls(fit_model(config, vocab_size=tokenizer.vocab_size), tokenizer)
        train, val = tokenizer.encode(text[:n]), tokenizer.encode(text[n:])
        window = config.data.seq_len or config.model.block_size
        if window > config.model.block_size:
            raise UserError(f"data.seq_len={window} is longer than model.block_size={config.model.block_size}")
        task.splits = TokenSplits(
            torch.tensor(train + val, dtype=torch.long), config.data.val_fraction, window, len(train)
        )
        task.val_chars_per_token = (len(text) - n) / max(len(val), 1)
        try:  # checked now, not when sample.txt is written after the whole run
            tokenizer.encode(config.sample.prompt)
        except UserError as e:
            raise UserError(f"sample.prompt={config.sample.prompt!r}: {e}") from None
        return task

    def build_model(self) -> MiniGPT:
        return MiniGPT(self.config.model)

    def init_from(self) -> str:
        return self.config.model.init_from

    def init_model(self, model: MiniGPT, source) -> None:
        """Copy the weights of `source`, the Hugging Face folder (GPT-2, Llama or Qwen2) `model.init_from`
        resolved to."""
        from tinyformer.hub import hf_weights

        import_hf(model, hf_weights(source))  # `prepare` refused a tinyformer run folder
        c, kind = self.config.model, family(model)
        print(f"started from {kind} {self.init_from()!r}: {c.n_layer} layers, {c.n_head} heads, {c.n_embd} wide")

    batches_drawn: int | None = None  # micro-batches the Trainer has drawn (`seek`); None: full windows

    def seek(self, batches: int) -> None:
        """Where training stands, for `data.seq_warmup`: the next batch is the one after the first `batches`."""
        self.batches_drawn = batches

    def train_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.splits.batch("train", batch_size, generator)  # (B, T) each, T = seq_len
        if self.batches_drawn is None:  # outside `Trainer.fit` (backend timing, benchmarks): full windows
            return x, y
        step = self.batches_drawn // self.config.train.grad_accum
        self.batches_drawn += 1
        T = window_at(step, x.size(1), self.config.data.seq_warmup)
        return (x, y) if T == x.size(1) else (x[:, :T].contiguous(), y[:, :T].contiguous())

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        x, y = batch
        return model(x, y).loss, {}

    def batch_tokens(self, batch) -> int:
        return batch[0].numel()

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Mean loss of `train.eval_iters` random batches, in eval mode. `train.eval_batches`: "fixed" scores the
        val split on the same batches every call; "fresh", the MiniGPT lab's estimate, scores new batches of each
        split every call (`train_loss` too), drawn from where training stands, so a resumed run draws the same."""
        t = self.config.train
        seed = derive(t.seed + 1) if t.eval_batches == "fixed" else derive(t.seed + 1, FRESH, self.batches_drawn or 0)
        loss = self.mean_loss(model, "val", seed)  # nats per token
        result = {"loss": loss, "bpc": loss / math.log(2) / self.val_chars_per_token}
        if t.eval_batches == "fresh":
            result["train_loss"] = self.mean_loss(model, "train", derive(seed + 1))
        return result

    def mean_loss(self, model: nn.Module, split: str, seed: int) -> float:
        t, device = self.config.train, model_device(model)
        g = torch.Generator().manual_seed(seed)
        batches = (self.splits.batch(split, t.batch_size, g) for _ in range(t.eval_iters))
        return sum(model(x.to(device), y.to(device)).loss.item() for x, y in batches) / t.eval_iters

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        """sample.txt: a continuation of `sample.prompt` by the finished model."""
        from tinyformer.files import write_text
        from tinyformer.generate.sampling import generate_text

        write_text(run_dir / SAMPLE, generate_text(model, self.tokenizer, self.config.sample))

    def param_breakdown(self) -> list[tuple[str, str, int, int]]:
        return param_breakdown(self.config.model)

    def held_out(self, model: nn.Module, data: str | None = None) -> str:
        """Loss, perplexity and bits per character of the held-out split, or of the text file `data`."""
        if data is None:
            path = resolve_path(self.config.data.path or None)
            text = read_text(path)
            text = text[int(len(text) * (1 - self.config.data.val_fraction)) :]
            where = f"held-out split (last {self.config.data.val_fraction:.0%} of {path})"
        else:
            text, where = read_text(Path(data)), data
        ids = self.tokenizer.encode(text)
        if len(ids) < 2:
            raise UserError(f"{where} has {len(ids)} token(s); at least 2 are needed to score one")
        loss = text_loss(model, torch.tensor(ids))
        chars = len(text) - len(self.tokenizer.decode(ids[:1]))  # the characters the scored tokens spell
        bpc = loss * (len(ids) - 1) / max(chars, 1) / math.log(2)
        unit = "char" if isinstance(self.tokenizer, CharTokenizer) else "token"
        return (
            f"{where}: {len(text):,} characters in {len(ids):,} tokens, loss {loss:.4f} nats/{unit}, "
            f"perplexity {math.exp(loss):.3f}, {bpc:.4f} bits per character"
        )

    def predict(self, model: nn.Module, **options) -> str:
        """`tinyformer sample`: the prompt and its continuation, with the run's sampling settings as defaults."""
        return "".join(self.stream(model, **options))

    def stream(self, model: nn.Module, context: int | None = None, ntk: bool = False, **options) -> Iterator[str]:
        """`predict`'s text as it is made: the prompt, then each character as it is sampled."""
        from tinyformer.generate.sampling import stream_text

        use_cache = not options.pop("no_cache", False)
        s = SampleConfig(**(dataclasses.asdict(self.config.sample) | options))
        if context is not None and context <= 0:
            raise UserError(f"--context {context} must be > 0")
        window = model.check_context(model.config.block_size if context is None else context)
        check_memory(model.cache_bytes(1, window), f"--context {window:,}", model_device(model))
        if ntk:
            model.set_ntk(window)  # a UserError unless the run has rotary positions
            if window <= model.config.block_size:
                block = model.config.block_size
                raise UserError(f"--ntk stretches RoPE past block_size={block}; give a longer --context")
        yield from stream_text(model, self.tokenizer, s, use_cache=use_cache, window=window)

    def view_inputs(self, model: nn.Module, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        if not text:
            raise UserError("the text is empty; give at least one character")
        return self.tokenizer.batch([text])  # (1, T) ids and mask; every character counts, spaces too


@torch.no_grad()
def window_at(step: int, seq_len: int, warmup: int) -> int:
    """`data.seq_warmup`: the training window at optimizer step `step`, growing linearly from seq_len / 8 (at
    least 8 tokens) to `seq_len` at step `warmup`. The windows are cut from the full ones, so the batches'
    starts, and the random stream that draws them, do not depend on it."""
    if step >= warmup:
        return seq_len
    first = min(seq_len, max(8, seq_len // 8))
    return first + (seq_len - first) * step // warmup


def text_loss(model: MiniGPT, ids: torch.Tensor) -> float:
    """Mean next-token cross-entropy over all of `ids` (N,), cut into consecutive windows of the block size.

    Every token after the first is predicted once, from the tokens before it in its window.
    """
    T, device = model.config.block_size, model_device(model)
    total, count = 0.0, 0
    with inference(model):
        for s in range(0, len(ids) - 1, T):
            chunk = ids[s : s + T + 1][None].to(device)  # (1, <= T + 1)
            n = chunk.size(1) - 1
            total, count = total + model(chunk[:, :-1], chunk[:, 1:]).loss.item() * n, count + n
    return total / count


def fit_tokenizer(d: DataConfig, text: str, n_train: int) -> CharTokenizer | BPETokenizer:
    """Characters of the whole text (a held-out character would be unencodable), or a BPE learned on the
    first `n_train` characters only."""
    if d.tokenizer == "char":
        return CharTokenizer.from_text(text)
    return BPETokenizer.train([text[:n_train]], d.vocab_size)


def from_pretrained(config: RunConfig) -> tuple[RunConfig, CharTokenizer | BPETokenizer]:
    """`model.init_from` -> (config with the checkpoint's architecture, its tokenizer). Dropout, backend and
    the other training choices stay the config's."""
    from tinyformer.hub import hf_config, pretrained_folder

    folder = pretrained_folder(config.model.init_from)
    if is_run(folder):
        raise UserError(f"model.init_from={config.model.init_from!r} is a tinyformer run; continue it with --resume")
    fields = config_from_hf(hf_config(folder))
    tokenizer = folder_tokenizer(folder)  # GPT-2's BPE, or the characters of an exported tinyformer run
    if tokenizer.vocab_size != fields["vocab_size"]:
        raise UserError(
            f"{folder}: the tokenizer has {tokenizer.vocab_size} tokens, config.json vocab_size={fields['vocab_size']}"
        )
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **fields)), tokenizer
