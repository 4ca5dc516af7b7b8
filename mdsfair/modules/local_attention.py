"""Causal block-local self-attention (Liu et al. 2018, "Generating Wikipedia by
Summarizing Long Sequences", Sec. 4.2.3, "local attention").

The sequence is split into blocks of ``block_length`` tokens (256 in the
paper). A query at position ``i`` attends to the keys at positions ``j`` with

    j <= i   and   floor(j / block_length) >= floor(i / block_length) - 1,

its own block up to itself and the whole previous block: tensor2tensor's
``masked_local_attention_1d`` (``layers/common_attention.py``), the
``local_mask_right`` attention of the authors' code. Each head computes

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + M) V

(Vaswani et al. 2017, Eq. 1) with ``M`` that band mask, so a query sees at
most ``2 * block_length`` keys and the cost grows linearly with the length.

The full pass lays the queries out in blocks (a key block is the previous
block followed by the current one); one incremental step attends to the
cached keys whose positions the rule allows. Positions count from the first
token of each row, so blocks do not depend on padding or on the batch.
tensor2tensor treats a sequence shorter than two blocks as one block (a
shortcut that depends on the whole length and so cannot decode
incrementally); here the rule above holds at every length.

With ``block_length`` None the module is full causal attention (``j <= i``,
every past key): the Transformer decoder T-D the paper compares T-DMCA with.
"""

import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

#: position of an empty cache slot: never <= a query position
EMPTY_POSITION = torch.iinfo(torch.int64).max


def split_heads(x: Tensor, heads: int) -> Tensor:
    """``[B, N, D]`` -> ``[B, heads, N, D / heads]``."""
    batch, length, dim = x.shape
    return x.view(batch, length, heads, dim // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``[B, heads, N, d]`` -> ``[B, N, heads * d]``."""
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


def masked_softmax(scores: Tensor, allowed: Tensor, null_logit: bool = False) -> Tensor:
    """softmax over the last dimension of ``scores`` where ``allowed``, in
    float32 at least (float64 stays float64); with ``null_logit`` an extra logit 0 of a zero value
    joins every row (mesh-tensorflow's ``extra_logit=0.0``), so a row with no
    allowed key gives zeros."""
    dtype = scores.dtype
    if dtype not in (torch.float32, torch.float64):
        scores = scores.float()
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    if null_logit:
        scores = torch.cat([scores, scores.new_zeros(scores.shape[:-1] + (1,))], dim=-1)
        return torch.softmax(scores, dim=-1)[..., :-1].to(dtype)
    return torch.softmax(scores, dim=-1).to(dtype)


class MultiHeadProjections(nn.Module):
    """The query, key, value and output projections of multi-head attention,
    under fairseq's ``MultiheadAttention`` names ``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj``, and the queries scaled by ``1 / sqrt(d_k)``."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embedding dimension {embed_dim} is not divisible by {num_heads} heads")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def queries(self, x: Tensor) -> Tensor:
        """``[B, N, D]`` -> the scaled queries ``[B, heads, N, D / heads]``."""
        return split_heads(self.q_proj(x), self.num_heads) / math.sqrt(self.head_dim)


class CausalLocalSelfAttention(MultiHeadProjections):
    """Multi-head self-attention within the current and the previous block
    (see the module docstring), or over every past key with ``block_length``
    None; parameters ``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj`` as fairseq's ``MultiheadAttention``."""

    def __init__(self, embed_dim: int, num_heads: int, block_length: Optional[int], dropout: float = 0.0):
        if block_length is not None and block_length < 1:
            raise ValueError(f"the local attention's block length must be positive, got {block_length}")
        super().__init__(embed_dim, num_heads, dropout)
        self.block_length = block_length

    def forward(self, x: Tensor, cache: Optional[Dict[str, Tensor]] = None, lengths: Optional[Tensor] = None) -> Tensor:
        """Full pass over ``x`` ``[B, N, D]`` (row positions 0..N-1). With
        ``cache`` (an empty dict), the keys and values of each row's first
        ``lengths`` positions are stored in it for :meth:`step`."""
        batch, length, _ = x.shape
        block = self.block_length
        q = self.queries(x)
        k = split_heads(self.k_proj(x), self.num_heads)
        v = split_heads(self.v_proj(x), self.num_heads)
        if cache is not None:
            positions = torch.arange(length, device=x.device).expand(batch, length)
            cache["key"], cache["value"] = k, v
            cache["position"] = positions.masked_fill(positions >= lengths.unsqueeze(1), EMPTY_POSITION)
        if self.block_length is None:
            query, key = torch.arange(length, device=x.device).view(-1, 1), torch.arange(length, device=x.device)
            probabilities = masked_softmax(q @ k.transpose(-1, -2), key <= query)
            probabilities = F.dropout(probabilities, p=self.dropout, training=self.training)
            return self.out_proj(merge_heads(probabilities @ v))
        padding = -length % block
        blocks = (length + padding) // block
        q, k, v = (F.pad(t, (0, 0, 0, padding)).view(batch, self.num_heads, blocks, block, -1) for t in (q, k, v))
        # keys of block b: block b - 1 (zeros before the first) then block b
        k = torch.cat([F.pad(k, (0, 0, 0, 0, 1, 0))[:, :, :-1], k], dim=3)
        v = torch.cat([F.pad(v, (0, 0, 0, 0, 1, 0))[:, :, :-1], v], dim=3)
        query = torch.arange(block, device=x.device).view(1, block, 1)
        key = torch.arange(2 * block, device=x.device).view(1, 1, 2 * block)
        first = (torch.arange(blocks, device=x.device) == 0).view(blocks, 1, 1)
        allowed = (key <= query + block) & ~(first & (key < block))  # [blocks, block, 2 block]
        probabilities = masked_softmax(q @ k.transpose(-1, -2), allowed)
        probabilities = F.dropout(probabilities, p=self.dropout, training=self.training)
        output = (probabilities @ v).view(batch, self.num_heads, blocks * block, self.head_dim)[:, :, :length]
        return self.out_proj(merge_heads(output))

    def step(self, x: Tensor, position: Tensor, cache: Dict[str, Tensor]) -> Tensor:
        """One new token per row: ``x`` ``[B, 1, D]`` at ``position`` ``[B]``;
        its key and value join ``cache``."""
        q = self.queries(x)
        cache["key"] = torch.cat([cache["key"], split_heads(self.k_proj(x), self.num_heads)], dim=2)
        cache["value"] = torch.cat([cache["value"], split_heads(self.v_proj(x), self.num_heads)], dim=2)
        cache["position"] = torch.cat([cache["position"], position.unsqueeze(1)], dim=1)
        keys = cache["position"]
        query = position.unsqueeze(1)
        allowed = keys <= query
        if self.block_length is not None:
            allowed &= keys // self.block_length >= query // self.block_length - 1
        probabilities = masked_softmax(q @ cache["key"].transpose(-1, -2), allowed[:, None, None, :])
        return self.out_proj(merge_heads(probabilities @ cache["value"]))
