"""The signal probe (issue 60): a training command gets SIGINT at moments spread over its whole life, started
with SIGINT at its default and ignored (as from a background job), and the table says whether each run did what
`tinyformer.interrupt`'s rule says: default -> it stops (exit 130, at most one line on stderr, no traceback);
ignored -> it trains on, and a SIGTERM then stops it (exit 143, one line). Prints one row per run and the count.

    python scripts/signal_probe.py [--data FILE] [--delays 0.05,0.2,...] [--sigterm]

--sigterm sends SIGTERM instead of SIGINT (then both dispositions must stop, with 143).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SET_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, getattr(signal, sys.argv[1])); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)
DELAYS = "0.05,0.1,0.2,0.3,0.5,0.7,1,1.5,2,2.5,3,3.5,4,4.5,5,6,7,8"


def start(argv: list[str], disposition: str) -> subprocess.Popen:
    """`argv` with SIGINT set to `disposition` (SIG_DFL or SIG_IGN) for it, in a session of its own; its
    stdout unbuffered, so the last line read is where it was."""
    cmd = [sys.executable, "-c", SET_SIGINT, disposition, *argv]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kw = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    return subprocess.Popen(cmd, **kw)


def read_lines(p: subprocess.Popen) -> list[str]:
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True).start()
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("TINYFORMER_DATA", "../shared/data/tinyshakespeare.txt"))
    ap.add_argument("--delays", default=DELAYS)
    ap.add_argument("--sigterm", action="store_true")
    a = ap.parse_args()
    sent = signal.SIGTERM if a.sigterm else signal.SIGINT
    work = Path(tempfile.mkdtemp(prefix="signal-probe-"))
    data = work / "slice.txt"
    data.write_text(Path(a.data).read_text(encoding="utf-8")[:100_000], encoding="utf-8")
    small = ["model.n_layer=2", "model.n_embd=64", "model.n_head=4", "train.max_iters=100000"]
    small += ["train.eval_interval=200"]
    good = total = 0
    head = f"{'SIGINT on entry':<16} {'delay s':>7}  {'last line before the signal':<44} {'outcome':<34}"
    print(head + " as the rule says")
    for disposition in ("SIG_DFL", "SIG_IGN"):
        for delay in [float(d) for d in a.delays.split(",")]:
            out = work / f"r-{disposition}-{delay}"
            argv = [sys.executable, "-m", "tinyformer", "train", "gpt", "--data", str(data), "--out", str(out)]
            argv += [x for s in small for x in ("--set", s)] + ["--device", "cpu"]
            p = start(argv, disposition)
            lines = read_lines(p)
            time.sleep(delay)
            seen = lines[-1].strip()[:44] if lines else "(none: start-up)"
            p.send_signal(sent)
            stops = sent == signal.SIGTERM or disposition == "SIG_DFL"
            try:
                p.wait(timeout=60 if stops else 5)
            except subprocess.TimeoutExpired:
                pass
            ran_on = p.poll() is None
            if ran_on:
                p.send_signal(signal.SIGTERM)  # ignored SIGINT: SIGTERM must stop it
                p.wait(timeout=60)
            err = p.stderr.read()
            code, one_line = p.returncode, "Traceback" not in err and err.count("\n") <= 1
            want = 128 + sent if stops else 143
            ok = one_line and (code == want or (code == -sent and not lines)) and ran_on != stops
            outcome = ("trained on, then SIGTERM: " if ran_on else "stopped: ") + f"exit {code}"
            good, total = good + ok, total + 1
            print(f"{disposition:<16} {delay:>7.2f}  {seen:<44} {outcome:<34} {'yes' if ok else 'NO: ' + err[-200:]}")
            os.killpg(p.pid, signal.SIGKILL) if p.poll() is None else None
    print(f"{good}/{total} runs did what the rule says ({signal.Signals(sent).name}; {os.cpu_count()} cores)")
    return 0 if good == total else 1


if __name__ == "__main__":
    sys.exit(main())
