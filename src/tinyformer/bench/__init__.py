"""Benchmarks that print speed and memory figures (never timed assertions in tests)."""
