"""Seeds: the range a seed is checked against, and the one way a seed is derived from another.

A seed a user gives (`train.seed`, `sample.seed`, `data.split_seed`) seeds torch's generators as it is, so it is
checked against what they take, [-2**63, 2**64) (`check_seed`); the reversal task's `data.seed` (and its held-out
seed + 1) seeds numpy's, which takes any seed but a negative one, so it is checked from 0. The run also seeds
generators with numbers made from `train.seed`: evaluation with seed + 1, the fresh-batches evaluation with
(seed + 1) * 1,000,003 + the batches drawn, the reversal task's epochs with seed * 1,000,003 + epoch, an
`--inexact` resume with seed + step. Each of those goes through `derive`, which folds the number mod 2**64: torch
itself reads a seed that way (a negative one as its two's complement), so any derived number torch took before
seeds the very same generator (1337's are unchanged), and one past the range (seed 2**64 - 1 plus one) is no
longer a crash at the first evaluation. Narrowing the checked range instead would have to bound the steps and
batches a run may draw too, and would refuse seeds that runs already use.
"""

from __future__ import annotations

from tinyformer.errors import UserError

SEEDS = 2**64  # how many seeds a torch generator tells apart


def check_seed(name: str, value: int, least: int = -(2**63)) -> None:
    """Seeds must fit the generators they seed: torch's take [-2**63, 2**64); numpy's, which makes the reversal
    task's digits (`data.seed`), no negative one (`least` 0)."""
    if not least <= value < SEEDS:
        low = "-2**63" if least == -(2**63) else str(least)
        raise UserError(f"{name}={value} is outside the range a generator takes, [{low}, 2**64)")


def derive(seed: int, times: int = 1, plus: int = 0) -> int:
    """The seed `seed * times + plus`, folded into [0, 2**64) as torch folds a seed: the same generator as that
    number wherever torch takes it (1337 + 1 is 1338), and a valid one where it would overflow."""
    return (seed * times + plus) % SEEDS
