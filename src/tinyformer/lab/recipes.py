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
TEXT = {  # what no key says, in the guide's two languages (`tinyformer lab recipes --lang zh`)
    "en": {
        "intro": "`tinyformer train {task}` is {where}'s recipe; the presets differ in:",
        "key": "key",
        "where": {"gpt": "the MiniGPT lab", "reverse": "chapter 20"},
        # the same math, computed another way, in every recipe (the course's included)
        "math": "Computed another way in every run, the course's recipe included, and the same math: attention "
        "through `F.scaled_dot_product_attention` or written out, whichever measures faster here "
        "(`model.backend=auto`); AdamW's fused kernel; a reversal batch cut to its longest pair (padding is never "
        "attended nor scored). Other estimates, named: the evaluation's batches are drawn from a generator of their "
        "own (the lab draws them from the training batches' stream), and the last evaluation comes after the last "
        "step (the lab's loop evaluates before it). gpt2_finetune takes its architecture and tokenizer from the "
        "checkpoint it starts from.",
        # what differs on a CUDA GPU only, where tinyformer's own device settings apply (`device.configure`)
        "gpu": "On a CUDA GPU, two more differences: tinyformer turns TF32 matmuls on for every run "
        "(`device.configure`), which the MiniGPT lab's code does not (it multiplies in full fp32); chapter 20 trains "
        "in bf16 autocast there (`USE_BF16`, with TF32 on as here), while `tinyformer train reverse` keeps the "
        "chapter's CPU precision, fp32 (`--set train.precision=bf16` is the chapter's GPU run).",
    },
    "zh": {
        "intro": "`tinyformer train {task}` 就是{where}的配方；各预设与它不同的配置项如下：",
        "key": "配置项",
        "where": {"gpt": "MiniGPT 实验", "reverse": "第 20 章"},
        "math": "以下几处在每次运行中（讲义的配方也不例外）算法不同、数学相同：注意力走 "
        "`F.scaled_dot_product_attention` 还是逐步写出，取本机实测更快的那个（`model.backend=auto`）；AdamW 用融合"
        "内核；反转任务的一批数据截到其中最长的一对（填充位置既不被注意，也不计分）。另有两处是不同的估计，在此"
        "注明：评测的批次由评测自己的随机数生成器抽取（实验讲义从训练批次的同一个随机流里抽），最后一次评测在最后"
        "一步之后（讲义的循环在它之前评测）。gpt2_finetune 的结构和分词器取自它起步的检查点。",
        "gpu": "在 CUDA GPU 上还有两处不同：tinyformer 对每次运行都打开 TF32 矩阵乘（`device.configure`），而 "
        "MiniGPT 实验的代码没有（它用完整的 fp32 相乘）；第 20 章在 GPU 上用 bf16 autocast 训练（`USE_BF16`，"
        "TF32 与这里一样打开），`tinyformer train reverse` 则保持本章在 CPU 上的精度 fp32"
        "（`--set train.precision=bf16` 就是本章在 GPU 上的做法）。",
    },
}


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


def markdown(tasks: tuple[str, ...] = tuple(course.RECIPES), lang: str = "en") -> str:
    """One table per course recipe: each key a preset changes, the course's value, and each preset's; then
    what no key says. `lang`: "en" or "zh" (the guide's Chinese pages)."""
    text, parts = TEXT[lang], []
    for task in tasks:
        names, rows = differences(task)
        where = text["where"][task]
        head = f"| {text['key']} | {where} (`tinyformer train {task}`) | " + " | ".join(names) + " |"
        lines = [head, "|" + " --- |" * (2 + len(names))]
        lines += [
            f"| `{key}` | {shown(value)} | " + " | ".join(shown(c) for c in cells) + " |" for key, value, cells in rows
        ]
        parts.append(text["intro"].format(task=task, where=where) + "\n\n" + "\n".join(lines))
    return "\n\n".join(parts) + f"\n\n{text['math']}\n\n{text['gpu']}\n"
