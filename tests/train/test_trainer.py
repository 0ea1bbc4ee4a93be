import json
import os
import signal

import pytest
import torch

from tests.conftest import tiny_run_config
from tinyformer import runfolder
from tinyformer.config import TrainConfig
from tinyformer.device import seed_everything
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.tasks import GPTTask
from tinyformer.train import checkpoint as ckpt
from tinyformer.train.trainer import Trainer


class FixedBatch:
    """A task that always trains on the same batch (and evaluates on it)."""

    select = "loss"

    def __init__(self, x, y):
        self.x, self.y = x, y

    def train_batch(self, batch_size, generator):
        return self.x, self.y

    def training_step(self, model, batch):
        return model(*batch).loss, {}

    def evaluate(self, model):
        return {"loss": model(self.x, self.y).loss.item()}

    def batch_tokens(self, batch):
        return batch[0].numel()

    def seek(self, batches):
        pass  # batches don't follow each other


@pytest.mark.slow
def test_trainer_overfits_one_batch(tmp_path):
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0))
    x = torch.randint(0, 20, (4, 16))
    y = torch.randint(0, 20, (4, 16))
    cfg = TrainConfig(max_iters=200, lr=3e-3, eval_interval=200, eval_iters=1, device="cpu")
    result = Trainer(model, FixedBatch(x, y), cfg, tmp_path, progress=False).fit()
    assert result.status == "finished"
    assert result.best_val < 0.1


def make_trainer(text_file, run_dir, resume=False, dropout=0.1, backend="auto", **train):
    cfg = tiny_run_config(text_file, dropout, backend, **train)
    seed_everything(cfg.train.seed)
    task = GPTTask.prepare(cfg)
    return Trainer(task.build_model(), task, cfg.train, run_dir, resume=resume, progress=False)


def weights(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_stopped_and_resumed_run_equals_uninterrupted_run(text_file, tmp_path):
    full = make_trainer(text_file, tmp_path / "full")
    assert full.fit().status == "finished"
    part = make_trainer(text_file, tmp_path / "part")
    assert part.fit(until=5).status == "stopped"  # between evaluations, mid log window
    resumed = make_trainer(text_file, tmp_path / "part", resume=True)
    assert resumed.step == 5
    assert resumed.fit().status == "finished"
    a, b = weights(full), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.best_val == full.best_val


class SignalAt(GPTTask):
    """Sends SIGINT to this process during one training step, like Ctrl-C would."""

    at, calls = 3, 0

    def training_step(self, model, batch):
        SignalAt.calls += 1
        if SignalAt.calls == self.at:
            os.kill(os.getpid(), signal.SIGINT)
        return super().training_step(model, batch)


def signalling_trainer(task_cls, text_file, run_dir):
    """A Trainer of the tiny run on `task_cls`, a GPTTask that sends itself a signal at some moment."""
    cfg = tiny_run_config(text_file)
    seed_everything(cfg.train.seed)
    task = task_cls.prepare(cfg)
    return Trainer(task.build_model(), task, cfg.train, run_dir, progress=False)


def test_sigint_saves_a_checkpoint_that_resumes_exactly(text_file, tmp_path):
    full = make_trainer(text_file, tmp_path / "full")
    full.fit()
    SignalAt.calls = 0
    t = signalling_trainer(SignalAt, text_file, tmp_path / "sig")
    # Ctrl-C as in a terminal: the suite may run from a background job, where SIGINT is ignored and stays so
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = t.fit()
        restored = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
    assert result.status == "interrupted" and result.step == 3  # the step in flight was finished
    assert runfolder.read_state(tmp_path / "sig" / runfolder.STATE).step == 3
    assert (tmp_path / "sig" / runfolder.LOSS_PNG).is_file()
    assert restored is signal.default_int_handler  # the caller's handler is restored
    resumed = make_trainer(text_file, tmp_path / "sig", resume=True)
    resumed.fit()
    a, b = weights(full), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


class SignalAtLastEvaluation(GPTTask):
    """Sends SIGINT during the run's last evaluation: after its last step looked for a stop."""

    def evaluate(self, model):
        SignalAtLastEvaluation.calls += 1
        if SignalAtLastEvaluation.calls == 4:  # steps 0, 4, 8, 12
            os.kill(os.getpid(), signal.SIGINT)
        return super().evaluate(model)


def test_a_signal_after_the_last_step_stops_the_caller_once_the_run_is_saved(text_file, tmp_path):
    """Caught by the loop's handler too late for the loop to act on it, the signal is not lost: the finished run
    is saved and plotted, then the caller's handler gets it (the command stops instead of sampling on)."""
    SignalAtLastEvaluation.calls = 0
    t = signalling_trainer(SignalAtLastEvaluation, text_file, tmp_path / "sig")
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            t.fit()
    finally:
        signal.signal(signal.SIGINT, before)
    assert SignalAtLastEvaluation.calls == 4
    assert runfolder.read_state(tmp_path / "sig" / runfolder.STATE).step == 12
    assert (tmp_path / "sig" / runfolder.LOSS_PNG).is_file()


def test_gradient_accumulation_matches_a_larger_batch(text_file, tmp_path):
    # no dropout: its masks differ between one batch of 8 and two of 4; fp32 and one backend, pinned:
    # "auto" may pick bf16 (on a CPU with native bf16) or, for batches of 4 and 8, two backends
    pin = dict(dropout=0.0, backend="sdpa", precision="fp32", max_iters=3)
    big = make_trainer(text_file, tmp_path / "big", batch_size=8, **pin)
    small = make_trainer(text_file, tmp_path / "acc", batch_size=4, grad_accum=2, **pin)
    for t in (big, small):
        t.fit()
    a, b = weights(big), weights(small)
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


class ScriptedVal(GPTTask):
    """Validation losses follow a script, to check which weights become best.safetensors."""

    script = [0.5, 3.0, 1.0, 2.0]  # step 0 first: lowest, yet untrained weights are never the best

    def evaluate(self, model):
        self.snapshots = getattr(self, "snapshots", []) + [{k: v.clone() for k, v in model.state_dict().items()}]
        return {"loss": self.script[len(self.snapshots) - 1]}


def test_best_checkpoint_is_kept_apart_from_the_latest(text_file, tmp_path):
    cfg = tiny_run_config(text_file)  # 12 steps, evaluations at 0, 4, 8, 12
    seed_everything(cfg.train.seed)
    task = ScriptedVal.prepare(cfg)
    t = Trainer(task.build_model(), task, cfg.train, tmp_path, progress=False)
    assert t.fit().best_val == 1.0
    best = task.build_model()
    ckpt.load_weights(best, tmp_path / runfolder.BEST)
    assert all(torch.equal(best.state_dict()[k], task.snapshots[2][k]) for k in task.snapshots[2])
    latest = task.build_model()
    ckpt.load_weights(latest, tmp_path / runfolder.WEIGHTS)
    assert all(torch.equal(latest.state_dict()[k], task.snapshots[3][k]) for k in task.snapshots[3])
    rows = [json.loads(line) for line in (tmp_path / runfolder.METRICS).read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows if r["split"] == "val"] == [(0, 0.5), (4, 3.0), (8, 1.0), (12, 2.0)]
    assert [r["step"] for r in rows if r["split"] == "train"] == [2, 4, 6, 8, 10, 12]


def test_tensorboard_events_hold_the_logged_metrics(text_file, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    t = make_trainer(text_file, tmp_path, tensorboard=True)
    t.fit()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tb = [(e.step, e.value) for e in acc.Scalars("val/loss")]
    rows = [json.loads(line) for line in (tmp_path / runfolder.METRICS).read_text().splitlines()]
    logged = [(r["step"], r["loss"]) for r in rows if r["split"] == "val"]
    assert [s for s, _ in tb] == [s for s, _ in logged] == [0, 4, 8, 12]
    assert all(abs(a[1] - b[1]) < 1e-6 for a, b in zip(tb, logged))
    assert "train/lr" in acc.Tags()["scalars"]


@pytest.mark.slow
def test_compiled_model_trains_like_the_eager_one(text_file, tmp_path):
    # no dropout: compiled kernels draw their random masks differently. One attention backend and fp32 for both:
    # `auto` measures each (compiled is part of the choice's key), and under load the two may choose differently
    same = dict(dropout=0.0, backend="manual", max_iters=3, eval_interval=3, precision="fp32")
    eager = make_trainer(text_file, tmp_path / "eager", **same)
    compiled = make_trainer(text_file, tmp_path / "compiled", **same, compile=True)
    assert compiled.forward is not compiled.model
    a, b = eager.fit(), compiled.fit()
    assert abs(a.best_val - b.best_val) < 1e-4
    wa, wb = weights(eager), weights(compiled)
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


def test_the_loss_plot_is_drawn_once_per_fit_not_at_every_save(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0))
    x, y = torch.randint(0, 20, (2, 8)), torch.randint(0, 20, (2, 8))
    cfg = TrainConfig(max_iters=4, eval_interval=1, eval_iters=1, log_interval=1, device="cpu", precision="fp32")
    drawn, saves = [], []
    monkeypatch.setattr(
        runfolder, "plot_run", lambda run_dir: drawn.append(runfolder.read_metrics(run_dir / runfolder.METRICS))
    )
    real_save = ckpt.save_checkpoint
    monkeypatch.setattr(ckpt, "save_checkpoint", lambda *a, **k: saves.append(real_save(*a, **k)))
    Trainer(model, FixedBatch(x, y), cfg, tmp_path, progress=False).fit()
    assert len(saves) == 5 and len(drawn) == 1  # step 0 and four evaluations saved; one plot, at the end
    assert [r["step"] for r in drawn[0] if r["split"] == "val"] == [0, 1, 2, 3, 4]  # of the whole log


# ---- train.stop_at: a run that ends once it has answered its question -------------------------------------
def test_stop_at_ends_the_run_at_the_first_evaluation_that_meets_it_and_a_resume_keeps_it_ended(text_file, tmp_path):
    from tinyformer.experiments.runner import finished

    met = make_trainer(text_file, tmp_path / "met", stop_at="loss<=100")  # met at the first evaluation after step 0
    result = met.fit()
    assert result.status == "finished" and result.step == 4  # eval_interval 4 of max_iters 12
    state = runfolder.read_state(tmp_path / "met" / runfolder.STATE)
    assert state.step == 4 and state.reached == "loss<=100 met at step 4"
    ckpt.save_json(tmp_path / "met" / runfolder.CONFIG, {"train": {"max_iters": 12}})  # what train_run saves
    assert finished(tmp_path / "met")  # the study runner reuses it, it does not resume it
    again = make_trainer(text_file, tmp_path / "met", resume=True, stop_at="loss<=100")
    assert again.fit().step == 4  # resumed with the same target: nothing more to do
    longer = make_trainer(text_file, tmp_path / "met", resume=True)  # the target dropped: it trains on
    assert longer.fit().step == 12
    never = make_trainer(text_file, tmp_path / "never", stop_at="loss<=0")
    assert never.fit().step == 12 and runfolder.read_state(tmp_path / "never" / runfolder.STATE).reached == ""
    ckpt.save_json(tmp_path / "never" / runfolder.CONFIG, {"train": {"max_iters": 20}})
    assert not finished(tmp_path / "never")  # step 12 of 20, target not met: a resume would go on


@pytest.mark.parametrize("text", ["exact_match>0.99", "loss<=x", "loss", ">=1", "loss<=nan"])
def test_a_malformed_stop_at_is_one_line(text):
    from tinyformer.errors import UserError

    with pytest.raises(UserError, match=r"train.stop_at=.*METRIC>=VALUE"):
        TrainConfig(stop_at=text)


def test_a_stop_at_metric_the_task_does_not_report_names_those_it_does(text_file, tmp_path):
    from tinyformer.errors import UserError

    with pytest.raises(UserError, match=r"exact_match>=0.5.*reports .*loss"):
        make_trainer(text_file, tmp_path / "x", stop_at="exact_match>=0.5").fit()


# ---- the task contract: what the loop calls, every task has ------------------------------------------------
def test_the_trainer_s_view_of_a_task_is_declared_by_the_task_contract():
    """Each part the loop uses (`trainer.Task`) is defined on `tasks.base.Task`, `seek` with a default."""
    from tinyformer.tasks.base import Task
    from tinyformer.train import trainer

    used = {n for n in vars(trainer.Task) if not n.startswith("_")} | set(trainer.Task.__annotations__)
    assert "seek" in used and used <= set(dir(Task))
    assert Task.seek is not None and Task.seek(object(), 8) is None  # "batches don't follow each other"


def test_nothing_in_train_probes_a_task_for_what_it_has():
    """hasattr/getattr on a task would be a part the contract does not declare."""
    import ast
    from pathlib import Path

    import tinyformer.train

    probes = []
    for path in sorted(Path(tinyformer.train.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("hasattr", "getattr")
            ):
                if node.args and "task" in ast.unparse(node.args[0]):
                    probes.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert probes == []


def test_a_resumed_run_tells_its_task_how_many_micro_batches_were_drawn(text_file, tmp_path, monkeypatch):
    told = []
    monkeypatch.setattr(GPTTask, "seek", lambda self, batches: told.append(batches))
    make_trainer(text_file, tmp_path / "run", grad_accum=2, backend="sdpa").fit(until=3)
    make_trainer(text_file, tmp_path / "run", resume=True, grad_accum=2, backend="sdpa").fit(until=5)
    assert told == [0, 6]  # 3 steps of 2 micro-batches drawn before the resumed fit
