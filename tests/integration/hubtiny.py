"""A tiny GPT-2 repo as transformers' save_pretrained lays it out (config.json,
tokenizer.json, tokenizer_config.json, two safetensors shards and
model.safetensors.index.json), and TinyGPT2: GPT-2's forward pass written
here in plain torch with GPT2Model's parameter names, so weights downloaded
through tensord can be loaded into a model with the torch this machine has
(Debian's 1.13, on which transformers turns its own models off).

Imported by test_hub_clients.py's child interpreters only: it needs torch,
transformers and tokenizers, and huggingface_hub (which transformers imports)
reads HF_ENDPOINT at import."""
import json
import math
import os

import torch
from torch import nn

WORDS = ["[UNK]", "[PAD]"] + "the a tensor daemon serves model weights over http to every worker fast".split()


def config_kwargs():
    return dict(n_layer=2, n_embd=32, n_head=2, vocab_size=len(WORDS), n_positions=32,
                bos_token_id=0, eos_token_id=0)


class Conv1D(nn.Module):
    """GPT-2's transposed linear layer: weight (in, out)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.2)
        self.bias = nn.Parameter(torch.randn(n_out) * 0.2)

    def forward(self, x):
        return x @ self.weight + self.bias


class _Attn(nn.Module):
    def __init__(self, e, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(e, 3 * e)
        self.c_proj = Conv1D(e, e)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.c_attn(x).split(e, dim=2)
        q, k, v = (z.view(b, t, self.heads, e // self.heads).transpose(1, 2) for z in (q, k, v))
        w = q @ k.transpose(-1, -2) / math.sqrt(e // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        w = w.masked_fill(~causal, torch.finfo(w.dtype).min).softmax(-1)
        return self.c_proj((w @ v).transpose(1, 2).reshape(b, t, e))


class _Mlp(nn.Module):
    def __init__(self, e):
        super().__init__()
        self.c_fc = Conv1D(e, 4 * e)
        self.c_proj = Conv1D(4 * e, e)

    def forward(self, x):
        h = self.c_fc(x)  # gelu_new, GPT-2's tanh approximation
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3))))
        return self.c_proj(h)


class _Block(nn.Module):
    def __init__(self, e, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(e, eps=1e-5)
        self.attn = _Attn(e, heads)
        self.ln_2 = nn.LayerNorm(e, eps=1e-5)
        self.mlp = _Mlp(e)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT2(nn.Module):
    """GPT2Model's state dict and last_hidden_state, nothing else."""

    def __init__(self, n_layer, n_embd, n_head, vocab_size, n_positions, **_):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList([_Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[-1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


def make_repo(path):
    """Writes the repo into path (the config and tokenizer with transformers'
    own save_pretrained, random weights in two shards)."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, PreTrainedTokenizerFast

    os.makedirs(path, exist_ok=True)
    GPT2Config(**config_kwargs()).save_pretrained(path)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                            model_max_length=32).save_pretrained(path)
    torch.manual_seed(13)
    model = TinyGPT2(**config_kwargs())
    with torch.no_grad():  # LayerNorms away from their 1/0 init, so a swap shows
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.add_(torch.randn_like(p) * 0.1)
            elif name.endswith(("ln_1.bias", "ln_2.bias", "ln_f.bias")):
                p.copy_(torch.randn_like(p) * 0.1)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": [n for n in names if not n.startswith("h.1.")],
              "model-00002-of-00002.safetensors": [n for n in names if n.startswith("h.1.")]}
    weight_map, total = {}, 0
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, os.path.join(path, shard), metadata={"format": "pt"})
        for k in keys:
            weight_map[k] = shard
            total += state[k].numel() * state[k].element_size()
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
