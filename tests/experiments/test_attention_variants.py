"""`experiment attention-variants` end to end at the --quick size, and its crossover rule on made-up rows."""

import json

import pytest

from tests.conftest import needs_play
from tinyformer.experiments import attention_variants as av
from tinyformer.models.gpt import GPTConfig, param_count


def test_matched_feed_forward_makes_the_parameter_counts_equal_within_a_hidden_unit():
    base = param_count(GPTConfig(vocab_size=65))
    for k in (1, 2):
        ratio = av.matched_mlp_ratio(128, 4, k)
        grouped = param_count(GPTConfig(vocab_size=65, n_kv_head=k, mlp_ratio=ratio))
        assert abs(grouped - base) <= 4 * (2 * 128 + 1)  # at most one hidden unit per layer apart
        assert param_count(GPTConfig(vocab_size=65, n_kv_head=k)) < base - 60_000  # it did have to be matched


def test_crossover_is_the_length_from_which_linear_always_wins():
    def rows(ms):
        return [(L, {"ms": v} if v is not None else {"error": "skipped"}) for L, v in zip((1, 2, 3, 4), ms)]

    table = {"sdpa": rows([1, 2, 3, 4]), "linear": rows([2, 1.5, 3.5, 3])}
    assert av.crossover(table, "sdpa") == 4  # it won at 2, lost at 3: only from 4 on does it keep winning
    table["sdpa"] = rows([1, 2, None, None])  # where softmax could not run, linear wins
    assert av.crossover(table, "sdpa") == 2
    table["linear"] = rows([2, 3, 4, 5])
    table["sdpa"] = rows([1, 2, 3, 4])
    assert av.crossover(table, "sdpa") is None


@pytest.mark.slow
@needs_play
def test_quick_study_writes_every_table_and_figure(quick_study):
    import matplotlib.image

    study = quick_study("attention-variants")
    tmp_path, report = study.folder, study.report
    text, figures = report.read_text(), json.loads((tmp_path / "figures.json").read_text())
    quality = figures["quality"]
    assert list(quality) == ["softmax", "linear", "gqa-2", "mqa"]
    assert max(q["params"] for q in quality.values()) - min(q["params"] for q in quality.values()) < 200
    for what in ("train", "generate"):
        for kind in ("sdpa", "manual", "linear"):
            measured = figures["speed"][what][kind]
            assert [L for L, _ in measured] == list(av.QUICK_LENGTHS) and all(r["ms"] > 0 for _, r in measured)
        assert figures["crossover"][what] == {k: av.crossover(figures["speed"][what], k) for k in ("sdpa", "manual")}
        img = matplotlib.image.imread(tmp_path / f"{what}_vs_length.png")
        assert img.shape[0] > 200 and float(img[..., :3].std()) > 0.05
    kv = figures["cache_bytes"]
    mha = kv["MHA"]["bytes_per_token"]
    assert mha == 2 * kv["GQA-2"]["bytes_per_token"] == 4 * kv["MQA"]["bytes_per_token"] == 4 * 2 * 32 * 4
    assert kv["linear"]["bytes_total"] == 4 * 4 * (8 * 8 + 8) * 4  # layers x heads x (Dh^2 + Dh) x fp32
    assert all(f"| {name} |" in text for name in quality) and "```" in text
