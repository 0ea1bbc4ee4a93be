# The code of notebooks/{en,zh}/3-encoder-decoder.ipynb (see tools/lab/notebooks.py): each "# %% N." cell runs
# item N of the guide's part 3 through tinyformer's Python API, at the size TINYFORMER_SIZE names.
# %% setup
import torch
from IPython.display import display

from tinyformer import api
from tinyformer.attention import masks
from tinyformer.notebook import Guide

guide = Guide("3-encoder-decoder")
print(guide.describe())
CELLS = guide.runs / "experiments/reverse-ablation"  # one folder per cell of the study
PROBE = "7 3 0 9 5 1 8"


def cells(*names, facts=("final val exact_match | .1%", "best val loss")):
    """The guide's values of these cells of the study."""
    return [f"experiments/reverse-ablation/{name}: {fact}" for name in names for fact in facts]


def at_target(*names, facts=("epoch reaching 0.99", "its val loss")):
    """The study's values of these cells at their first epoch with exact match >= 0.99 (where a cell stops)."""
    return [f"experiments/reverse-ablation: {name} / {fact}" for name in names for fact in facts]


# %% 1. Step 1
# The chapter's recipe (its baseline cell, in bf16 autocast where this CPU multiplies bf16 natively).
baseline = api.train("reverse", set=guide.sets("experiments/reverse-ablation/baseline"), out=CELLS / "baseline")
print(api.info(baseline))
print(api.evaluate(baseline, n=1000))  # where its teacher-forced and free-running accuracies part (exposure bias)
display(api.loss_curve(baseline))
guide.compare(
    *cells(
        "baseline",
        facts=("parameters", "steps", "final val exact_match | .1%", "final val token_acc | .2%", "best val loss"),
    )
)

# %% 2. Step 2
# The three masks for a source of 3 digits padded to 5 and a target of 3 tokens (True: may attend).
src_valid = torch.tensor([[True, True, True, True, False]])  # 3 digits and EOS, then one PAD
print("encoder self-attention (source padding):\n", masks.from_key_valid(src_valid)[0, 0].int())
print("decoder self-attention (causal):\n", masks.causal(3).int())
print("cross-attention (source padding, every target row):\n", masks.from_key_valid(src_valid)[0, 0].int())

# %%
# The property the causality test holds: changing a later target token leaves every earlier position's logits.
model = baseline.model
src = baseline.task.source_ids("7 3 0 9 5")
tgt = torch.tensor([[1, 8, 12, 3, 6, 10]])  # BOS then the reversed digits as ids (digit d is d + 3)
changed = tgt.clone()
changed[0, 4] = 4  # another digit at position 4
with torch.no_grad():
    before, after = model(src, tgt).logits, model(src, changed).logits
print(
    "positions 0-3 change by",
    (before[:, :4] - after[:, :4]).abs().max().item(),
    "; 4-5 by",
    (before[:, 4:] - after[:, 4:]).abs().max().item(),
)

# %%
for maps in api.attention(baseline, "7 3 0"):  # encoder self-, decoder self- and cross-attention
    display(api.draw(maps, "heads", layer=0, out=guide.runs / "figures"))

# %% 3. Step 3
# The study trains every cell the exercises below read (about 40 minutes at laptop size), reusing the baseline.
study = api.experiment("reverse-ablation", out=CELLS, quick=guide.quick)
for cell in ("pre6-warmup1000", "pre6-warmup1"):
    display(api.loss_curve(study.run(cell)))
# The CPU preset reverse_fast: the same model and pairs, a short warmup and a cosine decay over 400 steps.
fast = api.train(
    "reverse", config="reverse_fast", set=guide.sets("lab/reverse-fast"), out=guide.runs / "lab/reverse-fast"
)
display(api.loss_curve(fast))
guide.compare(
    *cells(
        "pre6-warmup1000",
        "pre6-warmup1",
        "post6-warmup1000",
        "post6-warmup1",
        facts=("final val exact_match | .1%", "final val loss"),
    )
)

# %% 4. Step 4
print(api.predict(baseline, text="7 3 0 9 5"))  # greedy
print(api.predict(baseline, text="7 3 0 9 5", beam=4))  # beam search, 4 beams
print(api.evaluate(baseline, n=1000, beam=4))
decoding = api.experiment("seq2seq-decoding", out=guide.runs / "experiments/seq2seq-decoding", quick=guide.quick)
display(decoding.figure("time_vs_length.png"))
guide.compare(
    "experiments/seq2seq-decoding: figures.rows.1.ms.greedy cached | .1f",
    "experiments/seq2seq-decoding: figures.rows.1.ms.beam 4 cached | .1f",
)

# %% 5. Step 5
# Try it: any digits (3 to 12 of them) in place of PROBE.
cross = api.cross_attention(baseline, PROBE, out=guide.runs / "lab/reverse-cross")
print(cross.output, f"alignment {cross.score:.3f}", cross.matrix_text(), sep="\n")
display(cross.figure, cross.every_head)

# %% 6. Exercise 1
display(study.figure("exact_match.png"))
inits = ("baseline", "default-embedding-init", "no-embedding-scale", "default-init-no-scale", "default-init")
guide.compare(
    *at_target(*inits, "first-version"),
    *cells(*inits, "first-version", facts=("final val exact_match | .1%",)),
    "experiments/reverse-ablation: 10 / the chapter's first version",
    "experiments/reverse-ablation: 10 / first-version here",
)

# %% 7. Exercise 2
no_positions = study.run("no-positions")
display(api.loss_curve(no_positions))
print(api.predict(no_positions, text="7 3 0 9 5"))
guide.compare(*cells("baseline", "no-positions"), "experiments/reverse-ablation: no-positions / alignment")

# %% 8. Exercise 3
one_head = study.run("one-head")
display(api.loss_curve(one_head))
display(api.cross_attention(one_head, PROBE, out=guide.runs / "lab/one-head-cross").figure)
guide.compare(
    *at_target("baseline", "one-head", facts=("epoch reaching 0.99", "its val loss", "train s to it")),
    "experiments/reverse-ablation: one-head / alignment",
)

# %% 9. Exercise 4
for cell in ("post6-warmup1000", "post6-warmup1"):
    display(api.loss_curve(study.run(cell)))
guide.compare(
    *cells(
        "pre6-warmup1000",
        "pre6-warmup1",
        "post6-warmup1000",
        "post6-warmup1",
        facts=("parameters", "final val exact_match | .1%"),
    )
)

# %% 10. Exercise 5
sort = study.run("sort")
print(api.predict(sort, text="7 3 0 9 5"))
display(study.figure("sort-cross.png"))
guide.compare(*cells("baseline", "sort"), "experiments/reverse-ablation: sort / alignment")

# %% 11. Exercise 6
guide.compare(
    *cells("baseline", "relu-ffn", "swiglu", facts=("parameters",)), *at_target("baseline", "relu-ffn", "swiglu")
)

# %% 12. Exercise 7
torch_transformer = study.run("torch-transformer")
display(api.loss_curve(torch_transformer))
print(api.evaluate(torch_transformer, n=1000))
guide.compare(
    *cells("baseline", "torch-transformer", facts=("parameters",)),
    *at_target("baseline", "torch-transformer", facts=("epoch reaching 0.99", "its val loss", "train s to it")),
)

# %% 13. Exercise 8
print(api.evaluate(study.run("extrapolate"), n=1000))  # exact match per length: 13 and more were never seen
guide.compare(*(f"experiments/reverse-ablation: {n} / exact match" for n in (11, 12, 13, 14, 16, 20)))

# %% 14. Question 1
display(decoding.figure("time_vs_length.png"))
guide.compare("experiments/seq2seq-decoding: figures.summaries.2.encode_share.greedy | .1%")

# %% 15. Question 2
guide.compare(
    *(
        f"experiments/reverse-ablation: {cell} / {fact}"
        for cell in ("baseline", "default-embedding-init")
        for fact in ("token norm^2", "contrast share", "alignment")
    )
)

# %% 16. Question 3
# Pad the source with two PAD tokens: no output changes, and no decoder position gives them any weight.
src, tgt_in = baseline.task.view_inputs(baseline.model, PROBE)
padded = torch.nn.functional.pad(src, (0, 2))  # PAD is id 0
with torch.no_grad():
    plain, more = (baseline.model(s, tgt_in, need_weights=True) for s in (src, padded))
print("logits change by", (plain.logits - more.logits).abs().max().item())
print("cross-attention weight on the PAD columns:", more.cross_attentions[-1][..., -2:].max().item())

# %% 17. Question 4
display(cross.figure, study.figure("sort-cross.png"))
guide.compare("experiments/reverse-ablation: baseline / alignment", "experiments/reverse-ablation: sort / alignment")

# %% 18. Question 5
for text in ("7 3 0 9 5", "5 9 0 3 7"):  # the same digits, in two orders
    print(text, "->", api.predict(no_positions, text=text))
guide.compare(*cells("no-positions", facts=("final val exact_match | .1%", "final val token_acc | .1%")))

# %% 19. Question 6
guide.compare(
    *cells(
        "pre6-warmup1000",
        "pre6-warmup1",
        "post6-warmup1000",
        "post6-warmup1",
        facts=("final val loss", "final val exact_match | .1%"),
    )
)
