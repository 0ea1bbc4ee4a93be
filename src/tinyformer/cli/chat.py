"""`tinyformer chat RUN`: `tinyformer sample`, interactive. The run is loaded once; each line you type is
continued by the model, its tokens printed as they are sampled.

The text so far: each line is appended to it (after a newline, unless the text is empty or the vocabulary
has no newline) and the model continues the whole, seeing at most its context window (block_size tokens),
as `sample` does with a long prompt. What it writes stays in the text, so the next line follows on from it;
`/reset` forgets it. An empty line continues the text so far (with none: the run's sample.prompt, what
`sample` continues when given no --prompt).

Sampling settings start from the run's `sample.*`, then the flags, then `/NAME VALUE` commands, all checked
by the rules `sample` uses (`SampleConfig`). One sampler, seeded by --seed and reseeded by `/seed`: the
first turn of a session (or after `/reset` and `/seed S`) prints what `tinyformer sample --prompt LINE
--seed S` prints after the prompt.

Ending: end of input (Ctrl-D) or `/quit`: exit 0. Ctrl-C while the model writes stops that turn (what it
wrote stays in the text) and returns to the prompt; Ctrl-C at the prompt ends the session with exit 130,
as any interrupted tinyformer command does. A mistake in a line (a character outside the vocabulary, a bad
value) is one line on stderr, and the loop goes on. The "> " prompt and confirmations appear only when stdin
is a terminal: piped lines give only the continuations, each followed by a newline.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from typing import TextIO

from tinyformer.cli.common import add_run_args, load, utf8
from tinyformer.cli.infer import add_args
from tinyformer.config import SampleConfig
from tinyformer.errors import UserError
from tinyformer.tasks.cards import CARDS

VERB = "sample"  # chat takes the runs whose inference verb this is: language models
FLAGS = ("--temperature", "--top-k", "--top-p", "--tokens", "--seed")  # of that verb's options
SETTINGS = {"temperature": float, "top_k": int, "top_p": float, "tokens": int, "seed": int}  # /NAME VALUE

HELP = """\
/temperature T   0 = greedy; else the softmax temperature
/top_k K         keep the K most likely tokens; 0 = off
/top_p P         nucleus sampling mass in (0, 1]; 1 = off
/tokens N        new tokens per turn
/seed S          reseed the sampler (the next turns are reproducible)
/settings        show the settings and how much text the model sees
/reset           forget the text so far
/quit            end the session (so does Ctrl-D)
An empty line continues the text; a line starting with "//" is text starting with "/".
Ctrl-C stops the model's turn; at the prompt it ends the session."""


def _lm_args() -> list:
    """The options of `FLAGS` as the language-model tasks declare them (help text shared with `sample`)."""
    args = {arg.flag: arg for card in CARDS.values() if card.command == VERB for arg in card.predict_args}
    return [args[flag] for flag in FLAGS if flag in args]


def add_chat(p: argparse.ArgumentParser) -> None:
    add_run_args(p)
    add_args(p, _lm_args())


def cmd_chat(a: argparse.Namespace) -> int:
    tty = sys.stdin.isatty()
    chat = open_chat(a)
    if tty:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        print(f"{chat.describe()}\n/help for commands, Ctrl-D to quit")
    return loop(chat, tty)


def open_chat(a: argparse.Namespace) -> Chat:
    """The run named by `a.run`, checked to be a language model before its weights are read, and its settings."""
    from tinyformer.runs import check_run_dir, read_config

    config, task_cls = read_config(check_run_dir(a.run))
    if task_cls.command != VERB:
        names = " or ".join(f"`train {card.name}`" for card in CARDS.values() if card.command == VERB)
        hint = f"; its command is `tinyformer {task_cls.command}`" if task_cls.command else ""
        raise UserError(f"{a.run!r} is a {config.task!r} run; chat needs a language-model ({names}) run{hint}")
    given = {k: getattr(a, k) for k in SETTINGS if getattr(a, k) is not None}
    run = load(a)
    return Chat(run, SampleConfig(**(dataclasses.asdict(run.config.sample) | given)))


class Chat:
    """A loaded language-model run, the sampling settings and the text so far (ids, at most one window)."""

    def __init__(self, run, settings: SampleConfig) -> None:
        self.run, self.model, self.tokenizer = run, run.model, run.tokenizer
        self.window = self.model.check_context(self.model.config.block_size)
        self.history: list[int] = []
        self.newline = _encodable(self.tokenizer, "\n")  # what joins a new line to the text so far
        self.settings = settings
        self.reseed()

    def reseed(self) -> None:
        import torch

        from tinyformer.device import model_device

        self.generator = torch.Generator(device=model_device(self.model)).manual_seed(self.settings.seed)

    def set(self, name: str, value: float | int) -> None:
        self.settings = dataclasses.replace(self.settings, **{name: value})  # SampleConfig checks it
        if name == "seed":
            self.reseed()

    def context(self, line: str) -> list[int]:
        """The ids the model continues after `line`: the text so far, a newline, the line; one window at most."""
        if not line:
            ids = self.history or self.tokenizer.encode(self.settings.prompt)
        else:
            ids = self.history + (self.newline if self.history else []) + self.tokenizer.encode(line)
        return ids[-self.window :]

    def describe(self) -> str:
        s = self.settings
        return (
            f"temperature={s.temperature:g} top_k={s.top_k} top_p={s.top_p:g} tokens={s.tokens} seed={s.seed}; "
            f"the model sees {len(self.history)} of its {self.window} tokens of context"
        )


def _encodable(tokenizer, text: str) -> list[int]:
    try:
        return tokenizer.encode(text)
    except UserError:
        return []


# ---- the loop ------------------------------------------------------------------------------
def loop(chat: Chat, tty: bool) -> int:
    """Read a line, answer it, repeat, until end of input or /quit (0) or Ctrl-C at the prompt (130)."""
    while True:
        try:
            if not respond(chat, read_line(tty), tty):
                return 0
        except UserError as e:
            print(f"error: {' '.join(str(e).split())}", file=sys.stderr)  # one line; the loop goes on
        except (EOFError, KeyboardInterrupt) as e:  # at the prompt: Ctrl-C while the model writes ends a turn
            if tty:
                print()  # the shell's prompt starts on a line of its own
            return 0 if isinstance(e, EOFError) else 130


def read_line(tty: bool) -> str:
    """One line of stdin without its line ending; EOFError at the end of input."""
    try:
        line = input("> " if tty else "")
    except UnicodeDecodeError:
        raise UserError("the line is not valid UTF-8; check the terminal's encoding") from None
    return utf8(line.removesuffix("\r"))


def respond(chat: Chat, line: str, tty: bool) -> bool:
    """Run a /command or continue the text; -> False to end the session."""
    if line.startswith("/") and not line.startswith("//"):
        return command(chat, line[1:].split(), tty)
    turn(chat, line[1:] if line.startswith("//") else line, sys.stdout)
    return True


def command(chat: Chat, words: list[str], tty: bool) -> bool:
    name, values = (words[0].replace("-", "_") if words else ""), words[1:]
    if name in ("quit", "exit"):
        return False
    if name == "help":
        print(HELP)
    elif name == "settings":
        print(chat.describe())
    elif name == "reset":
        chat.history = []
    elif name in SETTINGS:
        if len(values) != 1:
            raise UserError(f"/{name} takes one value, e.g. /{name} {getattr(chat.settings, name)}")
        chat.set(name, _parse(name, values[0]))
    else:
        known = " ".join(f"/{c}" for c in (*SETTINGS, "settings", "reset", "help", "quit"))
        raise UserError(f"unknown command /{name}; the commands are {known}")
    if tty and name in (*SETTINGS, "reset"):
        print(chat.describe())
    return True


def _parse(name: str, text: str) -> float | int:
    kind = SETTINGS[name]
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise UserError(f"/{name} needs {what}, got {text!r}") from None


def turn(chat: Chat, line: str, out: TextIO) -> None:
    """Continue the text so far and `line`, writing each piece of text to `out` as it is sampled, then a
    newline. Ctrl-C ends the turn early; what was written stays in the text so far."""
    import torch

    from tinyformer.device import model_device
    from tinyformer.generate.sampling import TextStream, stream

    ids = chat.context(line)  # a UserError for a character outside the vocabulary
    idx = torch.tensor([ids], dtype=torch.long, device=model_device(chat.model))  # (1, T0)
    s, text, new = chat.settings, TextStream(chat.tokenizer), []
    sampling = dict(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, generator=chat.generator)
    try:
        with chat.run.autocast():  # inference's precision (fp32 on a CPU)
            for token in stream(chat.model, idx, s.tokens, **sampling, window=chat.window):  # token (1, 1)
                new.append(int(token))
                _write(out, text.push(new[-1]))
    except KeyboardInterrupt:
        pass  # Ctrl-C: this turn ends here, the session goes on
    _write(out, text.flush() + "\n")
    chat.history = (ids + new)[-chat.window :]


def _write(out: TextIO, piece: str) -> None:
    if piece:
        out.write(piece)
        out.flush()
