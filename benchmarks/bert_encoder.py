"""A BERT-base encoder in plain torch.nn, written as Hugging Face's BertLayer is
(embeddings excluded): 12 layers of hidden 768, 12 heads, FFN 3072, GELU
(erf), post-LayerNorm with epsilon 1e-12, fp32; no attention mask (every
sequence of a request has the request's length). torch_frontend.py measures
it, and the Python package's tests check unicache.torch against it.

It is traceable by torch.fx: shapes come from x.size() and views built from
it, never from Python ints taken out of a tensor.

Also the request trace of bench_dynamic_shapes (the same distribution, drawn
with numpy): B ~ uniform{1..8}, each sequence length ~ round(lognormal(ln 48,
0.9)) clamped to [1, 512], and L the longest of the B.
"""
from __future__ import annotations

import math
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size()[:-1] + (self.heads, self.head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        probs = self.dropout(F.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.heads * self.head_size,))


class BertSelfOutput(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertIntermediate(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, ffn)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(hidden_states))


class BertOutput(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.dense = nn.Linear(ffn, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.attention_output = BertSelfOutput(hidden)
        self.intermediate = BertIntermediate(hidden, ffn)
        self.output = BertOutput(hidden, ffn)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        attention = self.attention_output(self.attention(hidden_states), hidden_states)
        return self.output(self.intermediate(attention), attention)


class BertEncoder(nn.Module):
    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.hidden = hidden
        self.layer = nn.ModuleList([BertLayer(hidden, heads, ffn) for _ in range(layers)])

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states)
        return hidden_states


def make_trace(requests: int, seed: int, max_batch: int = 8, max_seq: int = 512) -> List[Tuple[int, int]]:
    """(batch, length) per request, drawn as bench_dynamic_shapes draws its trace."""
    import numpy as np
    rng = np.random.default_rng(seed)
    trace = []
    for _ in range(requests):
        batch = int(rng.integers(1, max_batch + 1))
        lengths = np.clip(np.rint(rng.lognormal(math.log(48.0), 0.9, size=batch)), 1, max_seq)
        trace.append((batch, int(lengths.max())))
    return trace
