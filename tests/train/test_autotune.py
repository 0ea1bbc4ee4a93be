"""model.backend=auto: the Trainer measures once, records the choice, and the measurement changes nothing else."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_run_config
from tests.train.test_trainer import make_trainer, weights
from tinyformer import choices, runfolder
from tinyformer.attention.multihead import MultiHeadAttention
from tinyformer.cli import main
from tinyformer.runs import load_run, train_run
from tinyformer.tasks import GPTTask


def backends(model) -> set[str]:
    return {m.backend for m in model.modules() if isinstance(m, MultiHeadAttention)}


def fake_measure(winner: str, calls: list):
    def measure(steps, **_):
        calls.append(sorted(steps))
        for run in steps.values():
            assert run() > 0  # the real step runs: a forward and backward of one batch
        return {name: (2.0e4 if name == winner else 1.0e4) for name in steps}, 0.25

    return measure


def refuse(*_, **__):
    raise AssertionError("nothing may be timed here")


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(choices.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(choices, "_memo", {})  # nor anything this process measured before


def test_an_explicit_backend_times_nothing(text_file, tmp_path, monkeypatch):
    monkeypatch.setattr(choices, "measure", refuse)
    for name in ("sdpa", "manual"):
        t = make_trainer(text_file, tmp_path / name, backend=name)
        assert (t.attention.name, t.attention.source) == (name, "config") and backends(t.model) == {name}


@pytest.mark.parametrize("winner", ["manual", "sdpa"])
def test_auto_measures_once_records_the_choice_and_everything_after_reuses_it(
    text_file, tmp_path, monkeypatch, capsys, empty_cache, winner
):
    calls = []
    monkeypatch.setattr(choices, "measure", fake_measure(winner, calls))
    config = tiny_run_config(text_file, max_iters=4)
    train_run(config, GPTTask, tmp_path / "run", progress=False)
    assert calls == [["manual", "sdpa"]] * 2  # training's choice, then generation's (sample.txt)
    out = capsys.readouterr().out
    assert f"attention: {winner} 20k tokens/s over {'sdpa' if winner == 'manual' else 'manual'} 10k" in out
    state = runfolder.read_state(tmp_path / "run" / runfolder.STATE)
    assert state.attention.name == winner and state.attention.source == "measured"
    monkeypatch.setattr(choices, "measure", refuse)
    assert backends(load_run(tmp_path / "run").model) == {winner}  # sample, eval, views: the same backend
    assert main(["info", str(tmp_path / "run")]) == 0
    assert f"attention: {winner} 20k tokens/s" in capsys.readouterr().out
    config.train.max_iters = 6  # resumed: the recorded backend, nothing timed
    tokenizer = GPTTask.load_tokenizer(tmp_path / "run" / runfolder.TOKENIZER)
    result, trainer = train_run(config, GPTTask, tmp_path / "run", tokenizer, resume=True, progress=False)
    assert (
        result.step == 6
        and backends(trainer.model) == {winner}
        and "as this run recorded it" in capsys.readouterr().out
    )
    assert runfolder.read_state(tmp_path / "run" / runfolder.STATE).attention == state.attention
    # a new run of the same shapes: the cache answers
    capsys.readouterr()
    train_run(tiny_run_config(text_file, max_iters=2), GPTTask, tmp_path / "again", progress=False)
    assert f"attention: {winner} 20k tokens/s" in (out := capsys.readouterr().out) and "from the cache" in out
    assert runfolder.read_state(tmp_path / "again" / runfolder.STATE).attention.source == "cache"


def test_measuring_leaves_no_trace_in_training(text_file, tmp_path, empty_cache):
    """Dropout on: a run that measured its backend trains exactly like one that was given the same backend."""
    measured = make_trainer(text_file, tmp_path / "measured", dropout=0.1)  # seeds the global RNG, then measures
    assert measured.attention.source == "measured" and measured.attention.seconds > 0
    assert measured.fit().status == "finished"
    given = make_trainer(text_file, tmp_path / "given", dropout=0.1, backend=measured.attention.name)
    assert given.fit().status == "finished"
    a, b = weights(measured), weights(given)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("winner", ["manual", "sdpa"])
def test_generation_measures_its_own_backend_for_one_token_steps(tiny_gpt_config, monkeypatch, empty_cache, winner):
    from tinyformer.attention import multihead
    from tinyformer.generate.sampling import choose_decode_backend, generate
    from tinyformer.models.gpt import GPTConfig, MiniGPT

    calls, used = [], []
    monkeypatch.setattr(choices, "measure", fake_measure(winner, calls))
    model = MiniGPT(GPTConfig(**{**tiny_gpt_config.__dict__, "backend": "auto"})).eval()
    assert choose_decode_backend(model, 16).name == winner and len(calls) == 1
    assert backends(model) == {"auto"}  # measuring leaves the model as it was
    monkeypatch.setattr(choices, "measure", refuse)  # the same shapes again: from the cache
    attend = multihead.attend
    monkeypatch.setattr(multihead, "attend", lambda *a, **kw: used.append(kw["backend"]) or attend(*a, **kw))
    out = generate(model, torch.zeros(1, 1, dtype=torch.long), 5)
    assert out.shape == (1, 6) and set(used) == {winner} and len(used) == 5 * 2  # 5 steps x 2 layers
    assert backends(model) == {"auto"}  # between and after the steps, the caller's backends
    fixed = MiniGPT(GPTConfig(**{**tiny_gpt_config.__dict__, "backend": "sdpa"})).eval()
    assert choose_decode_backend(fixed, 16) is None and backends(fixed) == {"sdpa"}


class Spied(GPTTask):
    """Records, at each training_step, whether gradients are on and the model is in training mode."""

    seen: list[tuple[bool, bool]] = []

    def training_step(self, model, batch):
        Spied.seen.append((torch.is_grad_enabled(), model.training))
        return super().training_step(model, batch)


@pytest.mark.parametrize(("attn_dropout", "timed"), [(0.1, (False, False)), (0.0, (True, True))])
def test_with_attention_dropout_on_a_cpu_the_evaluation_forward_is_timed(
    text_file, tmp_path, empty_cache, attn_dropout, timed
):
    """Training takes the manual path with either backend there: timing it would pick by noise."""
    from tinyformer.train.trainer import Trainer

    cfg = tiny_run_config(text_file)
    cfg.model.attn_dropout = attn_dropout
    task = Spied.prepare(cfg)
    Spied.seen = []
    t = Trainer(task.build_model(), task, cfg.train, tmp_path / "run", progress=False)
    assert Spied.seen and set(Spied.seen) == {timed}
    assert ("evaluation forward" in t.attention.line()) == (attn_dropout > 0)
    assert t.model.training and all(p.grad is None for p in t.model.parameters())  # as it came in


def test_a_candidate_that_runs_out_of_memory_is_left_out_and_nothing_is_cached(empty_cache):
    from tinyformer import device as dev

    def oom() -> int:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 GiB")

    choice = dev.choose_backend({"k": 3}, {"sdpa": lambda: 100, "manual": oom})
    assert choice.name == "sdpa" and choice.tokens_per_s["manual"] == 0.0
    assert choices.lookup(choices.key_of({"k": 3}), ("sdpa", "manual")) is None and not choices._memo
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):  # any other error is a bug: it is raised
        dev.choose_backend({"k": 4}, {"sdpa": lambda: 100, "manual": lambda: torch.zeros(2) @ torch.zeros(3)})


@pytest.mark.parametrize("record", ["junk", {"name": "flash"}, {"name": "manual", "tokens_per_s": 3}, None])
def test_a_broken_attention_record_is_measured_again_on_resume_and_ignored_by_info(text_file, tmp_path, capsys, record):
    config = tiny_run_config(text_file, max_iters=2)
    train_run(config, GPTTask, tmp_path / "run", progress=False)
    state = runfolder.read_state(tmp_path / "run" / runfolder.STATE).to_dict()
    state["attention"] = record  # as written by hand, or by a version that recorded other fields
    torch.save(state, tmp_path / "run" / runfolder.STATE)
    capsys.readouterr()
    assert main(["info", str(tmp_path / "run")]) == 0
    assert "attention:" not in capsys.readouterr().out
    assert backends(load_run(tmp_path / "run").model) == {"auto"}  # nothing usable to apply
    config.train.max_iters = 3
    tokenizer = GPTTask.load_tokenizer(tmp_path / "run" / runfolder.TOKENIZER)
    result, trainer = train_run(config, GPTTask, tmp_path / "run", tokenizer, resume=True, progress=False)
    assert result.step == 3 and trainer.attention.name in ("sdpa", "manual") and not trainer.attention_reused
