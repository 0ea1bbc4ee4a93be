"""What the side-by-side benchmarks share: each measurement in a fresh process, and the line naming the machine.

A measurement runs as `python -m tinyformer.bench.NAME --impl ...` (its peak RSS is its own, and one side's
allocations cannot slow the other's) and prints its figures as one JSON line last; `run_worker` reads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import torch


def run_worker(module: str, args: list[str], echo: bool = False) -> dict:
    """Run `python -m module args` in a fresh process -> the JSON of its last stdout line.

    `echo`: pass its stderr lines (progress) on as they come, above the caller's progress bar."""
    from tqdm import tqdm

    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=out, stderr=subprocess.PIPE, text=True)
        err = []
        for line in proc.stderr:
            err.append(line)
            if echo:
                tqdm.write(line.rstrip())
        if proc.wait() != 0:
            raise RuntimeError(f"benchmark worker {module} {' '.join(args)} failed:\n{''.join(err[-30:])}")
        out.seek(0)
        return json.loads(out.read().strip().splitlines()[-1])


def machine_line() -> str:
    """The CPU, whether it multiplies bf16 natively (read from its flags), threads and torch version."""
    import os

    from tinyformer.device import CPU_BF16_ENV, CPU_BF16_FLAGS, cpu_flags, machine, torch_threads

    found = [f for f in CPU_BF16_FLAGS if f in cpu_flags()]
    bf16 = f"yes ({', '.join(found)})" if found else f"no (neither {' nor '.join(CPU_BF16_FLAGS)} in /proc/cpuinfo)"
    if os.environ.get(CPU_BF16_ENV):
        bf16 += f", taken as {'yes' if os.environ[CPU_BF16_ENV] == '1' else 'no'} ({CPU_BF16_ENV})"
    threads = f"{torch_threads(torch.get_num_threads())}, torch {torch.__version__}"
    return f"machine: {machine()['cpu']}; native bf16: {bf16}; {threads}"
