import pytest

from tinyformer import config as cfg
from tinyformer.errors import UserError
from tinyformer.tasks import GPTTask


def resolve(layers=(), overrides=()):
    return cfg.resolve(GPTTask.default_config(), list(layers), list(overrides))


def test_defaults_are_the_seed_recipe():
    c = resolve()
    assert (c.model.block_size, c.model.n_layer, c.model.n_head, c.model.n_embd) == (128, 4, 4, 128)
    assert (c.train.batch_size, c.train.lr, c.train.max_iters, c.train.schedule) == (32, 3e-4, 3000, "constant")


def test_toml_then_overrides_with_types(tmp_path):
    p = tmp_path / "p.toml"
    p.write_text('task = "gpt"\n[model]\nn_layer = 2\n[train]\nlr = 1e-3\nmax_iters = 10\n')
    c = resolve([cfg.load_toml(p)], ["model.n_layer=1", "train.lr=2", "train.schedule=cosine", "sample.prompt=ROMEO:"])
    assert c.model.n_layer == 1
    assert c.train.lr == 2.0 and isinstance(c.train.lr, float)  # int accepted for float
    assert c.train.max_iters == 10 and c.train.schedule == "cosine" and c.sample.prompt == "ROMEO:"


def test_unknown_key_names_it_and_lists_the_known_ones():
    with pytest.raises(UserError, match=r"unknown config key 'model.n_layr'.*n_layer"):
        resolve(overrides=["model.n_layr=2"])
    with pytest.raises(UserError, match="unknown config key 'trian'"):
        resolve(overrides=["trian.lr=1"])


def test_wrong_type_names_key_and_value():
    with pytest.raises(UserError, match="train.max_iters expects int, got 'abc'"):
        resolve(overrides=["train.max_iters=abc"])
    with pytest.raises(UserError, match="train.max_iters expects int, got 1.5"):
        resolve(overrides=["train.max_iters=1.5"])
    with pytest.raises(UserError, match="model.qkv_bias expects bool"):
        resolve(overrides=["model.qkv_bias=1"])


def test_validation_runs_on_overridden_values():
    with pytest.raises(UserError, match="model.n_embd=130 is not divisible by model.n_head=4"):
        resolve(overrides=["model.n_embd=130"])
    with pytest.raises(UserError, match="train.schedule='linear'"):
        resolve(overrides=["train.schedule=linear"])


def test_malformed_override_and_missing_preset(tmp_path):
    with pytest.raises(UserError, match="not of the form"):
        resolve(overrides=["model.n_layer"])
    with pytest.raises(UserError, match="does not exist"):
        cfg.load_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\n")
    with pytest.raises(UserError, match="not valid TOML"):
        cfg.load_toml(bad)


def test_round_trip_through_dict():
    c = resolve(overrides=["model.n_layer=3"])
    assert resolve([cfg.to_dict(c)]) == c


def test_every_preset_resolves_and_the_gpu_preset_is_the_10m_model():
    from pathlib import Path

    from tinyformer.models.gpt import param_count
    from tinyformer.tasks import TASKS

    presets = sorted(Path(__file__).parent.parent.glob("configs/*.toml"))
    assert len(presets) >= 4
    for p in presets:
        layer = cfg.load_toml(p)
        config = cfg.resolve(TASKS[layer["task"]].default_config(), [layer], [])
        if p.name == "gpt_shakespeare_gpu.toml":
            config.model.vocab_size = 65
            assert round(param_count(config.model) / 1e6, 1) == 10.8  # ~10.7M without the position table
            assert (config.model.block_size, config.train.batch_size, config.train.max_iters) == (256, 64, 5000)


def test_renamed_keys_fail_with_a_hint_naming_the_new_key():
    from tinyformer.tasks import ClassifyTask, ReverseTask

    def resolve_for(task, override):
        return cfg.resolve(task.default_config(), [], [override])

    with pytest.raises(UserError, match="'model.d_model' is now 'model.n_embd'"):
        resolve_for(ReverseTask, "model.d_model=64")
    with pytest.raises(UserError, match="'model.max_len' is now 'model.block_size'"):
        resolve_for(ReverseTask, "model.max_len=32")
    with pytest.raises(UserError, match="'model.max_position' is now 'model.block_size'"):
        resolve_for(ClassifyTask, "model.max_position=64")
    with pytest.raises(UserError, match="'data.max_len' is now 'data.seq_len'"):
        resolve_for(ClassifyTask, "data.max_len=64")
    assert resolve_for(ReverseTask, "data.max_len=9").data.max_len == 9  # reverse's digits keep their name
    with pytest.raises(UserError, match="'train.eval_every' is now 'train.eval_interval'"):
        resolve_for(ReverseTask, "train.eval_every=100")
    with pytest.raises(UserError, match="no config key 'train.epochs'; training is counted in optimizer steps"):
        resolve_for(ClassifyTask, "train.epochs=3")


def test_migrate_reads_a_config_written_before_the_rename():
    from tinyformer.tasks import ClassifyTask, ReverseTask

    old = {"task": "reverse", "model": {"d_model": 64, "max_len": 32}, "data": {"max_len": 9}}
    c = cfg.resolve(ReverseTask.default_config(), [cfg.migrate(old, ReverseTask.default_config())], [])
    assert (c.model.n_embd, c.model.block_size, c.data.max_len) == (64, 32, 9)
    old = {"task": "classify", "model": {"max_position": 64}, "data": {"max_len": 48}}
    c = cfg.resolve(ClassifyTask.default_config(), [cfg.migrate(old, ClassifyTask.default_config())], [])
    assert (c.model.block_size, c.data.seq_len) == (64, 48)


def test_a_run_folder_written_before_a_key_was_added_keeps_what_it_trained_with():
    """The default recipes are the course's now; a folder saved before `model.init` (and the other keys that
    hold the course's choices) existed was trained with tinyformer's old behaviour, and reads back as such."""
    from tinyformer.tasks import ReverseTask

    old = {"task": "gpt", "model": {"n_layer": 2, "dropout": 0.1}, "train": {"weight_decay": 0.1}}
    c = cfg.resolve(GPTTask.default_config(), [cfg.migrate(old, GPTTask.default_config())], [])
    assert (c.model.init, c.model.embedding_dropout, c.train.decay_all) == ("gpt2", True, False)
    fresh = cfg.to_dict(GPTTask.default_config())  # a folder written today has every key: nothing is added
    assert cfg.migrate(fresh, GPTTask.default_config()) == fresh
    assert (GPTTask.default_config().model.init, GPTTask.default_config().train.decay_all) == ("default", True)
    old = {"task": "reverse", "model": {"n_embd": 64}, "data": {"n_train": 100}}
    c = cfg.resolve(ReverseTask.default_config(), [cfg.migrate(old, ReverseTask.default_config())], [])
    assert (c.model.share_embeddings, c.data.sampling) == (True, "random")


def test_a_preset_of_another_task_is_named_as_such():
    from pathlib import Path

    preset = cfg.load_toml(Path(__file__).resolve().parents[1] / "configs" / "reverse_fast.toml")
    with pytest.raises(UserError, match="the config is a 'reverse' preset; use it with `tinyformer train reverse`"):
        cfg.resolve(GPTTask.default_config(), [preset], [])


@pytest.mark.parametrize("task", ["gpt", "mlm", "classify", "tag"])
def test_a_negative_vocabulary_is_refused_by_every_model_config_in_one_line(task):
    from tinyformer.tasks import get_task

    with pytest.raises(UserError, match=r"^model.vocab_size=-1 must be >= 0$"):
        cfg.resolve(get_task(task).default_config(), [], ["model.vocab_size=-1"])


@pytest.mark.parametrize("task,key", [("gpt", "model.n_layer"), ("reverse", "model.n_encoder_layers")])
def test_a_model_past_the_layer_limit_is_refused_before_a_layer_is_built(task, key, tmp_path, text_file):
    import subprocess
    import sys

    # counted layer by layer (on the meta device), 10**8 layers took hours: a hang, so a subprocess
    out = tmp_path / "run"
    data = ["--data", str(text_file)] if task == "gpt" else []
    argv = [sys.executable, "-m", "tinyformer", "train", task, *data, "--out", str(out), "--set", f"{key}={10**8}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{key}=100,000,000" in done.stderr and "more than the 1,024 layers" in done.stderr, done.stderr
    assert not out.exists()
