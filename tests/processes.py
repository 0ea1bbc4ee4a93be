"""Every long-lived process a test starts goes through `start`, and none outlives its test.

- SIGINT's disposition is set for the child explicitly (`sigint="default"` or `"ignored"`): the suite itself may
  run from a background job, whose children inherit SIGINT ignored, and tinyformer's rule keeps it ignored
  (`tinyformer.interrupt`); a test that means Ctrl-C says which start it means.
- The child gets a session of its own (no terminal, its own process group), so ending it ends what it started.
- The autouse fixture `no_process_left` (loaded by conftest as a plugin, and by `pytest -p tests.processes`)
  kills, after every test whatever its outcome (a failed assertion, a timeout), each process started during
  that test that still runs, with its group; a process started with `lasting=True` (a module's warm parent)
  is ended at the end of the session instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

SET_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == 'ignored' "
    "else signal.SIG_DFL); os.execvp(sys.argv[2], sys.argv[2:])"
)
_started: list[tuple[subprocess.Popen, bool]] = []  # (process, lasting)


def start(argv: list[str], *, sigint: str = "default", lasting: bool = False, **popen) -> subprocess.Popen:
    """`subprocess.Popen(argv, **popen)` with SIGINT at its default or ignored, in a session of its own."""
    if sigint not in ("default", "ignored"):
        raise ValueError(f"sigint={sigint!r}: 'default' or 'ignored'")
    env = {**popen.pop("env", os.environ), "PYTHONUNBUFFERED": "1"}  # lines as they are printed
    cmd = [sys.executable, "-c", SET_SIGINT, sigint, *argv]
    ignore = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignore else None  # inherited from the fork on: a
    try:  # SIGINT sent at once does not stop the wrapper's own start-up, which then sets the disposition asked
        p = subprocess.Popen(cmd, start_new_session=True, env=env, **popen)
    finally:
        if ignore:
            signal.signal(signal.SIGINT, old)
    _started.append((p, lasting))
    return p


def end(p: subprocess.Popen) -> None:
    """Kill `p` and its process group (what it started) if it still runs; reap it. Once the test has reaped `p`,
    its number may belong to a new process (a busy machine wraps the pids in minutes), one that may lead a group
    of its own, such as another worker's notebook kernel: that group is left alone. (While any process of `p`'s
    group lives, the number cannot be given to a new process, so what is left of the group is killed then.)"""
    if p.returncode is not None and os.path.exists(f"/proc/{p.pid}"):
        pass  # reaped, and its number is another process's now
    else:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    for stream in (p.stdin, p.stdout, p.stderr):
        if stream:
            stream.close()


@pytest.fixture(autouse=True)
def no_process_left():
    before = len(_started)
    yield
    for p, lasting in _started[before:]:
        if not lasting:
            end(p)
    _started[before:] = [(p, lasting) for p, lasting in _started[before:] if lasting]


def pytest_sessionfinish(session, exitstatus):
    for p, _ in _started:
        end(p)


def catches(p: subprocess.Popen, signum: int, timeout: float = 60) -> None:
    """Wait until `p` has a handler for `signum` (its SigCgt mask in /proc): a moment the program itself
    chose, past the interpreter's start-up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        with open(f"/proc/{p.pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        if mask >> (signum - 1) & 1:
            return
        time.sleep(0.002)
    raise AssertionError(f"process {p.pid} did not catch signal {signum} in {timeout:.0f} s (exit {p.poll()})")


class Lines:
    """The lines a process prints on a stream, read as they come (a thread); `wait_for` one of them."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True)
        self._thread.start()

    def wait_for(self, test, timeout: float = 120) -> str:
        """The first line for which `test(line)` holds (a str: the line starts with it); AssertionError when
        none comes in `timeout` seconds or the stream ends first."""
        check = (lambda line: line.startswith(test)) if isinstance(test, str) else test
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            while seen < len(self.lines):
                if check(self.lines[seen]):
                    return self.lines[seen]
                seen += 1
            if not self._thread.is_alive() and seen == len(self.lines):
                break
            time.sleep(0.02)
        raise AssertionError(f"no line like {test!r} in {timeout:.0f} s; printed: {''.join(self.lines)[-2000:]}")

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)
