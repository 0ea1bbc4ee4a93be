"""A Hugging Face config.json, checked before anything is built from it: one table of keys per model family.

`model.init_from`, `load_hf_bert` and the BERT loaders read a downloaded folder, which is untrusted input. Each
family (`FAMILIES`, by `model_type`) is a `Family`: the keys its loader reads (type, range, default: a
`tinyformer.data.hf_files.Key`), the rules between them (heads divide the width, key/value heads divide the
heads), and its parameter count by formula. `check_config` reads every key through that table, then the rules,
then the count: more than `MAX_PARAMETERS`, or more float32 weights than the machine has memory free, is refused
before a single layer is built. Whether MiniGPT or BertEncoder builds a well-formed variant (an activation, a
scaled RoPE) is the family's loader's to say (`gpt2`, `llama`, `hf_bert`). A new family is one more table.

`check_shapes` holds a checkpoint's tensors to the shapes its config.json gives, by name, before any of them is
concatenated or copied. Every refusal is one `UserError` line naming the file and the key (or the tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tinyformer.data.hf_files import MAX_VOCAB, Key, json_object, read_keys
from tinyformer.errors import UserError

MAX_PARAMETERS = 50_000_000_000  # the most a config.json may ask for: 200 GB of float32 weights
MAX_LAYERS = 512  # real checkpoints have at most ~130 (Llama 3.1 405B: 126)
MAX_WIDTH = 2**16  # hidden sizes: real ones are at most ~25,000
MAX_FFN = 2**18  # feed-forward widths: real ones are at most ~100,000
MAX_POSITIONS = 2**24  # context lengths: real ones are at most ~10 million
EPS = dict(low=0.0, high=1.0, bounds="()")  # a norm's epsilon
RATE = dict(low=0.0, high=1.0, bounds="[)")  # a dropout probability


def size(name: str, default: Any = None, high: int = MAX_WIDTH, field: str = "") -> Key:
    """A size: an integer >= 1 (required when no default is given), copied into `field` (its own name: "=")."""
    field = name if field == "=" else field
    return Key(name, int, *(() if default is None else (default,)), low=1, high=high, field=field)


@dataclass(frozen=True)
class Rule:
    """A check between keys: `test(*values)` must hold; else `says`, after the keys and their values."""

    keys: tuple[str, ...]
    test: Callable[..., bool]
    says: str


def divides(part: str, whole: str, what: str) -> Rule:
    return Rule((whole, part), lambda w, p: p is None or (p <= w and w % p == 0), f"{part} must divide {what}")


@dataclass(frozen=True)
class Family:
    """What one model_type's config.json holds: its keys, the rules between them, its parameters by formula."""

    name: str  # how a line names it: "GPT-2", "Llama"
    keys: tuple[Key, ...]
    rules: tuple[Rule, ...]
    params: Callable[[dict], int]  # the parameter count of the model it describes, from the checked keys
    sizes: tuple[str, ...]  # the keys a refused size shows


# ---- the families ----------------------------------------------------------------------------------------------
def gpt2_params(v: dict) -> int:
    """GPT-2: embeddings (V·D + T·D), per layer 4D² + 2·D·F of weights and 9D + F of biases and norms."""
    V, T, D, L = v["vocab_size"], v["n_positions"], v["n_embd"], v["n_layer"]
    F = v["n_inner"] or 4 * D
    tied = v["tie_word_embeddings"]
    return (V + T) * D + L * (4 * D * D + 2 * D * F + 9 * D + F) + 2 * D + (0 if tied else V * D)


def llama_params(v: dict) -> int:
    """Llama / Qwen2: V·D embedding, per layer D·(D+2·Dkv) + D² attention (+ D+2·Dkv q/k/v bias: Qwen2),
    3·D·I SwiGLU, 2D norms; a D final norm and an untied V·D head."""
    V, D, L, H, I = (v[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                    "intermediate_size"))  # fmt: skip
    Dkv = (v["num_key_value_heads"] or H) * (D // H)
    bias = (D + 2 * Dkv) if v["model_type"] == "qwen2" else 0
    layer = D * (D + 2 * Dkv) + D * D + bias + 3 * D * I + 2 * D
    return V * D + L * layer + D + (0 if v["tie_word_embeddings"] else V * D)


def bert_params(v: dict) -> int:
    """BERT's encoder: (V+T+S)·D embeddings and a 2D LayerNorm, per layer 4D²+4D attention, 2·D·F+F+D MLP, 4D
    norms (the masked-LM head, D² + 3D + V more, is not counted)."""
    V, T, S = v["vocab_size"], v["max_position_embeddings"], v["type_vocab_size"]
    D, L, F = v["hidden_size"], v["num_hidden_layers"], v["intermediate_size"]
    return (V + T + S) * D + 2 * D + L * (4 * D * D + 4 * D + 2 * D * F + F + D + 4 * D)


def _even_heads(D: int, H: int) -> bool:
    return (D // H) % 2 == 0 and D // H >= 4


GPT2 = Family(
    "GPT-2",
    keys=(
        Key("model_type", str),
        size("vocab_size", high=MAX_VOCAB, field="="),
        size("n_positions", high=MAX_POSITIONS, field="block_size"),
        size("n_embd", field="="),
        size("n_layer", high=MAX_LAYERS, field="="),
        size("n_head", field="="),
        Key("n_inner", int, None, low=1, high=MAX_FFN),
        Key("activation_function", str, "gelu_new"),
        Key("layer_norm_epsilon", float, 1e-5, **EPS, field="norm_eps"),
        Key("tie_word_embeddings", bool, True, field="tie_weights"),
        Key("scale_attn_weights", bool, True),
        Key("scale_attn_by_inverse_layer_idx", bool, False),
    ),
    rules=(divides("n_head", "n_embd", "the width"),),
    params=gpt2_params,
    sizes=("vocab_size", "n_positions", "n_embd", "n_layer"),
)
LLAMA_KEYS = (
    Key("model_type", str),
    size("vocab_size", high=MAX_VOCAB, field="="),
    size("max_position_embeddings", 2048, high=MAX_POSITIONS, field="block_size"),
    size("hidden_size", field="n_embd"),
    size("intermediate_size", high=MAX_FFN),
    size("num_hidden_layers", high=MAX_LAYERS, field="n_layer"),
    size("num_attention_heads", field="n_head"),
    Key("num_key_value_heads", int, None, low=1, high=MAX_WIDTH),
    Key("head_dim", int, None, low=1, high=MAX_WIDTH),
    Key("hidden_act", str, "silu"),
    Key("rms_norm_eps", float, 1e-6, **EPS, field="norm_eps"),
    Key("tie_word_embeddings", bool, False, field="tie_weights"),
    Key("rope_theta", float, 10000.0, low=1.0, high=1e12),
    Key("rope_scaling", dict, {}),  # an object or null
    Key("rope_scaling.rope_type", str, None),
    Key("rope_scaling.type", str, None),  # transformers 4's older name of rope_type
    Key("rope_parameters", dict, {}),  # transformers 5
    Key("rope_parameters.rope_type", str, None),
    Key("rope_parameters.rope_theta", float, None, low=1.0, high=1e12),
)
LLAMA_RULES = (
    divides("num_attention_heads", "hidden_size", "the width"),
    divides("num_key_value_heads", "num_attention_heads", "the heads"),
    Rule(("hidden_size", "num_attention_heads"), _even_heads, "rotary positions need an even head width of >= 4"),
)
LLAMA_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
LLAMA = Family(
    "Llama",
    LLAMA_KEYS + (Key("attention_bias", bool, False), Key("mlp_bias", bool, False)),
    LLAMA_RULES,
    llama_params,
    LLAMA_SIZES,
)
QWEN2 = Family("Qwen2", LLAMA_KEYS + (Key("use_sliding_window", bool, False),), LLAMA_RULES, llama_params, LLAMA_SIZES)
BERT = Family(  # transformers' BertConfig defaults for what a config.json leaves out
    "BERT",
    keys=(
        Key("model_type", str),
        size("vocab_size", 30522, high=MAX_VOCAB, field="="),
        size("max_position_embeddings", 512, high=MAX_POSITIONS, field="block_size"),
        size("type_vocab_size", 2, high=MAX_WIDTH, field="="),
        size("num_hidden_layers", 12, high=MAX_LAYERS, field="n_layer"),
        size("num_attention_heads", 12, field="n_head"),
        size("hidden_size", 768, field="n_embd"),
        size("intermediate_size", 3072, high=MAX_FFN, field="d_ff"),
        Key("hidden_dropout_prob", float, 0.1, **RATE, field="dropout"),
        Key("attention_probs_dropout_prob", float, 0.1, **RATE, field="attn_dropout"),
        Key("layer_norm_eps", float, 1e-12, **EPS, field="layer_norm_eps"),
        Key("hidden_act", str, "gelu"),
        Key("position_embedding_type", str, "absolute"),
    ),
    rules=(divides("num_attention_heads", "hidden_size", "the width"),),
    params=bert_params,
    sizes=("vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size", "num_hidden_layers"),
)
FAMILIES = {"gpt2": GPT2, "llama": LLAMA, "qwen2": QWEN2, "bert": BERT}  # model_type -> its table


# ---- checking --------------------------------------------------------------------------------------------------
def model_type(hf: Any, where: str = "config.json") -> Any:
    """A config.json's model_type (None when it has none), which picks the table its keys are read with."""
    return json_object(hf, getattr(hf, "where", where)).get("model_type")


def check_config(hf: Any, where: str = "config.json") -> dict[str, Any]:
    """A config.json's values (as parsed; `where` names the file unless they are a `hub.FromFile`) -> {key: checked
    value} for every key of its family's table, defaults filled in. A model_type with no table is left for the
    loader to refuse."""
    where = getattr(hf, "where", where)
    family = FAMILIES.get(model_type(hf, where))
    if family is None:
        return dict(hf)
    values = read_keys(hf, family.keys, where)
    for rule in family.rules:
        if not rule.test(*(values[k] for k in rule.keys)):
            given = ", ".join(f"{k}={values[k]}" for k in rule.keys)
            raise UserError(f"{where}: {given}: {rule.says}")
    check_size(family, values, where)
    return values


def copied(values: dict[str, Any]) -> dict[str, Any]:
    """Checked config.json values (`check_config`) -> the config fields that take them as they are (`Key.field`)."""
    return {key.field: values[key.name] for key in FAMILIES[values["model_type"]].keys if key.field}


def check_size(family: Family, values: dict[str, Any], where: str) -> int:
    """The family's parameter count by formula -> that count; UserError past `MAX_PARAMETERS` or past the memory
    free for its float32 weights (what loading it needs at the least)."""
    from tinyformer.device import available_memory, gib

    count = family.params(values)
    sizes = ", ".join(f"{k}={values[k]:,}" for k in family.sizes)
    model = f"{where}: a {family.name} of {count:,} parameters ({sizes})"
    if count > MAX_PARAMETERS:
        raise UserError(f"{model} is more than {MAX_PARAMETERS:,}, the most tinyformer loads")
    free = available_memory(torch.device("cpu"))
    if free is not None and 4 * count > free:
        raise UserError(f"{model} needs {gib(4 * count)} of float32 weights, more than the {gib(free)} free")
    return count


def check_shapes(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], where: str) -> None:
    """Each tensor of `state` that `expected` names must have that shape (a missing one is the importer's to
    name); UserError naming the first that does not, with both shapes."""
    for name, shape in expected.items():
        if name in state and tuple(state[name].shape) != tuple(shape):
            found = tuple(state[name].shape)
            raise UserError(f"{where}: tensor {name!r} has shape {found}, its config.json says {tuple(shape)}")
