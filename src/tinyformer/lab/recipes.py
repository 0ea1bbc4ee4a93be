"""The recipe table: for each task with a course recipe, every config key where a shipped preset differs
from the course (`tinyformer.course`), read from the presets themselves, never typed.

    tinyformer lab recipes      # Markdown: one table per task, the course's value and each preset's
"""

from __future__ import annotations

from typing import Any

from tinyformer import config as cfg
from tinyformer import course

READS_EVERY_PRESET = True  # its tables list every preset: a preset added or changed makes them stale (`lab.stamps`)
SAME = "·"  # a preset that keeps the course's value
MATH = (  # what no key says: the same math, computed another way, in every recipe (the course's included)
    "Computed another way in every run, the course's recipe included, and the same math: attention through "
    "`F.scaled_dot_product_attention` or written out, whichever measures faster here (`model.backend=auto`); "
    "AdamW's fused kernel; a reversal batch cut to its longest pair (padding is never attended nor scored); "
    "the evaluation's batches fixed rather than drawn anew, and the last evaluation after the last step (the "
    "lab's loop evaluates before it). gpt2_finetune takes its architecture and tokenizer from the checkpoint "
    "it starts from."
)

GPU = (  # what differs on a CUDA GPU only, where tinyformer's own device settings apply (`device.configure`)
    "On a CUDA GPU, two more differences: tinyformer turns TF32 matmuls on for every run (`device.configure`), "
    "which the MiniGPT lab's code does not (it multiplies in full fp32); chapter 20 trains in bf16 autocast there "
    "(`USE_BF16`, with TF32 on as here), while `tinyformer train reverse` keeps the chapter's CPU precision, fp32 "
    "(`--set train.precision=bf16` is the chapter's GPU run)."
)


def presets_of(task: str) -> dict[str, dict]:
    """{preset name: its TOML layer} for every shipped preset of `task`."""
    layers = {name: cfg.load_toml(name) for name in cfg.presets()}
    return {name: layer for name, layer in layers.items() if layer.get("task") == task}


def flat(config: cfg.RunConfig) -> dict[str, Any]:
    return {
        f"{s}.{k}": v
        for s, values in cfg.to_dict(config).items()
        if isinstance(values, dict)
        for k, v in values.items()
    }


def differences(task: str) -> tuple[list[str], list[tuple[str, Any, list[Any]]]]:
    """-> (preset names, [(key, the course's value, each preset's value or SAME)]) for the keys some preset changes."""
    from tinyformer.tasks import get_task

    defaults = get_task(task).default_config()
    course_values = flat(defaults)
    layers = presets_of(task)
    resolved = {name: flat(cfg.resolve(defaults, [layer], [])) for name, layer in layers.items()}
    rows = []
    for key, value in course_values.items():
        cells = [resolved[name][key] for name in layers]
        if any(c != value for c in cells):
            rows.append((key, value, [c if c != value else SAME for c in cells]))
    return list(layers), rows


def shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, bool):
        return str(value).lower()
    return {"\n": "`\\n`", "": "(none)"}.get(value, str(value))


def markdown(tasks: tuple[str, ...] = tuple(course.RECIPES)) -> str:
    """One table per course recipe: each key a preset changes, the course's value, and each preset's."""
    parts = []
    for task in tasks:
        names, rows = differences(task)
        head = f"| key | {course.WHERE[task]} (`tinyformer train {task}`) | " + " | ".join(names) + " |"
        lines = [head, "|" + " --- |" * (2 + len(names))]
        lines += [
            f"| `{key}` | {shown(value)} | " + " | ".join(shown(c) for c in cells) + " |" for key, value, cells in rows
        ]
        parts.append(
            f"`tinyformer train {task}` is {course.WHERE[task]}'s recipe; the presets differ in:\n\n" + "\n".join(lines)
        )
    return "\n\n".join(parts) + f"\n\n{MATH}\n\n{GPU}\n"
