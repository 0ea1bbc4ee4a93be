"""Learning-rate schedules as pure functions of the step, so resuming needs only the step.

- constant: linear warmup over `warmup_iters`, then `lr`.
- cosine:   linear warmup, then a half cosine from `lr` down to `min_lr` at `max_iters`
            (Loshchilov & Hutter, 2017, without restarts).
- noam:     Vaswani et al. (2017): d^-1/2 * min(s^-1/2, s * warmup^-3/2) for step s = step + 1,
            written as lr * min(sqrt(warmup / s), s / warmup) so that `lr` is the peak, reached
            at s = warmup; the paper's schedule is lr = d^-1/2 * warmup^-1/2.
- wsd:      warmup-stable-decay (trapezoidal; Hu et al., 2024, MiniCPM): linear warmup, `lr` held, then a
            linear decay to `min_lr` over the last `cooldown` fraction of `max_iters`.
"""

from __future__ import annotations

import math

from tinyformer.config import TrainConfig


def lr_at(step: int, c: TrainConfig) -> float:
    """Learning rate for optimizer step `step` (0-based)."""
    if c.schedule == "noam":
        s, w = step + 1, max(1, c.warmup_iters)
        return c.lr * min(math.sqrt(w / s), s / w)
    if step < c.warmup_iters:
        return c.lr * (step + 1) / c.warmup_iters
    if c.schedule == "constant":
        return c.lr
    if c.schedule == "wsd":
        decay = max(1, round(c.cooldown * c.max_iters))  # the last `decay` steps
        left = c.max_iters - step  # steps still to take, this one included
        return c.lr if left > decay else c.min_lr + (c.lr - c.min_lr) * left / decay
    span = max(1, c.max_iters - c.warmup_iters)
    progress = min(1.0, (step - c.warmup_iters) / span)
    return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + math.cos(math.pi * progress))
