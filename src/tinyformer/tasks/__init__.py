"""The task registry: the CLI and run folders find tasks here, by the name used on the command line.

`TASKS` maps a name (`tinyformer train gpt`) to its task class (see `tinyformer.tasks.base.Task` for the
contract). Adding a task is one module and one line below; `register` adds one from outside the package
(a plug-in, or a test).
"""

from tinyformer.errors import UserError
from tinyformer.tasks.base import Arg, Task
from tinyformer.tasks.classify import ClassifyTask
from tinyformer.tasks.gpt import GPTTask
from tinyformer.tasks.mlm import MLMTask
from tinyformer.tasks.qa import QATask
from tinyformer.tasks.reverse import ReverseTask
from tinyformer.tasks.seq2seq import Seq2SeqTask
from tinyformer.tasks.tag import TagTask

TASKS: dict[str, type[Task]] = {}


def register(task: type[Task]) -> type[Task]:
    """Add `task` under `task.name` (a name may be registered once)."""
    if task.name in TASKS and TASKS[task.name] is not task:
        raise ValueError(f"task name {task.name!r} is taken by {TASKS[task.name].__name__}")
    TASKS[task.name] = task
    return task


def get_task(name: object) -> type[Task]:
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}")
    return TASKS[name]


for _task in (GPTTask, ReverseTask, MLMTask, ClassifyTask, Seq2SeqTask, TagTask, QATask):  # one entry per task
    register(_task)

__all__ = [
    "TASKS",
    "Arg",
    "ClassifyTask",
    "GPTTask",
    "MLMTask",
    "QATask",
    "ReverseTask",
    "TagTask",
    "Task",
    "get_task",
    "register",
]
