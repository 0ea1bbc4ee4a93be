# The code of notebooks/{en,zh}/1-char-gpt.ipynb (see tools/lab/notebooks.py): each "# %% N." cell runs item N
# of the guide's part 1 through tinyformer's Python API, at the size TINYFORMER_SIZE names.
# %% setup
import time

from IPython.display import display

from tinyformer import api
from tinyformer.notebook import Guide

guide = Guide("1-char-gpt")  # the size, the runs folder, the guide's values
print(guide.describe())

# %% 1. Step 1
# The course's seed recipe, `tinyformer train gpt` with no flags (a few steps of a narrow model at ci size).
gpt = api.train("gpt", set=guide.sets("lab/gpt"), out=guide.runs / "lab/gpt")
print(api.summary(gpt))
guide.compare(
    "lab/gpt: config.model.n_layer", "lab/gpt: config.model.n_embd", "lab/gpt: config.train.lr", "lab/gpt: steps"
)

# %% 2. Step 2
display(api.loss_curve(gpt))  # loss.png, drawn from the run's metrics.jsonl
guide.compare(
    "lab/gpt: first val loss", "lab/gpt: best val loss", "lab/gpt: final val loss", "lab/gpt: train seconds | ,.0f"
)

# %% 3. Step 3
# The course's sample: sample.txt, written by the run when it ended (the run's sample.* settings), then the
# `sample` command's, with a prompt and other settings.
print((gpt.path / "sample.txt").read_text(encoding="utf-8"))
guide.compare("lab/gpt: config.sample.tokens", "lab/gpt: config.sample.temperature")
print(api.sample(gpt, prompt="ROMEO:", tokens=300, temperature=0.8, top_k=40, seed=1))

# %% 4. Step 4
print(api.info(gpt))
counted = sum(p.numel() for p in gpt.model.parameters())
V, T, D, L = (getattr(gpt.config.model, k) for k in ("vocab_size", "block_size", "n_embd", "n_layer"))
formula = 2 * V * D + T * D + L * (12 * D * D + 10 * D) + 2 * D
print(f"sum(p.numel()) = {counted:,}; 2VD + TD + L(12D^2 + 10D) + 2D = {formula:,}")
guide.compare("lab/gpt: parameters")

# %% 5. Exercise 1
# The ablation study: baseline, one layer, one head, no causal mask (the CPU preset gpt_cpu_quick as the base).
ablation = api.experiment("ablation", out=guide.runs / "experiments/ablation", quick=guide.quick)
display(ablation.figure("val_loss.png"))
guide.compare(
    "experiments/ablation: baseline / best val loss",
    "experiments/ablation: 1-layer / best val loss",
    "experiments/ablation: 1-layer / parameters | ,.0f",
    "experiments/ablation: 1-layer / train s | ,.0f",
)

# %%
# How generation quality changes: each cell's sample, written beside the report (the baseline scores them).
for cell in ("baseline", "1-layer"):
    print(f"{cell}:", (ablation.folder / f"sample-{cell}.txt").read_text(encoding="utf-8"), sep="\n")
guide.compare(*(f"experiments/ablation: {c} / its sample's loss under baseline" for c in ("baseline", "1-layer")))

# %% 6. Exercise 2
guide.compare("experiments/ablation: 1-head / best val loss", "experiments/ablation: 1-head / parameters | ,.0f")

# %%
# Try it: another number of heads (it must divide the width), then run this cell again: 500 steps of the CPU preset.
n_head = 2
heads = api.train(
    "gpt",
    config="gpt_cpu_quick",
    set=[f"model.n_head={n_head}", "train.max_iters=500", *guide.sets("lab/demo")],
    out=guide.runs / f"mine/heads-{n_head}",
)
print(api.summary(heads))

# %% 7. Exercise 3
guide.compare(
    "experiments/ablation: no-mask / best val loss",
    "experiments/ablation: no-mask / its sample's loss under baseline",
    "experiments/ablation: baseline / its sample's loss under baseline",
)

# %%
# What the model without the mask writes on its own (the sample the baseline scored, then one after "ROMEO:"),
# and where its first layer looks: at the future too.
print((ablation.folder / "sample-no-mask.txt").read_text(encoding="utf-8"))
no_mask = ablation.run("no-mask")
print(api.sample(no_mask, prompt="ROMEO:", tokens=300, seed=1))
for run in (ablation.run("baseline"), no_mask):
    (maps,) = api.attention(run, "ROMEO: what light")
    display(api.draw(maps, "head", layer=0, head=0, out=guide.runs / "figures"))

# %%
# Try it: the same text through your own mask (500 steps of the CPU preset). `causal=False` removes it; run the
# cell again to see the heatmap fill its upper half.
causal = True
mine = api.train(
    "gpt",
    config="gpt_cpu_quick",
    set=[f"model.causal={str(causal).lower()}", "train.max_iters=500", *guide.sets("lab/demo")],
    out=guide.runs / f"mine/causal-{causal}",
)
(maps,) = api.attention(mine, "ROMEO: what light")
display(api.draw(maps, "head", layer=0, head=0, out=guide.runs / "figures"))

# %% 8. Exercise 4
scale = api.experiment("scale", out=guide.runs / "experiments/scale", quick=guide.quick)
display(scale.figure("loss_vs_step.png"), scale.figure("loss_vs_time.png"))
guide.compare(
    *(
        f"experiments/scale: {cell} / {what}"
        for cell in ("base", "deep-8", "wide-256")
        for what in ("params (counted) | ,.0f", "best val loss", "train s | ,.0f")
    )
)

# %%
for cell in ("base", "deep-8", "wide-256"):
    print(f"{cell}:", (scale.folder / f"sample-{cell}.txt").read_text(encoding="utf-8"), sep="\n")

# %% 9. Thinking question
guide.compare(
    "experiments/scale: base / tokens seen",
    *(f"experiments/scale: {c} / tokens/param" for c in ("base", "deep-8", "wide-256")),
)

# %% 10. Exercise 5
positions = api.experiment("positions", out=guide.runs / "experiments/positions", quick=guide.quick)
display(positions.figure("loss_vs_context.png"))
guide.compare(
    *(
        f"experiments/positions: {p} / val loss @ {n}"
        for p in ("sinusoidal", "rope", "rope + NTK")
        for n in (128, 256, 512)
    )
)

# %%
# Try it: the rotary model sampled with a context four times the one it trained at, NTK scaling on (or off).
rope = positions.run("rope")
print(api.sample(rope, prompt="ROMEO:", tokens=300, context=4 * rope.config.model.block_size, ntk=True))

# %% 11. Step 5
window = gpt.config.model.block_size
print(f"the seed model keeps {gpt.model.cache_bytes(1, window) // window:,} bytes of cache per token")
variants = api.experiment("attention-variants", out=guide.runs / "experiments/attention-variants", quick=guide.quick)
guide.compare("experiments/attention-variants: MHA / bytes per token")

# %% 12. Step 6
kv = api.experiment("kv-cache", out=guide.runs / "experiments/kv-cache", quick=guide.quick)
display(kv.figure("ms_per_token.png"))
guide.compare(
    *(
        f"experiments/kv-cache: table 1: {n} / {what}"
        for n in (8, 128)
        for what in ("no cache ms/token", "cache ms/token", "cache speedup")
    )
)

# %%
for cache in (True, False):  # the same 300 tokens, with the cache and without
    start = time.perf_counter()
    api.sample(gpt, prompt="ROMEO:", tokens=300, no_cache=not cache)
    print(f"cache {cache}: {(time.perf_counter() - start) / 300 * 1000:.2f} ms per token")

# %% 13. Thinking question
decoding = api.experiment("seq2seq-decoding", out=guide.runs / "experiments/seq2seq-decoding", quick=guide.quick)
display(decoding.figure("time_vs_length.png"))
guide.compare("experiments/seq2seq-decoding: 200 / encode ms", "experiments/seq2seq-decoding: 200 / greedy cached ms")

# %%
# A decoder's heads see only the past (lower triangles); an encoder's see the whole sentence.
(gpt_maps,) = api.attention(gpt, "ROMEO: what light")
display(api.draw(gpt_maps, "heads", layer=gpt.config.model.n_layer - 1, out=guide.runs / "figures"))
display(api.draw(api.bert_attention("The man saw the bird with the telescope"), "heads", out=guide.runs / "figures"))

# %% 14. What does `--time` reach
# `tinyformer train gpt --time 1m` from Python: a budget (train.time_budget, in seconds) and no config, so the
# table's row for it (train.time_row says which). Ten seconds at ci size, a minute at laptop size; at full size
# also the study's 1-minute budget (about 7 minutes), with a nanoGPT checkout beside it when NANOGPT names one.
budget = 10 if guide.quick else 60
timed = api.train("gpt", set=[f"train.time_budget={budget}"], out=guide.runs / f"mine/time-{budget}s")
val = [r["loss"] for r in api.metrics(timed) if r["split"] == "val"]
spent = timed.state.train_seconds + (timed.state.budget.eval_seconds if timed.state.budget else 0.0)
print(f"row {timed.config.train.time_row}: best val {min(val):.4f} in {spent:.0f} s of a {budget} s budget")
print("the guide's --time 1m (3 seeds):", guide.quoted("experiments/budgets/1min: 1 / best val (median, range)"))
if guide.full:
    import os

    study = api.experiment(
        "budgets", out=guide.runs / "experiments/budgets/1min", nanogpt=os.environ.get("NANOGPT"), minutes="1"
    )
    display(study.figure("val_vs_time.png"))
    display(guide.compare("experiments/budgets/1min: 1 / best val (median, range)"))

# %% 15. Going further 1
figures = api.bench(
    "attention",
    repeats=1 if guide.quick else 3,
    lengths=(64, 128) if guide.quick else None,
    json_path=guide.runs / "lab/bench-attention/bench.json",
)
guide.compare(
    "lab/bench-attention: bench.attention.4.manual_ms | .1f", "lab/bench-attention: bench.attention.4.sdpa_ms | .1f"
)

# %% 16. Going further 2
display(variants.figure("val_loss.png"), variants.figure("train_vs_length.png"))
guide.compare(*(f"experiments/attention-variants: {v} / best val loss" for v in ("softmax", "linear", "gqa-2", "mqa")))

# %% 17. Going further 3
# The fastest combination the study found, alone, timed as the study times it (val loss every 100 steps on 50
# batches, stopping at 1.88); at full size also the whole study (about an hour), with a nanoGPT checkout beside it
# when NANOGPT names one.
timed = ["train.eval_interval=100", "train.eval_iters=50", "train.stop_at=loss<=1.88"]
speedrun = api.train(
    "gpt", config="gpt_speedrun", set=[*timed, *guide.sets("lab/demo")], out=guide.runs / "mine/gpt_speedrun"
)
reached = [r for r in api.metrics(speedrun) if r["split"] == "val" and r["loss"] <= 1.88]
print(f"val 1.88 at step {reached[0]['step']}, {reached[0]['train_seconds']:.1f} s" if reached else "1.88 not reached")
print("the preset's median time to 1.88:", guide.quoted("experiments/speedrun: gpt_speedrun / median s"), "s")
if guide.full:
    import os

    study = api.experiment("speedrun", out=guide.runs / "experiments/speedrun", nanogpt=os.environ.get("NANOGPT"))
    display(study.figure("val_vs_time.png"))
    display(guide.compare("experiments/speedrun: gpt_speedrun / median s", "experiments/speedrun: nanoGPT / median s"))
