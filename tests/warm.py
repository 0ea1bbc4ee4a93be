"""A warm parent for running many `tinyformer` command lines: it imports the CLI and the libraries the commands
load (torch, matplotlib, transformers where installed) once, then forks one child per command. A child starts
from the parent's state, never from another command's: it changes to the command's folder, reads the command's
input on stdin, writes stdout and stderr to a file, runs `tinyformer.cli.main(argv)` and exits with its status,
as a fresh `tinyformer` process would. The parent itself runs no command, so it starts no thread a fork could
break.

Run with the interpreter of the install under test (`python tests/warm.py`): it imports nothing but the standard
library and tinyformer. The protocol is one JSON line per command on stdin,
`{"argv": [...], "cwd": ..., "input": ..., "output": FILE}`, answered on stdout by one line
`{"status": N, "seconds": S, "cpu": C}`; with `"errors": FILE` stderr goes there instead, and with `"env": {...}`
the command sees that environment, not the parent's. `WarmParent` below is the side a test holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def _warm_up() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (what an optimizer's constructor imports: 2 s)

    import tinyformer.cli  # noqa: F401

    try:  # what `viz bert` and a Hugging Face start load; absent from an install without the `hf` extra
        import transformers  # noqa: F401
    except ImportError:
        pass
    # no Python thread may run at a fork (numpy's OpenBLAS keeps a native pool, which re-forms after a fork)
    assert threading.active_count() == 1, f"threads started while warming up: {threading.enumerate()}"


def _child(request: dict) -> int:
    signal.alarm(request.get("timeout", 900))  # a command that hangs ends (SIGALRM) instead of the suite
    os.chdir(request["cwd"])
    if "env" in request:
        os.environ.clear()
        os.environ.update(request["env"])
    given = os.open(os.devnull, os.O_RDONLY)
    if request.get("input"):
        read, write = os.pipe()
        os.write(write, request["input"].encode())  # a line or two: fits the pipe's buffer
        os.close(write)
        given = read
    os.dup2(given, 0)
    out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    errors = request.get("errors")
    os.dup2(os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if errors else out, 2)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", buffering=1, closefd=False)
    sys.argv = ["tinyformer", *request["argv"]]
    from tinyformer.cli import main

    try:
        status = main(request["argv"])
    except SystemExit as e:  # argparse: --help, a usage error
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return status


def serve_forever() -> None:
    _warm_up()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(_child(request))
        _, status, usage = os.wait4(pid, 0)
        code, cpu = os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime
        print(json.dumps({"status": code, "seconds": time.perf_counter() - start, "cpu": cpu}), flush=True)


class WarmParent:
    """The test's side: `with WarmParent(python, env) as warm: status, output = warm.run(argv, cwd)`."""

    def __init__(self, python: str, env: dict, scratch: Path):
        from tests.processes import start  # the suite's (this file also runs alone, in an install without pytest)

        kw = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        self.process = start([python, __file__], lasting=True, **kw)  # ended by its fixture, else the session
        self.scratch, self.count = scratch, 0
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError(f"the warm parent ({python}) did not start")

    def run(self, argv: list[str], cwd: Path, input: str = "") -> tuple[int, str, dict]:
        """-> (exit status, the last 4,000 characters of its output, {"seconds": wall, "cpu": user + system})."""
        self.count += 1
        output = self.scratch / f"command-{self.count}.txt"
        answer = self._ask({"argv": argv, "cwd": str(cwd), "input": input, "output": str(output)})
        text = output.read_text(encoding="utf-8", errors="replace")[-4000:]
        return answer["status"], text, {"seconds": answer["seconds"], "cpu": answer["cpu"]}

    def complete(
        self, argv: list[str], cwd: Path, env: dict, input: str = "", timeout: int = 900
    ) -> subprocess.CompletedProcess:
        """One command as `subprocess.run(..., capture_output=True, text=True)` would give it: its exit status,
        its whole stdout and stderr apart; it sees `env` (the caller's environment now)."""
        self.count += 1
        output, errors = self.scratch / f"command-{self.count}.out", self.scratch / f"command-{self.count}.err"
        request = {"argv": argv, "cwd": str(cwd), "input": input, "output": str(output), "errors": str(errors)}
        answer = self._ask(request | {"env": dict(env), "timeout": timeout})
        read = [p.read_text(encoding="utf-8", errors="replace") for p in (output, errors)]
        output.unlink()
        errors.unlink()
        return subprocess.CompletedProcess(["tinyformer", *argv], answer["status"], *read)

    def _ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm parent ended (exit {self.process.wait()}) before answering {request['argv']}")
        return json.loads(line)

    def __enter__(self) -> WarmParent:
        return self

    def __exit__(self, *exc) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


if __name__ == "__main__":
    serve_forever()
