"""Sequence reversal (or sorting) with the encoder-decoder Transformer.

Loss: cross-entropy of the teacher-forced decoder, PAD ignored. Metrics: token
accuracy (teacher forced) and exact match (greedy decoding gets the whole
sequence right), plus the cross-attention alignment score: in the last layer,
averaged over heads, the weight each output position puts on the source digit
it must copy (the mirrored position for reversal) and the EOS row on EOS.
Batches are drawn with replacement, or as the chapter's shuffled epochs (`data.sampling`), and trimmed
to their longest sequence, so no step computes padding columns that no sequence in the batch needs (the
same math as the chapter's full-width batches: padding is never attended and never scored).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tinyformer import course
from tinyformer.config import RunConfig, TrainConfig, resolve
from tinyformer.data.reversal import BOS, EOS, PAD, DigitTokenizer, ReversalConfig, make_split
from tinyformer.device import inference, model_device
from tinyformer.errors import UserError
from tinyformer.generate.decoding import beam_search, greedy_decode
from tinyformer.models.protocols import Attentive, EncoderDecoder
from tinyformer.models.seq2seq import Seq2SeqConfig, build_seq2seq
from tinyformer.seeds import derive
from tinyformer.tasks.base import Task, panel
from tinyformer.tasks.cards import CARDS


def epoch_batch(n: int, batch_size: int, index: int, seed: int) -> torch.Tensor:
    """The rows of batch `index` (0-based, counted from the first epoch) of shuffled epochs over `n` rows:
    each epoch a permutation of its own (from `seed` and the epoch), cut into n // batch_size whole batches."""
    per_epoch = n // batch_size
    if per_epoch == 0:
        raise UserError(
            f"data.sampling=epochs needs at least one whole batch: {n} pairs, train.batch_size={batch_size}"
        )
    epoch, i = divmod(index, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(derive(seed, 1_000_003, epoch)))
    return order[i * batch_size : (i + 1) * batch_size]


def trim(src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the padding columns that every row of the batch has."""
    return src[:, : int((src != PAD).sum(1).max())], tgt[:, : int((tgt != PAD).sum(1).max())]


class ReverseTask(Task):
    card = CARDS["reverse"]
    protocols = (EncoderDecoder, Attentive)  # Attentive with model.impl=tinyformer (torch's has no weights)
    batches_drawn = 0  # sampling="epochs": where the stream of epochs stands (`seek`)

    @classmethod
    def default_config(cls) -> RunConfig:
        """Chapter 20's recipe (`tinyformer.course.CHAPTER`)."""
        base = RunConfig(task=cls.name, model=Seq2SeqConfig(), data=ReversalConfig(), train=TrainConfig())
        return resolve(base, [course.layer(course.CHAPTER), {"train": {"log_interval": 52}}], [])

    @classmethod
    def load_tokenizer(cls, path: Path) -> DigitTokenizer:
        return DigitTokenizer.load(path)

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer: DigitTokenizer | None = None) -> ReverseTask:
        """Generate the training and held-out sequences (each split from its own seed)."""
        d, m = config.data, config.model
        if m.block_size < d.longest + 2:
            raise UserError(
                f"model.block_size={m.block_size} is too short for sequences of {d.longest} digits "
                f"(needs >= {d.longest + 2})"
            )
        task = cls(config, tokenizer or DigitTokenizer())
        task.train = task.split(d.n_train, d.seed, d.max_len)
        task.val = task.split(d.n_val, d.seed + 1, d.val_max_len or d.max_len)
        return task

    def split(self, n: int, seed: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`n` sequences of min_len..max_len digits from `seed`: source (n, S), target (n, S + 1) (BOS first)."""
        d = self.config.data
        return make_split(n, d.min_len, max_len, seed, d.variant, d.longest)

    def build_model(self) -> nn.Module:
        if self.config.model.impl == "torch":
            from tinyformer.models.torch_seq2seq import TorchSeq2Seq

            return TorchSeq2Seq(self.config.model)
        return build_seq2seq(self.config.model)

    def train_batch(self, batch_size: int, generator: torch.Generator):
        n = len(self.train[0])
        if getattr(self.config.data, "sampling", "random") == "epochs":  # seq2seq's tables draw at random
            idx = epoch_batch(n, batch_size, self.batches_drawn, self.config.train.seed)
            self.batches_drawn += 1
        else:
            idx = torch.randint(n, (batch_size,), generator=generator)
        src, tgt = trim(self.train[0][idx], self.train[1][idx])
        return src, tgt[:, :-1], tgt[:, 1:]  # source, decoder input, labels

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        src, tgt_in, labels = batch
        out = model(src, tgt_in, labels)
        return out.loss, {"token_acc": token_accuracy(out.logits, labels)}

    def seek(self, batches: int) -> None:
        """The next batch is the one after the first `batches` (a resumed run continues its epoch)."""
        self.batches_drawn = batches

    def batch_tokens(self, batch) -> int:
        return int((batch[2] != PAD).sum())

    def evaluate(self, model: nn.Module) -> dict:
        """The whole held-out set (fixed: the same every call)."""
        r = evaluate_split(model, *self.val)
        return {k: r[k] for k in ("loss", "token_acc", "exact_match")}

    def held_out(self, model: nn.Module, n: int = 1000, beam: int = 1) -> str:
        """Exact match, token accuracy and loss on `n` held-out sequences, and exact match per length."""
        if n <= 0 or beam <= 0:
            raise UserError(f"--n {n} and --beam {beam} must be > 0")
        d = self.config.data
        r = evaluate_split(model, *self.split(n, d.seed + 1, d.val_max_len or d.max_len), beam=beam)
        how = "greedy" if beam == 1 else f"beam {beam}"
        lines = [
            f"{n} held-out sequences, {how}: exact match {r['exact_match']:.4f}, "
            f"token accuracy {r['token_acc']:.4f}, loss {r['loss']:.4f}",
            f"teacher-forced token accuracy {r['token_acc']:.4f}; free-running ({how}) token accuracy "
            f"{r['free_token_acc']:.4f}; exact match if every token were right independently with the "
            f"teacher-forced accuracy: {r['independent_em']:.4f}",
            "length  exact match",
        ]
        return "\n".join(lines + [f"{k:>6}  {acc:.4f}" for k, acc in sorted(r["per_length"].items())])

    def source_ids(self, text: str) -> torch.Tensor:
        """The user's input as source ids (1, S), EOS last; a bad input is a UserError naming the problem."""
        return self.tokenizer.encode_source(text, self.config.data.longest)

    def output_text(self, ids: torch.Tensor) -> str:
        """Decoded ids (L,) (EOS, then padding, at the end) as the text to print."""
        return self.tokenizer.decode(ids)

    def predict(self, model: nn.Module, text: str, beam: int = 1) -> str:
        """`tinyformer translate`: the model's output for one input (greedy or beam search)."""
        if beam <= 0:
            raise UserError(f"--beam {beam} must be > 0")
        src = self.source_ids(text).to(model_device(model))  # (1, S)
        return self.output_text(decode(model, src, beam)[0])

    def play(self, model: nn.Module, text: str, beam: int = 1) -> list[dict]:
        """The output, and the last layer's cross-attention (mean over heads) while the model writes its greedy
        output, with the alignment score where the task defines one."""
        out = self.predict(model, text, beam)
        src, tgt_in = self.view_inputs(model, text)  # (1, S), (1, T)
        with inference(model):
            w = model(src, tgt_in, need_weights=True).cross_attentions[-1][0].float().mean(0).cpu()  # (T, S)
        score = self.alignment(model, (src, tgt_in))
        label = self.tokenizer.convert_ids_to_tokens
        note = "" if score is None else f"alignment {score:.3f} (1 = each output looks at the digit it copies)"
        rows, cols = label(tgt_in[0, 1:].tolist() + [EOS]), label(src[0].tolist())  # rows: what each step wrote
        return [
            panel("text", "output", text=out + ("" if beam == 1 else f"  (beam {beam})")),
            panel(
                "matrix", "cross-attention, last layer, mean of heads", note, rows=rows, cols=cols, values=w.tolist()
            ),
        ]

    def view_inputs(self, model: nn.Module, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(source, decoder input): the input, and BOS followed by what the model writes for it."""
        src = self.source_ids(text).to(model_device(model))  # (1, S)
        out = decode(model, src)  # (1, L): ends in EOS
        return src, torch.cat([torch.full_like(out[:, :1], BOS), out[:, :-1]], dim=1)  # (1, L)

    def alignment(self, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> float:
        return cross_alignment(model, inputs[0], self.config.data.variant)[0]


def decode(model: nn.Module, src: torch.Tensor, beam: int = 1, max_new: int | None = None) -> torch.Tensor:
    """src (B, S) -> output ids (B, L) without BOS: greedy, or beam search of width `beam`."""
    ids = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD, max_new=max_new)
    return greedy_decode(model, src, **ids) if beam == 1 else beam_search(model, src, beam=beam, **ids)


def token_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    real = labels != PAD
    return float((logits.argmax(-1) == labels)[real].float().mean())


def same_sequences(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B,) True where the decoded tokens equal the labels (both padded with PAD)."""
    width = max(pred.size(1), labels.size(1))
    a = torch.nn.functional.pad(pred, (0, width - pred.size(1)), value=PAD)
    b = torch.nn.functional.pad(labels, (0, width - labels.size(1)), value=PAD)
    return (a == b).all(1)


def evaluate_split(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, beam: int = 1, chunk: int = 250) -> dict:
    """Loss and token accuracy (means over target tokens), exact match, exact match per source length, and
    `correct` (N,): which rows matched. Rows go through in `chunk`s sorted by length."""
    device = model_device(model)
    loss = right = tokens = free = 0.0
    ok = torch.zeros(len(src), dtype=torch.bool)
    lengths = (src != PAD).sum(1) - 1  # digits (tokens), without EOS
    order = lengths.argsort(stable=True)  # chunks of about one length: decoding stops sooner
    with inference(model):
        for i in range(0, len(src), chunk):
            rows = order[i : i + chunk]
            s, t = (x.to(device) for x in trim(src[rows], tgt[rows]))
            out = model(s, t[:, :-1], t[:, 1:])
            real = int((t[:, 1:] != PAD).sum())
            loss += float(out.loss) * real  # the chunk's mean over its target tokens
            right += token_accuracy(out.logits, t[:, 1:]) * real
            tokens += real
            pred = decode(model, s, beam, max_new=min(t.size(1) + 2, model.config.block_size))
            ok[rows] = same_sequences(pred, t[:, 1:]).cpu()
            free += free_running_right(pred, t[:, 1:])
    per_length = {int(n): float(ok[lengths == n].float().mean()) for n in lengths.unique()}
    acc = right / tokens
    return {
        "loss": loss / tokens,
        "token_acc": acc,
        "free_token_acc": free / tokens,
        "exact_match": float(ok.float().mean()),
        "independent_em": float((acc ** (lengths + 1).double()).mean()),  # each of n + 1 tokens right with p = acc
        "per_length": per_length,
        "correct": ok,
    }


def free_running_right(pred: torch.Tensor, labels: torch.Tensor) -> int:
    """Target tokens (labels (B, L), PAD after EOS) that the decoded output (B, L') has at the same position:
    token accuracy without teacher forcing, where one early mistake can shift or change all that follows."""
    width = max(pred.size(1), labels.size(1))
    a = torch.nn.functional.pad(pred, (0, width - pred.size(1)), value=PAD)[:, : labels.size(1)]
    return int(((a == labels) & (labels != PAD)).sum())


def cross_alignment(model: nn.Module, src: torch.Tensor, variant: str = "reverse") -> tuple[float, torch.Tensor]:
    """Alignment score of one source (1, n + 1) and the last layer's head-mean cross-attention (T, S).

    Output position i (the decoder input at i predicts target token i) should look at
    the source digit it copies: n - 1 - i when reversing; the EOS row at the source EOS.
    """
    n = src.size(1) - 1
    digits = src[0, :n]
    target = digits.flip(0) if variant == "reverse" else digits.sort().values
    tgt_in = torch.cat([torch.tensor([BOS], device=src.device), target])[None]  # (1, n + 1): BOS + target
    with inference(model):
        w = model(src, tgt_in, need_weights=True).cross_attentions[-1][0].mean(0).cpu()  # (T, S) = (n + 1, n + 1)
    if variant == "reverse":
        expected = [n - 1 - i for i in range(n)]
    else:  # where each sorted digit came from (stable)
        expected = digits.argsort(stable=True).tolist()
    score = (sum(float(w[i, j]) for i, j in enumerate(expected)) + float(w[n, n])) / (n + 1)
    return score, w
