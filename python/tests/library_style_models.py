"""Small transformer models written the way model libraries write them (Hugging
Face's BERT, GPT-2 and Llama code paths, in miniature), for the torch.compile
backend's tests: keyword inputs, buffers sliced and expanded to the input's
size, GPT-2's Conv1D (addmm over a 2-D view with a [in, out] weight), GELU
written out with tanh and pow, F.scaled_dot_product_attention with a padding
mask or the causal flag, RMSNorm written out (pow, mean, rsqrt), rotary
embeddings (slices, cat, neg) and SiLU gating; dropout modules in eval mode.
The GPU host runs the model library's own models besides (benchmarks/)."""
import math

import torch
import torch.nn.functional as F
from torch import nn


class BertStyle(nn.Module):
    def __init__(self, vocab=100, hidden=64, heads=4, ffn=128, layers=2, max_len=128):
        super().__init__()
        self.heads = heads
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_len, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.register_buffer("position_ids", torch.arange(max_len).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros((1, max_len), dtype=torch.long), persistent=False)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.drop = nn.Dropout(0.1)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(
            q=nn.Linear(hidden, hidden), k=nn.Linear(hidden, hidden), v=nn.Linear(hidden, hidden),
            o=nn.Linear(hidden, hidden), norm1=nn.LayerNorm(hidden, eps=1e-12), up=nn.Linear(hidden, ffn),
            down=nn.Linear(ffn, hidden), norm2=nn.LayerNorm(hidden, eps=1e-12))) for _ in range(layers))

    def forward(self, input_ids, attention_mask=None):
        batch, length = input_ids.shape
        token_type_ids = self.token_type_ids[:, :length].expand(batch, length)
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.position(self.position_ids[:, :length])
        x = self.drop(self.norm(x))
        mask = None
        if attention_mask is not None:  # [B, L] of 1/0 -> additive [B, 1, 1, L]
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            def split(t):
                return t.view(batch, -1, self.heads, t.shape[-1] // self.heads).transpose(1, 2)
            q, k, v = split(layer["q"](x)), split(layer["k"](x)), split(layer["v"](x))
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
            context = context.transpose(1, 2).reshape(batch, length, -1)
            x = layer["norm1"](self.drop(layer["o"](context)) + x)
            x = layer["norm2"](self.drop(layer["down"](F.gelu(layer["up"](x)))) + x)
        return x


class Conv1D(nn.Module):
    """GPT-2's Conv1D: a linear layer with its weight transposed ([in, out])."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Gpt2Style(nn.Module):
    def __init__(self, vocab=100, hidden=64, heads=4, layers=2, max_len=128):
        super().__init__()
        self.heads, self.hidden = heads, hidden
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(max_len, hidden)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            ln1=nn.LayerNorm(hidden), attn=Conv1D(3 * hidden, hidden), proj=Conv1D(hidden, hidden),
            ln2=nn.LayerNorm(hidden), fc=Conv1D(4 * hidden, hidden), act=NewGELU(),
            out=Conv1D(hidden, 4 * hidden), drop=nn.Dropout(0.1))) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, input_ids):
        batch, length = input_ids.shape
        position_ids = torch.arange(0, length, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(position_ids)
        for b in self.blocks:
            q, k, v = b["attn"](b["ln1"](x)).split(self.hidden, dim=2)
            shape = (batch, length, self.heads, self.hidden // self.heads)
            q, k, v = q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
            a = a.transpose(1, 2).contiguous().view(batch, length, self.hidden)
            x = x + b["drop"](b["proj"](a))
            x = x + b["drop"](b["out"](b["act"](b["fc"](b["ln2"](x)))))
        return self.ln_f(x)


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaStyle(nn.Module):
    def __init__(self, vocab=100, hidden=64, heads=4, ffn=172, layers=2):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(
            n1=RMSNorm(hidden), q=nn.Linear(hidden, hidden, bias=False), k=nn.Linear(hidden, hidden, bias=False),
            v=nn.Linear(hidden, hidden, bias=False), o=nn.Linear(hidden, hidden, bias=False), n2=RMSNorm(hidden),
            gate=nn.Linear(hidden, ffn, bias=False), up=nn.Linear(hidden, ffn, bias=False),
            down=nn.Linear(ffn, hidden, bias=False), act=nn.SiLU())) for _ in range(layers))
        self.norm = RMSNorm(hidden)

    def forward(self, input_ids):
        batch, length = input_ids.shape
        x = self.embed(input_ids)
        position_ids = torch.arange(length, device=x.device).unsqueeze(0)
        freqs = (self.inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        for layer in self.layers:
            h = layer["n1"](x)
            shape = (batch, length, -1, self.dim)
            q = layer["q"](h).view(shape).transpose(1, 2)
            k = layer["k"](h).view(shape).transpose(1, 2)
            v = layer["v"](h).view(shape).transpose(1, 2)
            q = (q * cos) + (rotate_half(q) * sin)
            k = (k * cos) + (rotate_half(k) * sin)
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
            x = x + layer["o"](a.transpose(1, 2).reshape(batch, length, -1))
            h = layer["n2"](x)
            x = x + layer["down"](layer["act"](layer["gate"](h)) * layer["up"](h))
        return self.norm(x)
