"""A downloaded Hugging Face folder is untrusted input (issue 72): every bad config.json key, tokenizer file or
tensor shape that `model.init_from` meets is one UserError line naming the file and the key, before any layer is
built; nothing hangs (10**8 layers, a named pipe where a file belongs).

The folders are tiny ones written here, with no network: a GPT-2 and a Llama exported from a MiniGPT (their
tokenizer a character vocabulary, as `export hf` writes it), and a BERT written from a `BertEncoder` with a
WordPiece tokenizer trained on the text. Each case breaks one thing in a good folder and goes through the path a
new run takes (`prepare`, the memory estimate, `build_model`, `init_model`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.cli_helpers import user_error
from tinyformer.data.subword import SubwordTokenizer
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.models import count_parameters
from tinyformer.models.bert import BertConfig, BertEncoder
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.models.hf_bert import config_from_hf as bert_config
from tinyformer.models.hf_lm import config_from_hf, export_hf
from tinyformer.runs import load_source, prepare_run, training_bytes

TEXT = "the cat sat on the mat and the dog ran to the cat.\n" * 30
LLAMA = dict(norm="rmsnorm", ffn="swiglu", positions="rope", bias=False, n_kv_head=2, mlp_ratio=3.0)


# ---- tiny folders ----------------------------------------------------------------------------------------------
def lm_folder(folder: Path, kind: str) -> Path:
    """A GPT-2 ("gpt2"), Llama ("llama") or Qwen2 ("qwen2") folder: config.json, model.safetensors, tokenizer.json."""
    folder.mkdir()
    tok = CharTokenizer.from_text(TEXT)
    switches = {} if kind == "gpt2" else LLAMA | {"qkv_bias": kind == "qwen2"}
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=16, **switches))
    config, tensors = export_hf(model)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, folder / "model.safetensors")
    tok.to_hf().save(str(folder / "tokenizer.json"))
    return folder


def bert_folder(folder: Path) -> Path:
    """A BERT folder: config.json, model.safetensors (Hugging Face's names) and a WordPiece tokenizer.json."""
    from tinyformer.models.hf_bert import _BLOCK_NAMES, _EMBEDDING_NAMES

    folder.mkdir()
    tok = SubwordTokenizer.train([TEXT], vocab_size=60)
    c = BertConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=8, d_ff=16)
    mine = BertEncoder(c).state_dict()
    state = {hf: mine[ours] for ours, hf in _EMBEDDING_NAMES}
    for ours, hf in _BLOCK_NAMES:
        state |= {f"encoder.layer.0.{hf}.{p}": mine[f"blocks.0.{ours}.{p}"] for p in ("weight", "bias")}
    for p in ("weight", "bias"):
        for name, part in zip(("query", "key", "value"), mine[f"blocks.0.attn.qkv.{p}"].chunk(3), strict=True):
            state[f"encoder.layer.0.attention.self.{name}.{p}"] = part
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors")
    hf = dict(model_type="bert", vocab_size=c.vocab_size, max_position_embeddings=32, num_hidden_layers=1)
    hf |= dict(num_attention_heads=2, hidden_size=8, intermediate_size=16)
    (folder / "config.json").write_text(json.dumps(hf))
    tok.save(folder / "tokenizer.json")
    return folder


def init_from(folder: Path, task: str, tmp_path: Path) -> None:
    """What a new run with model.init_from=`folder` does before its first step: the task prepared from the
    checkpoint's config and tokenizer, the memory estimate, the model built, the checkpoint's weights copied."""
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    over = [f"model.init_from={json.dumps(str(folder))}", f"data.path={json.dumps(str(text))}", "data.seq_len=16"]
    over += ['sample.prompt="the"'] if task == "gpt" else []
    config, task_cls, _, _ = prepare_run(task, [], over)
    prepared = task_cls.prepare(config)
    training_bytes(prepared)  # what `train` checks against the memory free before it builds the model
    model = prepared.build_model()
    prepared.init_model(model, load_source(prepared.init_from()))


def change(file: str, **keys) -> Callable[[Path], None]:
    """A case that sets `keys` in the folder's JSON file `file` (a value of `...` deletes the key)."""

    def edit(folder: Path) -> None:
        data = json.loads((folder / file).read_text())
        for key, value in keys.items():
            *parents, leaf = key.split("__")  # model__vocab__the: data["model"]["vocab"]["the"]
            holder = data
            for name in parents:
                holder = holder[name]
            holder.pop(leaf) if value is ... else holder.__setitem__(leaf, value)
        (folder / file).write_text(json.dumps(data))

    return edit


def write(file: str, text: str) -> Callable[[Path], None]:
    return lambda folder: (folder / file).write_text(text)


UNBLOCK = """import os, sys, time
time.sleep(5)
for _ in range(60):
    try:
        os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # nobody is reading it now
        pass
    time.sleep(1)
"""
WATCHDOGS: list[subprocess.Popen] = []


def pipe(file: str) -> Callable[[Path], None]:
    """A case that puts a named pipe where `file` was. From 5 s on, a watchdog process (a thread would wait for
    the GIL that a blocked open may hold) opens it for writing every second, so code that opens it anyway, as
    often as it does, reads an empty file and fails the test instead of hanging it."""

    def make(folder: Path) -> None:
        path = folder / file
        path.unlink(missing_ok=True)
        os.mkfifo(path)
        WATCHDOGS.append(subprocess.Popen([sys.executable, "-c", UNBLOCK, str(path)]))

    return make


@pytest.fixture(autouse=True)
def _no_watchdog_left():
    yield
    while WATCHDOGS:
        process = WATCHDOGS.pop()
        process.kill()
        process.wait()


def retensor(name: str, shape: tuple[int, ...]) -> Callable[[Path], None]:
    """A case whose checkpoint holds tensor `name` with another shape."""

    def edit(folder: Path) -> None:
        state = load_file(folder / "model.safetensors")
        state[name] = torch.zeros(shape)
        save_file(state, folder / "model.safetensors")

    return edit


def bert_vocab_txt(settings: str | None) -> Callable[[Path], None]:
    """A BERT folder whose tokenizer is a vocab.txt, with a tokenizer_config.json of `settings` (None: a pipe)."""

    def edit(folder: Path) -> None:
        vocab = json.loads((folder / TOKENIZER).read_text())["model"]["vocab"]
        (folder / TOKENIZER).unlink()
        (folder / "vocab.txt").write_text("".join(f"{t}\n" for t in sorted(vocab, key=vocab.get)))
        if settings is None:
            pipe("tokenizer_config.json")(folder)
        else:
            (folder / "tokenizer_config.json").write_text(settings)

    return edit


def gpt2_without_tokenizer_json(vocab: str, merges: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        (folder / "tokenizer.json").unlink()
        (folder / "vocab.json").write_text(vocab)
        (folder / "merges.txt").write_text(merges)

    return edit


GOOD_VOCAB = json.dumps({c: i for i, c in enumerate(sorted(set(TEXT)) + ["th"])})
CONFIG, TOKENIZER, INT64 = "config.json", "tokenizer.json", 2**64
K_PROJ, QUERY_BIAS = "model.layers.0.self_attn.k_proj.weight", "model.layers.1.self_attn.q_proj.bias"
VALUE = "encoder.layer.0.attention.self.value.weight"
LIMIT = dict(vocab_size=2**23, hidden_size=2**15, num_attention_heads=2**8, head_dim=...)


def config(**keys) -> Callable[[Path], None]:
    return change(CONFIG, **keys)


def no_tokenizer_json(vocab: str, merges: str) -> Callable[[Path], None]:
    return gpt2_without_tokenizer_json(vocab, "#version: 0.2\n" + merges)


# (case, folder kind, what breaks it, the file its line must name, the key or tensor it must name)
CASES = [
    ("key missing", "llama", config(num_attention_heads=...), CONFIG, "num_attention_heads is missing"),
    ("gpt2 key missing", "gpt2", config(n_embd=...), CONFIG, "n_embd is missing"),
    ("0 heads", "llama", config(num_attention_heads=0), CONFIG, "num_attention_heads=0 is out of range"),
    ("gpt2 0 heads", "gpt2", config(n_head=0), CONFIG, "n_head=0 is out of range"),
    ("bert 0 heads", "bert", config(num_attention_heads=0), CONFIG, "num_attention_heads=0 is out of range"),
    ("float for int", "llama", config(hidden_size=16.0), CONFIG, "hidden_size=16.0 is a float"),
    ("gpt2 float for int", "gpt2", config(n_head=2.5), CONFIG, "n_head=2.5 is a float"),
    ("str for int", "llama", config(num_hidden_layers="2"), CONFIG, "num_hidden_layers='2' is a string"),
    ("bool for int", "gpt2", config(n_layer=True), CONFIG, "n_layer=True is a bool"),
    ("str for float", "llama", config(rms_norm_eps="1e-6"), CONFIG, "rms_norm_eps='1e-6' is a string"),
    ("bert str dropout", "bert", config(hidden_dropout_prob="0.1"), CONFIG, "hidden_dropout_prob='0.1' is a string"),
    ("rope_scaling a string", "llama", config(rope_scaling="linear"), CONFIG, "rope_scaling='linear' is a string"),
    ("rope_theta a list", "qwen2", config(rope_parameters__rope_theta=[1]), CONFIG, "rope_parameters.rope_theta=[1]"),
    ("vocab past int64", "llama", config(vocab_size=INT64), CONFIG, "vocab_size=18,446,744,073,709,551,616 is out"),
    ("width past int64", "gpt2", config(n_embd=2**70), CONFIG, "n_embd=1,180,591,620,717,411,303,424 is out"),
    ("bert ffn past int64", "bert", config(intermediate_size=-INT64), CONFIG, "intermediate_size=-18,446,744,073"),
    ("5000 digits", "llama", write(CONFIG, '{"vocab_size": ' + "9" * 5000 + "}"), CONFIG, "is corrupt: Exceeds"),
    ("heads do not divide", "llama", config(num_attention_heads=3), CONFIG, "hidden_size=16, num_attention_heads=3"),
    ("kv heads do not divide", "qwen2", config(num_key_value_heads=3), CONFIG, "heads=4, num_key_value_heads=3"),
    ("bert heads do not divide", "bert", config(num_attention_heads=3), CONFIG, "hidden_size=8, num_attention_heads=3"),
    ("10**8 layers", "llama", config(num_hidden_layers=10**8), CONFIG, "num_hidden_layers=100,000,000 is out"),
    ("bert 10**8 layers", "bert", config(num_hidden_layers=10**8), CONFIG, "num_hidden_layers=100,000,000 is out"),
    ("past the parameter limit", "llama", config(**LIMIT), CONFIG, "parameters (vocab_size=8,388,608"),
    ("q/k/v shapes differ", "llama", retensor(K_PROJ, (8, 7)), "/hf: tensor", f"{K_PROJ!r} has shape (8, 7), its"),
    ("qwen2 bias shape", "qwen2", retensor(QUERY_BIAS, (3,)), "/hf: tensor", f"{QUERY_BIAS!r} has shape (3,), its"),
    ("bert q/k/v shapes differ", "bert", retensor(VALUE, (8, 5)), "/hf: tensor", f"{VALUE!r} has shape (8, 5), its"),
    ("weights a named pipe", "llama", pipe("model.safetensors"), "model.safetensors", "is a named pipe"),
    ("config.json a named pipe", "gpt2", pipe(CONFIG), CONFIG, "is a named pipe"),
    ("tokenizer.json a named pipe", "bert", pipe(TOKENIZER), TOKENIZER, "is a named pipe"),
    ("tokenizer_config.json a pipe", "bert", bert_vocab_txt(None), "tokenizer_config.json", "is a named pipe"),
    ("do_lower_case a string", "bert", bert_vocab_txt('{"do_lower_case": "no"}'), "_config.json", "do_lower_case='no'"),
    ("WordLevel string id", "gpt2", change(TOKENIZER, model__vocab__t="3"), TOKENIZER, "model.vocab['t']='3' is a"),
    ("WordPiece negative id", "bert", change(TOKENIZER, model__vocab__the=-1), TOKENIZER, "model.vocab['the']=-1 is"),
    ("WordPiece no vocab", "bert", change(TOKENIZER, model__vocab=...), TOKENIZER, "model.vocab is missing"),
    ("garbage vocab.json", "gpt2", no_tokenizer_json('{"a": "x"}', ""), "vocab.json", "token['a']='x' is a string"),
    ("vocab.json a list", "gpt2", no_tokenizer_json("[1, 2]", ""), "vocab.json", "the file is a list"),
    ("garbage merges.txt", "gpt2", no_tokenizer_json(GOOD_VOCAB, "t h e\n"), "merges.txt", "line 2='t h e' is not"),
    ("merge of unknown tokens", "gpt2", no_tokenizer_json(GOOD_VOCAB, "h e\n"), "merges.txt", "'he' is not in the"),
]


@pytest.mark.parametrize(("case", "kind", "damage", "file", "key"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_folder_is_one_line_naming_the_file_and_the_key(case, kind, damage, file, key, tmp_path):
    folder = bert_folder(tmp_path / "hf") if kind == "bert" else lm_folder(tmp_path / "hf", kind)
    damage(folder)
    start = time.monotonic()
    with deadline(1.0 if "10**8" in case else 30.0), pytest.raises(UserError) as e:
        init_from(folder, "mlm" if kind == "bert" else "gpt", tmp_path)
    message = str(e.value)
    assert file in message and key in message and "\n" not in message, message
    assert time.monotonic() - start < 4, f"{case}: {time.monotonic() - start:.1f} s"  # a named pipe: never waited on


def test_a_model_past_the_memory_free_is_refused_by_its_count(tmp_path, monkeypatch):
    folder = lm_folder(tmp_path / "hf", "llama")
    monkeypatch.setattr("tinyformer.device.available_memory", lambda device: 4096)  # bytes
    with pytest.raises(UserError, match=r"config.json: a Llama of [\d,]+ parameters \(vocab_size=.*, more than"):
        init_from(folder, "gpt", tmp_path)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2", "bert"])
def test_the_count_by_formula_is_the_built_models_and_a_good_folder_loads(kind, tmp_path):
    """The formula the size check uses counts exactly the parameters of the model its loader builds."""
    from tinyformer.models.hf_config import FAMILIES, check_config, check_size

    folder = bert_folder(tmp_path / "hf") if kind == "bert" else lm_folder(tmp_path / "hf", kind)
    hf = json.loads((folder / "config.json").read_text())
    values = check_config(hf)
    model = BertEncoder(bert_config(hf)) if kind == "bert" else MiniGPT(GPTConfig(**config_from_hf(hf)))
    assert check_size(FAMILIES[kind], values, "config.json") == count_parameters(model)
    init_from(folder, "mlm" if kind == "bert" else "gpt", tmp_path)  # and the folder itself is good


def test_the_command_line_says_one_line_exits_2_and_makes_no_run(tmp_path, capsys):
    folder = lm_folder(tmp_path / "hf", "llama")
    change("config.json", num_key_value_heads=3)(folder)
    (tmp_path / "text.txt").write_text(TEXT)
    out = tmp_path / "run"
    err = user_error(capsys, "train", "gpt", "--data", str(tmp_path / "text.txt"), "--out", str(out),
                     "--set", f"model.init_from={json.dumps(str(folder))}", "--device", "cpu")  # fmt: skip
    assert f"{folder / 'config.json'}: num_attention_heads=4, num_key_value_heads=3" in err, err
    assert not out.exists()


class deadline:
    """Raise TimeoutError in the test's thread when the block runs past `seconds` (a hang fails, never waits)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        def expire(signum, frame):
            raise TimeoutError(f"still running after {self.seconds} s")

        self.previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
