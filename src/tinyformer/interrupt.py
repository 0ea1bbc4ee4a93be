"""One rule for Ctrl-C (SIGINT) and SIGTERM, in every command and at every moment of its life.

- **A signal ignored when the process started stays ignored.** A command started from a background job
  (`tinyformer train gpt ... &` in a script, `nohup`) inherits SIGINT as ignored, so a Ctrl-C meant for the
  shell in front never stops it; tinyformer installs no handler over an ignored signal, in start-up or later.
  Such a run stops on SIGTERM (`kill PID`).
- **Otherwise SIGINT and SIGTERM stop the command, with one line, and lose nothing.** During start-up (the
  command line, torch's import), and inside any import later, the process exits at once: nothing has been
  written yet, or what was is whole. Inside a training
  loop the first signal finishes the step and saves a resumable state (a second one aborts); anywhere else the
  command unwinds as from an exception, and whatever it writes is committed whole or not at all. The exit
  status is 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM; the line is
  `tinyformer: interrupted` or `tinyformer: terminated`.

Only the main thread can install handlers; elsewhere (a program's worker thread calling the API) nothing is
installed and the program's own rule holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

STOPS = (signal.SIGINT, signal.SIGTERM)
WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


class Stopped(KeyboardInterrupt):
    """A stop by `signum` as an exception: a KeyboardInterrupt, so code that cleans up after a Ctrl-C does the
    same for SIGTERM, that says which signal it was (the exit status, the line)."""

    def __init__(self, signum: int):
        super().__init__(WORDS.get(signum, f"signal {signum}"))
        self.signum = signum


def signum_of(error: KeyboardInterrupt) -> int:
    return getattr(error, "signum", signal.SIGINT)


def line(signum: int) -> str:
    return f"tinyformer: {WORDS.get(signum, f'signal {signum}')}"


def catchable(signals: tuple[int, ...] = STOPS) -> tuple[int, ...]:
    """The signals of `signals` this process may catch: those not ignored (the rule's first point)."""
    return tuple(s for s in signals if signal.getsignal(s) is not signal.SIG_IGN)


@contextlib.contextmanager
def catching(handler: Callable, signals: tuple[int, ...] = STOPS) -> Iterator[tuple[int, ...]]:
    """`handler` for each catchable signal of `signals` inside the block, the previous handlers after it; yields
    the signals it caught (none off the main thread)."""
    try:
        old = {s: signal.signal(s, handler) for s in catchable(signals)}
    except ValueError:  # not the main thread
        old = {}
    try:
        yield tuple(old)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


_state = {"running": False}  # False: the command is starting up (a signal exits at once); True: it unwinds


def handle(signum: int, frame) -> None:
    """The rule's handler for a command's whole life, but where a training loop puts its own. During start-up
    (the command line, torch's import), and inside any import later (the optimizer imports torch._dynamo, 2 s,
    as a run starts), the process exits at once: raised inside an import, KeyboardInterrupt can reach torch's
    C++ start-up (which aborts), leave numpy half imported for code that goes on, or end the process by the
    signal itself after the line; and there every file written so far is whole (each write is atomic)."""
    if not _state["running"] or importing(frame):
        os.write(2, (line(signum) + "\n").encode())
        os._exit(128 + signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signum)


def importing(frame) -> bool:
    """Whether `frame` runs inside an import (a module's top level being executed)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def command() -> Iterator[None]:
    """The rule for one command, from its first line (start-up, until `started()`) to its end; the handlers it
    found after it. A command run by another in the same process (`lab build`) is not starting up again."""
    outer = not any(signal.getsignal(s) is handle for s in STOPS)
    try:
        with catching(handle):
            yield
    finally:
        if outer:
            _state["running"] = False


def started() -> None:
    """Start-up is over: from here a signal unwinds the command (and a training loop saves first)."""
    _state["running"] = True
