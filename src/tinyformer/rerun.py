"""What `tinyformer.api.train` does when its `out` folder already holds a run: a run of the same config is
reused when it has finished and resumed when it has not, so a notebook cell run twice trains once; a run of
another config is refused, in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from tinyformer.errors import UserError


def finished_there(task: str, out: str | Path, saved: dict, layers: list, sets: list[str]) -> bool:
    """Whether the run in `out` (a run folder, whose config.json holds `saved`) has finished; one of another
    config than the one asked for is refused, in one line."""
    from tinyformer.experiments.runner import finished
    from tinyformer.runs import new_config

    asked = new_config(task, layers, sets)
    if not same_config(asked, saved):
        raise UserError(
            f"run folder {str(out)!r} holds a run of another config; pick another out, or resume it as it is "
            f"with train({task!r}, resume={str(out)!r})"
        )
    return finished(Path(out))


def same_config(config, saved: dict) -> bool:
    """`config` (resolved, not yet fitted to its data) is the one a run folder saved: equal in every key but
    those a task fills in from its data when the config leaves them unset (as `runner.same_run` compares)."""
    from tinyformer import config as cfg
    from tinyformer.experiments.runner import DERIVED, LABELS

    want, have = json.loads(json.dumps(cfg.to_dict(config))), json.loads(json.dumps(saved))
    for section, key in LABELS:  # a run saved before the label existed, or from its preset's copy: the same run
        for values in (want.get(section), have.get(section)):
            if isinstance(values, dict):
                values.pop(key, None)
    for section, key in DERIVED:
        if not want.get(section, {}).get(key, True):
            for values in (want.get(section), have.get(section)):
                if isinstance(values, dict):
                    values.pop(key, None)
    return want == have
