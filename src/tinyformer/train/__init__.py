"""Training: one Trainer for every task, learning-rate schedules, checkpoints."""
