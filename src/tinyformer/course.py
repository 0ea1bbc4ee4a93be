"""The course's recipes, written once: every fact of the two documents' training code that a config key holds.

`../shared/course/000_*.txt` is the MiniGPT lab (step 2 the model, step 3 the loop, step 4 the sample);
`001_*.txt` is chapter 20, the encoder-decoder that reverses digits (20.2-20.7 the model, 20.9 the data,
20.10 the loop, 20.11 greedy decoding). Each entry below is one fact, with where the document states it.

`tinyformer train gpt` and `tinyformer train reverse` with no `--config` are these recipes (the tasks' default
configs are the dataclass defaults with these facts laid over them); a preset is a recipe plus its own
differences, and `tinyformer lab recipes` prints, per preset, every key where it differs from the course.
What a config cannot say is the same math computed another way (SDPA or written-out attention, fused AdamW,
batches cut to their longest pair): no key holds it, and no key differs for it.
"""

from __future__ import annotations

from typing import Any

LAB: dict[str, Any] = {  # the MiniGPT lab, option A
    "model.block_size": 128,  # BLOCK_SIZE = 128
    "model.n_layer": 4,  # N_LAYER = 4
    "model.n_head": 4,  # N_HEAD = 4
    "model.n_embd": 128,  # N_EMBD = 128
    "model.mlp_ratio": 4,  # nn.Linear(n_embd, 4 * n_embd)
    "model.ffn": "gelu",  # nn.GELU() (exact)
    "model.dropout": 0.1,  # DROPOUT = 0.1: after the attention's proj and at the end of the feed-forward
    "model.embedding_dropout": False,  # x = tok_emb(idx) + pos_emb(pos): no dropout on the embeddings
    "model.attn_dropout": 0.0,  # none on the softmax weights
    "model.qkv_bias": False,  # nn.Linear(n_embd, 3 * n_embd, bias=False)
    "model.positions": "learned",  # pos_emb = nn.Embedding(BLOCK_SIZE, N_EMBD)
    "model.tie_weights": False,  # head = nn.Linear(N_EMBD, vocab_size, bias=False), its own matrix
    "model.init": "default",  # no init code: PyTorch's own defaults
    "model.causal": True,  # the tril mask
    "data.tokenizer": "char",  # chars = sorted(set(text))
    "data.val_fraction": 0.1,  # n_train = int(0.9 * len(data))
    "data.seq_len": 0,  # windows of BLOCK_SIZE
    "train.batch_size": 32,  # BATCH_SIZE = 32
    "train.max_iters": 3000,  # MAX_ITERS = 3000
    "train.lr": 3e-4,  # LR = 3e-4
    "train.schedule": "constant",  # no scheduler
    "train.warmup_iters": 0,
    "train.weight_decay": 0.01,  # torch.optim.AdamW(model.parameters(), lr=LR): its default 0.01 ...
    "train.decay_all": True,  # ... on every parameter, biases and LayerNorms included
    "train.beta1": 0.9,  # AdamW's defaults
    "train.beta2": 0.999,
    "train.eps": 1e-8,
    "train.grad_clip": 0.0,  # no clipping
    "train.grad_accum": 1,
    "train.eval_interval": 300,  # EVAL_EVERY = 300 (and step 0: every run evaluates there)
    "train.eval_iters": 1,  # one batch of each split per evaluation ...
    "train.eval_batches": "fresh",  # ... drawn anew each time (get_batch), in eval mode: estimate_loss
    "train.weights": "latest",  # step 4 samples the model the loop ended with
    "train.precision": "fp32",  # no autocast
    "sample.prompt": "\n",  # context = [[stoi['\n']]]
    "sample.tokens": 500,  # max_new_tokens=500
    "sample.temperature": 1.0,  # temperature=1.0
    "sample.top_k": 0,  # torch.multinomial over the whole softmax
    "sample.top_p": 1.0,
}

CHAPTER: dict[str, Any] = {  # chapter 20: the encoder-decoder reversing digits
    "model.vocab_size": 13,  # PAD 0, BOS 1, EOS 2, digits 3-12
    "model.pad_id": 0,  # PAD_ID = 0
    "model.block_size": 14,  # max_len=SEQ_LEN = MAX_LEN + 2: the rows of the position table
    "model.n_embd": 128,  # D_MODEL = 128
    "model.n_head": 4,  # num_heads=4
    "model.d_ff": 512,  # dff=512
    "model.n_encoder_layers": 2,  # num_layers=2
    "model.n_decoder_layers": 2,
    "model.dropout": 0.1,  # dropout=0.1: embeddings, residual branches, end of the feed-forward ...
    "model.attn_dropout": 0.1,  # ... and the softmax weights (attn_drop)
    "model.norm_first": True,  # Pre-Norm, with ln_final on each stack
    "model.ffn": "gelu",  # nn.GELU() (20.4)
    "model.positions": "sinusoidal",  # sinusoidal_position_encoding
    "model.scale_embeddings": True,  # emb(ids) * sqrt(d_model)
    "model.embedding_init": "normal",  # nn.init.normal_(std=d_model ** -0.5), PAD row zeroed (padding_idx)
    "model.share_embeddings": False,  # the encoder and the decoder each have their TokenAndPosition
    "model.init": "xavier",  # xavier_uniform_ on every nn.Linear, zeros_ on its bias
    "data.variant": "reverse",  # tgt = digits[::-1]
    "data.min_len": 3,  # MIN_LEN, MAX_LEN = 3, 12
    "data.max_len": 12,
    "data.n_train": 20_000,  # make_dataset(20000, seed=0)
    "data.n_val": 500,  # make_dataset(1000, seed=1), of which exact_match scores src_val[:500]
    "data.seed": 0,  # seed=0 for training, seed=1 for held-out pairs
    "data.val_max_len": 0,
    "data.sampling": "epochs",  # DataLoader(shuffle=True, drop_last=True): 312 batches an epoch
    "train.seed": 0,  # torch.manual_seed(0)
    "train.batch_size": 64,  # batch_size=64
    "train.max_iters": 3120,  # EPOCHS = 10 of 312 steps
    "train.schedule": "noam",  # LambdaLR(noam_lambda(D_MODEL, warmup=1000)), step + 1
    "train.warmup_iters": 1000,
    "train.lr": 128**-0.5 * 1000**-0.5,  # the peak of d^-0.5 * min(s^-0.5, s * warmup^-1.5), at s = warmup
    "train.beta1": 0.9,  # Adam(lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    "train.beta2": 0.98,
    "train.eps": 1e-9,
    "train.weight_decay": 0.0,  # Adam: no decay
    "train.grad_clip": 0.0,  # no clipping
    "train.grad_accum": 1,
    "train.eval_interval": 312,  # exact match after every epoch
    "train.weights": "latest",  # 20.11 decodes with the model the last epoch ended with
    "train.precision": "fp32",  # USE_BF16 = DEVICE == "cuda": fp32 on a CPU
}

# Chapter 20's printed log (20.12.2, RTX 4090, bf16): val_exact_match on its 500 held-out pairs after each epoch.
CHAPTER_LOG = {1: 0.386, 2: 0.876, 3: 0.872, 4: 0.946, 5: 0.964, 6: 0.992, 7: 0.988, 8: 0.996, 9: 0.996, 10: 0.996}

RECIPES = {"gpt": LAB, "reverse": CHAPTER}  # task -> the course's recipe for it


def layer(facts: dict[str, Any]) -> dict:
    """Flat facts {"model.n_layer": 4} -> the nested layer {"model": {"n_layer": 4}} that `config.resolve` takes."""
    nested: dict[str, dict] = {}
    for key, value in facts.items():
        section, name = key.split(".")
        nested.setdefault(section, {})[name] = value
    return nested
