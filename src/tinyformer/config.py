"""Typed run configuration: dataclasses, TOML presets and `--set a.b=v` overrides.

A run's config is a tree of dataclasses. It is built in one direction:
defaults -> TOML preset -> `--set` overrides -> dataclass constructors, so every
value passes through `__post_init__` validation exactly once, and an unknown key
or a value of the wrong type ends in a `UserError` naming it.

Glossary: one name per idea, across every model and task.

    block_size   model: the longest sequence it takes (the rows of its position table; GPT's context)
    n_embd       model: the width D of every token vector
    n_layer      model: Transformer blocks (encoder-decoder: n_encoder_layers + n_decoder_layers)
    n_head       model: attention heads per attention layer
    d_ff         model: feed-forward width (MiniGPT: mlp_ratio * n_embd)
    vocab_size   model: tokens in the vocabulary (0 = take it from the tokenizer)
    seq_len      data: tokens per training example (a window, or a text cut to it), <= model.block_size
    min_len, max_len   data, reverse only: the shortest and longest digit sequence

Keys renamed to this glossary (`RENAMED`) fail on the command line with a hint
naming the new key; run folders written before the rename load through `migrate`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinyformer.errors import UserError
from tinyformer.files import input_file
from tinyformer.overrides import parse_override
from tinyformer.seeds import check_seed

SCHEDULES = ("constant", "cosine", "noam", "wsd")
OPTIMIZERS = ("adamw", "muon")  # train.optimizer; see `tinyformer.train.optim`
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # train.precision; `tinyformer.device` resolves "auto"
EVAL_BATCHES = ("fixed", "fresh")  # train.eval_batches
WEIGHTS = ("best", "latest")  # train.weights: best.safetensors or model.safetensors
STOP_AT = re.compile(r"\s*(\w+)\s*(>=|<=)\s*([-+0-9.eE]+)\s*")


def stop_target(text: str) -> tuple[str, str, float]:
    """`train.stop_at` ("exact_match>=0.99") -> (metric, ">=" or "<=", value), or a UserError naming it."""
    m = STOP_AT.fullmatch(text)
    try:
        value = float(m.group(3)) if m else math.nan
    except ValueError:
        value = math.nan
    if m is None or not math.isfinite(value):
        raise UserError(f"train.stop_at={text!r}: give METRIC>=VALUE or METRIC<=VALUE, e.g. exact_match>=0.99")
    return m.group(1), m.group(2), value


def target_met(text: str, result: dict) -> bool:
    """Whether an evaluation's `result` meets `train.stop_at`; a metric the task does not report is a UserError."""
    metric, op, value = stop_target(text)
    if metric not in result:
        raise UserError(f"train.stop_at={text!r}: this task's evaluation reports {', '.join(sorted(result))}")
    return result[metric] >= value if op == ">=" else result[metric] <= value


MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3  # below: logits / T overflows; use 0 for greedy
MAX_SAMPLE_TOKENS = 1_000_000  # a sample is generated whole, then written: 1e11 tokens ran for days, silent
RENAMED = {  # section -> {old key: new key}
    "model": {"max_position": "block_size", "max_len": "block_size", "d_model": "n_embd"},
    "data": {"max_len": "seq_len"},  # classify's tokens per text (reverse keeps data.max_len: digits)
    "train": {"eval_every": "eval_interval"},
}
ADDED = {  # task -> {key added later whose default recipe differs: what a run folder written before it trained with}
    "gpt": {"model.embedding_dropout": True, "model.init": "gpt2", "train.decay_all": False},
    "reverse": {"model.share_embeddings": True, "data.sampling": "random"},
}
NOT_KEYS = {  # names users bring from other tools that have no one-to-one key here -> what to set instead
    "train.epochs": "training is counted in optimizer steps, not epochs: set train.max_iters",
}


TOKENIZERS = ("char", "bpe")  # data.tokenizer of a language model


MAX_TIME_BUDGET = 365 * 24 * 3600  # train.time_budget's ceiling, a year: more is a typo (99999999h trained, then
# crashed printing its end's clock time)


@dataclass
class DataConfig:
    path: str = ""  # text file; "" = --data, then $TINYFORMER_DATA, then cache/download
    val_fraction: float = 0.1  # last fraction of the text held out for validation
    tokenizer: str = "char"  # "char" (one id per character) or "bpe" (byte-level BPE learned on the train split)
    vocab_size: int = 4096  # bpe: tokens to learn, the 256 bytes included
    seq_len: int = 0  # tokens per training window; 0 = model.block_size
    seq_warmup: int = 0  # steps over which the training window grows from seq_len / 8 (at least 8) to seq_len

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise UserError(f"data.val_fraction={self.val_fraction} must be in (0, 1)")
        if self.tokenizer not in TOKENIZERS:
            raise UserError(f"data.tokenizer={self.tokenizer!r} is not one of {', '.join(TOKENIZERS)}")
        if self.vocab_size < 256 or self.seq_len < 0:
            raise UserError(f"data.vocab_size={self.vocab_size} must be >= 256 and data.seq_len={self.seq_len} >= 0")
        if self.seq_warmup < 0:
            raise UserError(f"data.seq_warmup={self.seq_warmup} must be >= 0 (0 = off)")


@dataclass
class TrainConfig:
    max_iters: int = 3000  # optimizer steps
    batch_size: int = 32  # sequences per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    lr: float = 3e-4  # peak learning rate
    schedule: str = "constant"  # "constant", "cosine" (warmup, cosine decay), "noam" (warmup, 1/sqrt(step))
    # or "wsd" (warmup, stable at lr, then a linear decay to min_lr over the last `cooldown` of the steps)
    warmup_iters: int = 0  # linear warmup steps (every schedule)
    min_lr: float = 0.0  # where cosine and wsd end
    cooldown: float = 0.2  # wsd: the fraction of max_iters, at the end, that decays linearly to min_lr
    optimizer: str = "adamw"  # "adamw", or "muon": Muon for the blocks' weight matrices, AdamW for the rest
    weight_decay: float = 0.01  # AdamW decay, applied to matrices only ...
    decay_all: bool = False  # ... or to every parameter, biases and norms too (AdamW's default; the lab's)
    beta1: float = 0.9  # AdamW first-moment decay
    beta2: float = 0.999  # AdamW second-moment decay
    eps: float = 1e-8  # AdamW denominator epsilon
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    eval_interval: int = 500  # evaluate every this many steps (step 0 of a new run too, and at the end)
    eval_iters: int = 100  # batches averaged per evaluation
    eval_batches: str = "fixed"  # the GPT task's estimate: "fixed", eval_iters val batches, the same every
    # evaluation; "fresh", the MiniGPT lab's, eval_iters new batches of each split (train and val) every evaluation
    log_interval: int = 10  # steps between train-loss records in metrics.jsonl
    stop_at: str = ""  # "METRIC>=VALUE" or "METRIC<=VALUE": end the run at the first evaluation that meets it
    seed: int = 1337  # seeds model init, batches and dropout
    device: str = "auto"  # "auto" (cuda > mps > cpu), "cpu", "cuda" or "mps"
    precision: str = "auto"  # "auto" (bf16 where native, else fp32), "fp32", "bf16" or "fp16" (autocast)
    compile: bool = False  # wrap the model in torch.compile
    tensorboard: bool = False  # also write TensorBoard event files to <run>/tb
    dist_timeout: float = 300.0  # torchrun: seconds a rank waits for the others (to join, or at any collective)
    time_budget: float = 0.0  # seconds for training and evaluation (--time 10m): the schedule is sized to end there
    time_row: str = ""  # the preset --time chose for the budget (`tinyformer.train.budget.row_for`), "" if none
    weights: str = "best"  # the weights the run's commands read (sample, eval, viz, serve, export, sample.txt):
    # "best", the best evaluation's (best.safetensors); "latest", the last step's (model.safetensors), as the course

    def __post_init__(self) -> None:
        for name in ("max_iters", "batch_size", "grad_accum", "eval_interval", "log_interval", "eval_iters"):
            _positive(f"train.{name}", getattr(self, name))
        for name in ("lr", "eps", "dist_timeout"):
            _positive(f"train.{name}", getattr(self, name))
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UserError(f"train.{name}={getattr(self, name)} must be in [0, 1)")
        choices = {"schedule": SCHEDULES, "precision": PRECISIONS, "optimizer": OPTIMIZERS}
        for name, allowed in (choices | {"eval_batches": EVAL_BATCHES, "weights": WEIGHTS}).items():
            if getattr(self, name) not in allowed:
                raise UserError(f"train.{name}={getattr(self, name)!r} is not one of {', '.join(allowed)}")
        if self.optimizer == "muon" and self.precision == "fp16":
            raise UserError("train.optimizer=muon does not run under fp16's loss scaling; use precision bf16 or fp32")
        if not 0.0 < self.cooldown <= 1.0:
            raise UserError(f"train.cooldown={self.cooldown} must be in (0, 1]")
        if not (self.warmup_iters >= 0 and self.min_lr >= 0 and self.grad_clip >= 0):
            raise UserError("train.warmup_iters, train.min_lr and train.grad_clip must be >= 0")
        check_seed("train.seed", self.seed)
        if not (math.isfinite(self.time_budget) and 0 <= self.time_budget <= MAX_TIME_BUDGET):
            raise UserError(
                f"train.time_budget={self.time_budget:g} (--time) must be a number of seconds from 0 (off) to "
                f"{MAX_TIME_BUDGET:,} (a year)"
            )
        if self.stop_at:
            stop_target(self.stop_at)


def cosine(max_iters: int, lr: float, warmup_iters: int, **rest: Any) -> TrainConfig:
    """The tasks' own recipes: a linear warmup to `lr`, then a cosine decay to a tenth of it; `rest` as TrainConfig."""
    return TrainConfig(max_iters=max_iters, lr=lr, schedule="cosine", warmup_iters=warmup_iters, min_lr=lr / 10, **rest)


@dataclass
class SampleConfig:
    prompt: str = "\n"  # text the end-of-run sample.txt continues
    tokens: int = 500  # new tokens in sample.txt
    temperature: float = 0.8  # softmax temperature; 0 = greedy
    top_k: int = 40  # keep the k most likely tokens; 0 = off
    top_p: float = 1.0  # nucleus sampling mass; 1.0 = off
    seed: int = 1  # sampling generator seed

    def __post_init__(self) -> None:
        for name in SAMPLING:
            check_sampling(name, getattr(self, name))


SAMPLING = ("prompt", "tokens", "temperature", "top_k", "top_p", "seed")  # SampleConfig's fields


def check_sampling(name: str, value: Any) -> None:
    """What each sampling setting takes, stated once: `SampleConfig` checks its fields with it, and so do the
    playground's request bodies (`tinyformer.serve.bodies`), so a value one takes the other takes too."""
    if name == "temperature" and not (value == 0 or MIN_TEMPERATURE <= value <= MAX_TEMPERATURE):
        raise UserError(f"temperature={value} must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]")
    if name == "top_k" and value < 0:
        raise UserError(f"top_k={value} must be >= 0 (0 = off)")
    if name == "top_p" and not 0.0 < value <= 1.0:
        raise UserError(f"top_p={value} must be in (0, 1] (1 = off)")
    if name == "tokens" and not 0 <= value <= MAX_SAMPLE_TOKENS:
        raise UserError(f"tokens={value} must be in [0, {MAX_SAMPLE_TOKENS:,}]")
    if name == "prompt" and not value:
        raise UserError("the prompt is empty; give at least one character (e.g. --prompt $'\\n')")
    if name == "seed":
        check_seed("seed", value)


@dataclass
class RunConfig:
    task: str  # which task builds data, model and loss (e.g. "gpt")
    model: Any  # the task's model config dataclass
    data: Any = field(default_factory=DataConfig)  # the task's data config dataclass
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)


def check_fields(
    cfg: Any,
    section: str,
    *,
    positive: tuple[str, ...] = (),
    fractions: tuple[str, ...] = (),
    choices: dict[str, tuple[str, ...]] | None = None,
    divisible: tuple[str, str] | None = None,
) -> None:
    """The checks every model config repeats, each failing with a UserError naming the field.

    positive: > 0; fractions: in [0, 1) (dropout rates); choices: one of the allowed
    strings; divisible: (a, b) with a % b == 0 (width into heads). A `vocab_size`, where the config has one,
    is >= 0 (0: not fitted to the data yet).
    """
    if getattr(cfg, "vocab_size", 0) < 0:
        raise UserError(f"{section}.vocab_size={cfg.vocab_size} must be >= 0")
    for name in positive:
        _positive(f"{section}.{name}", getattr(cfg, name))
    for name in fractions:
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise UserError(f"{section}.{name}={getattr(cfg, name)} must be in [0, 1)")
    for name, allowed in (choices or {}).items():
        if getattr(cfg, name) not in allowed:
            raise UserError(f"{section}.{name}={getattr(cfg, name)!r} is not one of {', '.join(allowed)}")
    if divisible is not None:
        a, b = divisible
        if getattr(cfg, a) % getattr(cfg, b):
            raise UserError(f"{section}.{a}={getattr(cfg, a)} is not divisible by {section}.{b}={getattr(cfg, b)}")


def _positive(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise UserError(f"{name}={value} is not a finite number")
    if value <= 0:
        raise UserError(f"{name}={value} must be > 0")


def _section(where: str) -> str:
    return f"[{where.rstrip('.')}]" if where else "top-level"


def to_dict(cfg: Any) -> dict:
    """A config tree as plain JSON/TOML-ready data."""
    return dataclasses.asdict(cfg)


def build(cls: type, values: dict, where: str = "") -> Any:
    """Construct dataclass `cls` from nested `values`, checking every key and type."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        path = f"{where}{key}"
        if key not in names:
            known = ", ".join(sorted(names))
            raise UserError(f"unknown config key {path!r}; {_section(where)} keys: {known}")
        kind = hints[key]
        if dataclasses.is_dataclass(kind):
            kwargs[key] = build(kind, value, f"{path}.")
        else:
            kwargs[key] = _check_type(path, value, kind)
    return cls(**kwargs)


def _check_type(path: str, value: Any, kind: Any) -> Any:
    """Return `value` as `kind` (int -> float is allowed) or raise naming the key."""
    if kind is Any:
        return value
    if typing.get_origin(kind) is list:  # e.g. list[int]: a TOML array whose items all have the item type
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{path} expects a list, got {value!r}")
        (item,) = typing.get_args(kind)
        return [_check_type(f"{path}[{i}]", v, item) for i, v in enumerate(value)]
    allowed = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    if value is None and type(None) in allowed:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{path}={value} is not a finite number")
    for t in allowed:
        if t is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if t is not type(None) and type(value) is t:
            return value
    names = " or ".join(getattr(t, "__name__", str(t)) for t in allowed)
    raise UserError(f"{path} expects {names}, got {value!r}")


def merge(base: dict, updates: dict, where: str = "") -> dict:
    """Recursive dict update; a key missing from `base` is an unknown config key."""
    out = dict(base)
    for key, value in updates.items():
        if key not in out:
            new = RENAMED.get(where.rstrip("."), {}).get(key)
            if where + key in NOT_KEYS:
                raise UserError(f"there is no config key {where + key!r}; {NOT_KEYS[where + key]}")
            if new in out:
                raise UserError(f"config key {where + key!r} is now {where + new!r} (one glossary for every model)")
            known = ", ".join(sorted(out))
            raise UserError(f"unknown config key {where + key!r}; {_section(where)} keys: {known}")
        if isinstance(out[key], dict):
            if not isinstance(value, dict):
                raise UserError(f"{where + key} is a section; set one of its keys, e.g. {key}.<name>=...")
            out[key] = merge(out[key], value, f"{where}{key}.")
        else:
            out[key] = value
    return out


def migrate(saved: dict, defaults: RunConfig) -> dict:
    """A run folder's config.json written before a key was renamed or added -> the same config in today's names,
    with the value it trained with for each key added since (`ADDED`: not today's default recipe's)."""
    out, added = dict(saved), ADDED.get(defaults.task, {})
    for section, renames in RENAMED.items():
        values, fields = out.get(section), to_dict(defaults).get(section, {})
        if not isinstance(values, dict):
            continue
        values = dict(values)
        for old, new in renames.items():
            if old in values and old not in fields and new in fields and new not in values:
                values[new] = values.pop(old)
        for key, before in added.items():
            if key.startswith(f"{section}.") and key.split(".")[1] not in values:
                values[key.split(".")[1]] = before
        out[section] = values
    return out


PRESETS = Path(__file__).parent / "presets"  # shipped in the package; a checkout's configs/ is this folder


def presets() -> list[str]:
    """The names of the presets that ship with tinyformer (`--config NAME`)."""
    return sorted(p.stem for p in PRESETS.glob("*.toml"))


def preset_path(name: str | Path) -> Path:
    """`--config`: a TOML file, or the name of a shipped preset (`gpt_cpu_quick`, with or without `.toml`)."""
    path = Path(name).expanduser()
    if path.exists() or path.parent != Path("."):  # a file, or a path to one: input_file says what is wrong
        return path
    shipped = PRESETS / f"{path.stem}.toml"
    if path.suffix in ("", ".toml") and shipped.is_file():
        return shipped
    raise UserError(f"config {str(name)!r} is neither a file nor a preset; presets: {', '.join(presets())}")


def load_toml(path: str | Path) -> dict:
    p = input_file(preset_path(path), "config file")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"config file {str(p)!r} is not valid TOML: {e}") from None


def resolve(defaults: RunConfig, layers: list[dict], overrides: list[str]) -> RunConfig:
    """defaults <- each layer (a TOML preset or a saved config) <- `--set` overrides.

    Every section is rebuilt with the dataclass type of its default (the task's
    model and data configs included), so validation runs on the final values.
    """
    values = to_dict(defaults)
    for layer in layers:
        if layer.get("task", defaults.task) != defaults.task:  # before its keys, which would only seem unknown
            raise UserError(f"the config is a {layer['task']!r} preset; use it with `tinyformer train {layer['task']}`")
        values = merge(values, layer)
    for text in overrides:
        keys, value = parse_override(text)
        nested: Any = value
        for k in reversed(keys):
            nested = {k: nested}
        values = merge(values, nested)
    if values["task"] != defaults.task:
        raise UserError(f"config is for task {values['task']!r}, not {defaults.task!r}")
    sections = {}
    for key, value in values.items():
        default = getattr(defaults, key)
        sections[key] = build(type(default), value, f"{key}.") if dataclasses.is_dataclass(default) else value
    return RunConfig(**sections)
