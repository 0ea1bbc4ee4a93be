"""What one checkpoint costs: `Trainer.save()` on the seed recipe (weights, trainer state, commit, loss.png).

The Trainer takes one optimizer step first, so the state holds AdamW's moments as every real save does;
then `repeats` saves into a temporary folder, timed one by one. Printed: the median and the range in ms,
and the bytes one checkpoint writes.

    tinyformer bench save [--repeats 15] [--data FILE]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path


def run_save_benchmark(repeats: int, data: str | None) -> dict:
    from tinyformer.bench.train import _seed_recipe
    from tinyformer.runfolder import STATE, WEIGHTS
    from tinyformer.tasks import GPTTask
    from tinyformer.train.trainer import Trainer

    config = _seed_recipe("fp32", data)
    config.model.backend = "sdpa"  # nothing measured before the saves
    task = GPTTask.prepare(config)
    with tempfile.TemporaryDirectory() as folder:
        trainer = Trainer(task.build_model(), task, task.config.train, Path(folder) / "run", progress=False)
        loss, _ = task.training_step(trainer.model, task.train_batch(config.train.batch_size, trainer.data_rng))
        loss.backward()
        trainer.optimizer.step()
        seconds = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            trainer.save()
            seconds.append(time.perf_counter() - t0)
        written = sum((trainer.run_dir / name).stat().st_size for name in (WEIGHTS, STATE))
    ms = sorted(1e3 * s for s in seconds)
    figures = {"median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1], "bytes": written}
    print(
        f"one save of the seed recipe ({written / 2**20:.1f} MiB of weights and state): median "
        f"{figures['median_ms']:.1f} ms over {repeats} saves (range {ms[0]:.1f}-{ms[-1]:.1f} ms)"
    )
    return figures
