"""Causal memory-compressed self-attention (Liu et al. 2018, "Generating
Wikipedia by Summarizing Long Sequences", Sec. 4.2.3, "memory-compressed
attention").

The keys and values are projected as in multi-head attention, then shortened
by a strided convolution over the positions (kernel = stride = ``c``, 3 in
the paper): compressed slot ``m`` is

    K~_m = sum_{r=0}^{c-1} W_r K_{c m + r} + b,   likewise V~_m,

one convolution for the keys and one for the values, so a sequence of ``n``
tokens has ``floor(n / c)`` slots and every query attends to all of them at a
cost of ``n * n / c`` instead of ``n * n``. Unlike the local layers, these
layers exchange information across the whole sequence.

Decoding stays causal as in the authors' code (mesh-tensorflow's
``multihead_self_attention_memory_compressed`` with ``mask_right``): slot
``m`` is visible to the query at position ``i`` only when its whole window
lies in the past, ``c m + c - 1 <= i``; and an extra logit 0 with a zero
value joins every softmax (its ``extra_logit=0.0``), so the first ``c - 1``
queries, which see no slot yet, attend to nothing and get a zero output.

An incremental step keeps the projected keys and values of the last ``c - 1``
positions; when a position completes a window, its slot joins the cache.
"""

from typing import Dict, Optional

import torch
from torch import Tensor, nn

from mdsfair.modules.local_attention import (
    EMPTY_POSITION,
    MultiHeadProjections,
    masked_softmax,
    merge_heads,
    split_heads,
)


class CausalMemoryCompressedSelfAttention(MultiHeadProjections):
    """Multi-head attention over the strided-convolution compressed keys and
    values (see the module docstring); parameters ``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj`` as fairseq's ``MultiheadAttention`` plus the
    convolutions ``k_compression`` and ``v_compression``."""

    def __init__(self, embed_dim: int, num_heads: int, compression: int, dropout: float = 0.0):
        if compression < 1:
            raise ValueError(f"the memory compression factor must be positive, got {compression}")
        super().__init__(embed_dim, num_heads, dropout)
        self.compression = compression
        self.k_compression = nn.Conv1d(embed_dim, embed_dim, compression, stride=compression)
        self.v_compression = nn.Conv1d(embed_dim, embed_dim, compression, stride=compression)

    def compress(self, convolution: nn.Conv1d, x: Tensor) -> Tensor:
        """``[B, N, D]`` -> ``[B, heads, floor(N / c), D / heads]``."""
        if x.size(1) < self.compression:
            return x.new_zeros(x.size(0), self.num_heads, 0, self.head_dim)
        return split_heads(convolution(x.transpose(1, 2)).transpose(1, 2), self.num_heads)

    def forward(self, x: Tensor, cache: Optional[Dict[str, Tensor]] = None, lengths: Optional[Tensor] = None) -> Tensor:
        """Full pass over ``x`` ``[B, N, D]`` (row positions 0..N-1). With
        ``cache`` (an empty dict), the slots within each row's first
        ``lengths`` positions and the last ``c - 1`` projected keys and values
        are stored in it for :meth:`step`."""
        batch, length, _ = x.shape
        c = self.compression
        q = self.queries(x)
        keys, values = self.k_proj(x), self.v_proj(x)
        k, v = self.compress(self.k_compression, keys), self.compress(self.v_compression, values)
        slot_end = torch.arange(k.size(2), device=x.device) * c + (c - 1)
        if cache is not None:
            ends = slot_end.expand(batch, -1)
            cache["key"], cache["value"] = k, v
            cache["slot_end"] = ends.masked_fill(ends >= lengths.unsqueeze(1), EMPTY_POSITION)
            # the last c - 1 positions of each row (clamped at 0: a window
            # completes only at position c - 1 or later)
            recent = (lengths.unsqueeze(1) - c + 1 + torch.arange(c - 1, device=x.device)).clamp(min=0)
            index = recent.unsqueeze(-1).expand(-1, -1, self.embed_dim)
            cache["recent_key"], cache["recent_value"] = keys.gather(1, index), values.gather(1, index)
        allowed = slot_end.view(1, -1) <= torch.arange(length, device=x.device).view(-1, 1)
        probabilities = masked_softmax(q @ k.transpose(-1, -2), allowed, null_logit=True)
        probabilities = nn.functional.dropout(probabilities, p=self.dropout, training=self.training)
        return self.out_proj(merge_heads(probabilities @ v))

    def step(self, x: Tensor, position: Tensor, cache: Dict[str, Tensor]) -> Tensor:
        """One new token per row: ``x`` ``[B, 1, D]`` at ``position`` ``[B]``;
        the slot its position completes (if any) joins ``cache``."""
        c = self.compression
        q = self.queries(x)
        window_keys = torch.cat([cache["recent_key"], self.k_proj(x)], dim=1)
        window_values = torch.cat([cache["recent_value"], self.v_proj(x)], dim=1)
        cache["recent_key"], cache["recent_value"] = window_keys[:, 1:], window_values[:, 1:]
        cache["key"] = torch.cat([cache["key"], self.compress(self.k_compression, window_keys)], dim=2)
        cache["value"] = torch.cat([cache["value"], self.compress(self.v_compression, window_values)], dim=2)
        completes = position % c == c - 1
        new_end = position.masked_fill(~completes, EMPTY_POSITION)
        cache["slot_end"] = torch.cat([cache["slot_end"], new_end.unsqueeze(1)], dim=1)
        allowed = cache["slot_end"] <= position.unsqueeze(1)
        probabilities = masked_softmax(q @ cache["key"].transpose(-1, -2), allowed[:, None, None, :], null_logit=True)
        return self.out_proj(merge_heads(probabilities @ cache["value"]))
