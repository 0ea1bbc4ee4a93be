"""Tasks: each builds its data and model and defines its loss and evaluation.

`TASKS` maps the name used on the command line (`tinyformer train gpt`) to the
task class. A task class provides `default_config()` (whose model and data
sections give the config types), `build_model(model_config)` and `load_tokenizer(path)` without touching data,
so a run folder can be loaded for sampling with no dataset present.
"""

from tinyformer.tasks.classify import ClassifyTask
from tinyformer.tasks.gpt import GPTTask
from tinyformer.tasks.mlm import MLMTask
from tinyformer.tasks.reverse import ReverseTask

TASKS = {"gpt": GPTTask, "reverse": ReverseTask, "mlm": MLMTask, "classify": ClassifyTask}

__all__ = ["TASKS", "ClassifyTask", "GPTTask", "MLMTask", "ReverseTask"]
