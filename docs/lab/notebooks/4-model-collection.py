# The code of notebooks/{en,zh}/4-model-collection.ipynb (see tools/lab/notebooks.py): each "# %% N." cell runs
# item N of the guide's part 4 through tinyformer's Python API, at the size TINYFORMER_SIZE names.
# %% setup
import inspect

from IPython.display import display

from tinyformer import api
from tinyformer.models import rnn_cells
from tinyformer.notebook import Guide

guide = Guide("4-model-collection")
print(guide.describe())
MLM = guide.runs / "experiments/classifiers/mlm"  # the masked LM that steps 1 to 5 start from


def rows(source, names, facts):
    """The guide's values of these rows of a study's report."""
    return [f"{source}: {name} / {fact}" for name in names for fact in facts]


# %% 1. BPE, written out
# No model: the trainers of tinyformer.data.merges on the play, as the runs call them (seconds).
merges = api.experiment("merges", out=guide.runs / "experiments/merges", quick=guide.quick)
display(merges.figure("tokens_per_char.png"))
guide.compare(*(f"experiments/merges: table 2: {rank} / token" for rank in range(1, 6)))
guide.compare(*(f"experiments/merges: table 3: {n} / tokens per character" for n in (100, 1000, 3840)))

# %%
# The trainer by hand on one line: each merge with the count its pair had when it was chosen (ties: the pair that
# sorts first). Try your own text, or M.train_wordpiece on lower-cased words.
from tinyformer.data import merges as M
from tinyformer.data.bpe import byte_words

words = M.word_counts(["To be, or not to be, that is the question"], byte_words)
vocab, learned = M.train_bpe(words, 256 + 8, on_merge=lambda pair, count: print(pair, count))

# %% 2. Step 1
# The masked LM first (the classifiers share its tokenizer, and step 3 starts from it), then every encoder.
mlm = api.train("mlm", set=guide.sets("experiments/classifiers/mlm"), out=MLM)
classifiers = api.experiment("classifiers", out=guide.runs / "experiments/classifiers", quick=guide.quick)
display(classifiers.figure("accuracy_vs_params.png"))
guide.compare(
    *rows(
        "experiments/classifiers",
        ("majority class", "textcnn", "rnn", "lstm", "gru", "bilstm", "bigru"),
        ("test accuracy",),
    )
)

# %% 3. Step 2
print(api.evaluate(mlm))
print(api.predict(mlm, text="To be or not to [MASK]"))  # try your own line, with one [MASK]
display(api.loss_curve(mlm))

# %% 4. Step 3
guide.compare(
    *rows(
        "experiments/classifiers", ("transformer-scratch", "transformer-pretrained"), ("test accuracy", "test macro-F1")
    )
)
best = classifiers.run("transformer-pretrained", weights="best")  # its first seed
print(api.predict(best, text="O Romeo, Romeo! wherefore art thou Romeo?"))  # who speaks this line?

# %% 5. Step 4
tagging = api.experiment("tagging", out=guide.runs / "experiments/tagging", quick=guide.quick, mlm=MLM)
display(tagging.figure("f1_per_epoch.png"))
guide.compare(
    *rows(
        "experiments/tagging",
        ("random init", "our masked-LM init", "MiniLM init"),
        ("entity F1, seen names", "entity F1, unseen names"),
    )
)

# %% 6. Step 5
qa = api.experiment("qa", out=guide.runs / "experiments/qa", quick=guide.quick, mlm=MLM)
display(qa.figure("f1_per_epoch.png"), qa.figure("span.png"))
guide.compare(*rows("experiments/qa", ("random init", "our masked-LM init", "MiniLM init"), ("exact match", "F1")))

# %% 7. Step 6
minilm = api.experiment("classifiers-minilm", out=guide.runs / "experiments/classifiers", quick=guide.quick)
guide.compare(
    *rows(
        "experiments/classifiers-minilm", ("minilm-pretrained*", "minilm-scratch*"), ("test accuracy", "test macro-F1")
    )
)

# %% 8. Step 7
print(inspect.getsource(rnn_cells.gru_step))  # the GRU cell, one time step, written out
figures = api.bench(
    "rnn",
    iters=1 if guide.quick else 3,
    repeats=1 if guide.quick else 3,
    json_path=guide.runs / "lab/bench-rnn/bench.json",
)
guide.compare(*(f"lab/bench-rnn: bench.rnn.rows.{i}.ratio | .2f" for i in range(3)))

# %% 9. Step 8
practice = api.experiment("practice", out=guide.runs / "experiments/practice", quick=guide.quick)
display(practice.figure("train_loss.png"))
guide.compare(*rows("experiments/practice", ("baseline", "no-clip"), ("best val loss",)))

# %% 10. Step 9
display(practice.figure("val_loss.png"))
guide.compare(*rows("experiments/practice", ("baseline", "no-warmup"), ("best val loss",)))

# %% 11. Step 10
guide.compare(*rows("experiments/practice", ("baseline", "accum-4"), ("best val loss", "saved activations MiB")))

# %% 12. Step 11
guide.compare(
    *rows(
        "experiments/practice", ("baseline", "grad-checkpoint"), ("best val loss", "saved activations MiB", "train s")
    )
)

# %% 13. Step 12
guide.compare(
    *rows("experiments/practice", ("baseline", "bf16"), ("best val loss", "saved activations MiB", "train s"))
)
