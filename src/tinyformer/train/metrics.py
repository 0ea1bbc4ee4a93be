"""The training log: one JSON line per record in RUN/metrics.jsonl, and the same numbers in TensorBoard.

Rows carry the step and split ("train" or "val"); every other number becomes a TensorBoard scalar named
split/key. Only the process that writes the run folder (rank 0 under torchrun) logs.
"""

from __future__ import annotations

import json
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.extras import need
from tinyformer.runfolder import METRICS


def require_tensorboard() -> None:
    """Fail now, on every rank alike, if --tensorboard was asked for without the package."""
    need("--tensorboard (train.tensorboard)", "tensorboard")


class MetricsLog:
    def __init__(self, run_dir: Path, tensorboard: bool) -> None:
        self.path, self.tb_dir, self.tensorboard = Path(run_dir) / METRICS, Path(run_dir) / "tb", tensorboard
        self._tb = None
        if tensorboard:
            require_tensorboard()

    def record(self, row: dict) -> None:
        """Append `row` (with "step" and "split") to metrics.jsonl and to TensorBoard."""
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as e:
            raise UserError(f"cannot write {self.path}: {e.strerror}") from None
        if self.tensorboard:
            self._scalars(row)

    def _scalars(self, row: dict) -> None:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.tb_dir), purge_step=row["step"])
        for key, value in row.items():
            if key not in ("step", "split") and isinstance(value, (int, float)):
                self._tb.add_scalar(f"{row['split']}/{key}", value, row["step"])

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
