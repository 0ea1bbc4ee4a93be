"""The task registry: the CLI and run folders find tasks here, by the name used on the command line.

`CARDS` (`tinyformer.tasks.cards`) says what the command line knows of each task without importing it;
`TASKS` maps a name (`tinyformer train gpt`) to its task class (see `tinyformer.tasks.base.Task` for the
contract), imported when it is first asked for, so that `import tinyformer.tasks` loads no torch. Adding a
task is one module and its card; `register` adds one from outside the package (a plug-in, or a test).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from tinyformer.errors import UserError
from tinyformer.tasks.cards import CARDS, Arg, Card


class _Registry(Mapping):
    """name -> task class, in `CARDS` order; a built-in class is imported on first use."""

    def __init__(self) -> None:
        self._classes: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        if name not in self._classes:
            module, attribute = CARDS[name].where.split(":")  # KeyError for an unknown name, as a dict
            self._classes[name] = getattr(importlib.import_module(module), attribute)
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(CARDS)

    def __len__(self) -> int:
        return len(CARDS)


TASKS: Mapping[str, Any] = _Registry()


def register(task: type) -> type:
    """Add `task` under `task.name` (a name may be registered once), with a card made from its attributes."""
    if task.name in CARDS and TASKS[task.name] is not task:
        raise ValueError(f"task name {task.name!r} is taken by {TASKS[task.name].__name__}")
    CARDS[task.name] = Card.of(task)
    TASKS._classes[task.name] = task
    return task


def unregister(name: str) -> None:
    """Remove a task added by `register` (a test's own task, once the test is done)."""
    CARDS.pop(name)
    TASKS._classes.pop(name, None)


def get_task(name: object) -> type:
    if name not in CARDS:
        raise UserError(f"unknown task {name!r}; tasks: {', '.join(CARDS)}")
    return TASKS[name]


_CLASSES = {card.where.split(":")[1]: name for name, card in CARDS.items()}  # "GPTTask" -> "gpt"


def __getattr__(name: str) -> Any:
    """`Task` and each task class (`GPTTask`, ...) are imported on first use, with torch."""
    if name == "Task":
        from tinyformer.tasks.base import Task

        return Task
    if name in _CLASSES:
        return TASKS[_CLASSES[name]]
    raise AttributeError(f"module 'tinyformer.tasks' has no attribute {name!r}")


__all__ = [
    "CARDS",
    "TASKS",
    "Arg",
    "Card",
    "ClassifyTask",
    "GPTTask",
    "MLMTask",
    "QATask",
    "ReverseTask",
    "Seq2SeqTask",
    "TagTask",
    "Task",
    "get_task",
    "register",
    "unregister",
]
