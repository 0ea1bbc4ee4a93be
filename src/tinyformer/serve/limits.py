"""What one playground server allows (`tinyformer serve --max-*`), importable without its web packages, so
that the command line can show the defaults without FastAPI installed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_body: int = 65_536  # bytes of a request body
    max_tokens: int = 1_000  # tokens one generate request may ask for
    max_generations: int = 4  # generations running at once; more wait for a slot
    wait_s: float = 30.0  # how long a request waits for a slot before a 503
