"""What the playground's views compute, from the library's own parts: a task's inputs (its `predict_args`),
checked and converted, and the attention from one token, every layer x head, with the head-role scores."""

from __future__ import annotations

import math

import torch

from tinyformer.errors import UserError
from tinyformer.tasks.base import Task
from tinyformer.viz.capture import capture_parts
from tinyformer.viz.roles import ROLES, head_roles


class Bad(Exception):
    """Bad input: a 4xx JSON answer naming the field."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.field, self.status = field, status


class blame:
    """A UserError raised inside becomes a 4xx (400 unless told) naming `field`."""

    def __init__(self, field: str, status: int = 400) -> None:
        self.field, self.status = field, status

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if isinstance(error, UserError):
            raise Bad(self.field, str(error), self.status) from None
        return False


TYPES = {str: "text", int: "integer", float: "number", None: "switch"}


def inputs(task: type[Task]) -> list[dict]:
    """The fields of a task's predict form: its `predict_args`, as the command line declares them."""
    return [
        {
            "name": a.dest,
            "help": a.help,
            "type": TYPES[a.type],
            "required": a.required,
        }
        for a in task.predict_args
    ]


def task_options(task: Task, given: dict) -> dict:
    """The user's inputs as `Task.play` options: only the task's own names, each of its declared type."""
    args = {a.dest: a for a in task.predict_args}
    for key in given:
        if key not in args:
            raise Bad(f"inputs.{key}", f"a {task.name!r} run takes no input {key!r}; it takes {', '.join(args)}", 422)
    options = {}
    for key, arg in args.items():
        if key not in given:
            if arg.required:
                raise Bad(f"inputs.{key}", f"inputs.{key} is required ({arg.help})", 422)
            continue
        value, kind = given[key], bool if arg.type is None else arg.type
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not kind or (kind is float and not math.isfinite(value)):
            raise Bad(f"inputs.{key}", f"inputs.{key} must be {TYPES[arg.type]}, got {value!r:.60}", 422)
        options[key] = value
    return options


def attention_from(run, text: str | None, ids: list[int] | None, query: int | None, part: str | None) -> dict:
    """The attention from token `query` (default: the last) of `text` (or of `ids`), in every layer and head of
    one attention stack (`part`), with the head roles of the whole text. A language model sees at most its
    block size: the window is the `block_size` tokens that end at the query, as when it generated it."""
    task, model = run.task, run.model
    if (text is None) == (ids is None):
        raise Bad("text", "give the text, or the ids of a language model's tokens (one of the two)", 422)
    if ids is not None:
        inputs, offset = ids_inputs(run, ids, query)
        query = None if query is None else query - offset
    else:
        with blame("text"):
            inputs = task.view_inputs(model, text)
        offset = 0
        limit = getattr(run.config.model, "block_size", None)
        if limit and inputs[0].size(1) > limit:
            raise Bad("text", f"the text is {inputs[0].size(1)} tokens; this model sees at most {limit}")
    with blame("text"):
        parts = {m.part: m for m in capture_parts(model, inputs, task.tokenizer, run.config.task)}
    if part is None:
        part = next(iter(parts))
    if part not in parts:
        raise Bad("part", f"part={part!r} is not one of {', '.join(parts)}")
    maps = parts[part]
    T = len(maps.query_tokens[0])
    query = T - 1 if query is None else query
    if not 0 <= query < T:
        raise Bad("query", f"query={query} is out of range: the text has {T} tokens here (0-{T - 1})")
    roles = head_roles(maps)
    return {
        "parts": list(parts),
        "part": part,
        "kind": maps.kind,
        "queries": maps.query_tokens[0],
        "keys": maps.key_tokens[0],
        "offset": offset,
        "query": query + offset,
        "weights": torch.stack([w[0, :, query] for w in maps.layers]).tolist(),  # (L, H, S)
        "roles": {"dominant": roles.dominant, "scores": {r: nan_free(roles.scores[r]) for r in ROLES}},
    }


def ids_inputs(run, ids: list[int], query: int | None) -> tuple[tuple[torch.Tensor, torch.Tensor], int]:
    """(ids (1, T), mask (1, T)) of the window that ends at `query`, and where that window starts."""
    if "generate" not in run.task.views:
        raise Bad("ids", f"ids are for a language model's tokens; give a {run.config.task!r} run the text", 422)
    vocab = run.config.model.vocab_size
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if not ids or bad is not None:
        raise Bad("ids", f"ids must be 1 or more token ids in 0-{vocab - 1}" + (f"; got {bad}" if ids else ""), 422)
    end = len(ids) if query is None else query + 1
    if end > len(ids):
        raise Bad("query", f"query={query} is out of range: there are {len(ids)} ids (0-{len(ids) - 1})")
    start = max(0, end - run.config.model.block_size)
    window = torch.tensor([ids[start:end]], dtype=torch.long)  # (1, T)
    return (window, torch.ones_like(window)), start


def nan_free(scores: torch.Tensor) -> list[list[float | None]]:
    """(L, H) scores with NaN (a role that does not apply) as None: JSON has no NaN."""
    return [[None if math.isnan(x) else round(x, 4) for x in row] for row in scores.tolist()]
