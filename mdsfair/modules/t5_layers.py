"""The layers of T5 (Raffel et al. 2020, "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer", Sec. 2.1) in its v1.1
form, as Hugging Face's ``modeling_t5.py`` computes them.

* :class:`T5LayerNorm`: root-mean-square normalisation (Zhang & Sennrich
  2019): ``y = w * x / sqrt(mean(x^2) + eps)``, no mean subtracted, no bias;
  the mean square is taken in float32 whatever the model's dtype, as
  Hugging Face's ``T5LayerNorm`` takes it.
* :func:`relative_position_bucket` and :class:`RelativePositionBias`: the
  paper's relative position embeddings, one learned scalar per head and
  bucket of the offset ``key position - query position``; half the buckets
  hold exact offsets, the other half offsets growing logarithmically up to
  ``max_distance`` (32 buckets, 128 in T5). The encoder's buckets tell left
  from right (bidirectional); the decoder's see only the past. The bias is
  computed once per stack and added to the scores of every layer of it.
* :class:`T5Attention`: multi-head attention without biases and without the
  ``1/sqrt(d)`` scaling of the scores (the initialisation absorbs it):
  ``softmax(Q K^T + B) V`` with the position bias ``B``; the head width
  ``d_kv`` need not be ``d_model / heads``. LongT5's blocked attentions
  (:mod:`mdsfair.modules.longt5_attention`) are built on it.
* :func:`gated_gelu`: the hidden layer of T5 v1.1's feed-forward (Shazeer
  2020, "GLU Variants Improve Transformer", Eq. 6):
  ``gelu_tanh(wi_0 x) * wi_1 x`` with the tanh approximation of GELU.

The layers around them are the component model's
(:mod:`mdsfair.modules.transformer_layers`, on T5's backbone:
:data:`mdsfair.models.presets.T5_BACKBONE`).

Tensors are batch-major (``[B, T, C]``); the attention's incremental cache
holds each layer's keys and values (``[B, heads, T, d_kv]``).
"""

import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class T5LayerNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)``, the mean square in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        mean_square = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(mean_square + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh approximation (Hendrycks & Gimpel 2016, Sec. 2), as
    Hugging Face's ``gelu_new`` writes it."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gated_gelu(x: Tensor, gate: nn.Module, linear: nn.Module) -> Tensor:
    """The hidden layer of T5 v1.1's feed-forward (Shazeer 2020, "GLU
    Variants Improve Transformer", Eq. 6, GEGLU): ``gelu_tanh(gate x) *
    linear x`` (Hugging Face's ``wi_0`` and ``wi_1``); the feed-forward's
    output layer reads it."""
    return gelu_tanh(gate(x)) * linear(x)


def relative_position_bucket(relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int):
    """The bucket of each offset ``key - query`` (Raffel et al. 2020, Sec.
    2.1; mesh-tensorflow's ``_relative_position_bucket``). Bidirectional:
    half the buckets for keys on the right; causal: offsets to the right
    fall in bucket 0 (they are masked anyway). Of the remaining buckets,
    the first half are the exact distances ``0 .. n/2 - 1``, the rest
    logarithmic bins up to ``max_distance`` (beyond it, the last bucket)."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).to(torch.long) * num_buckets
        distance = torch.abs(relative_position)
    else:
        distance = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    large = max_exact + (
        torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """One stack's bucketed relative position bias: ``[1, heads, Tq, Tk]``
    for queries at ``first_query .. first_query + Tq - 1`` and keys at
    ``0 .. Tk - 1``."""

    def __init__(self, heads: int, num_buckets: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)

    def forward(self, query_length: int, key_length: int, first_query: int = 0) -> Tensor:
        device = self.relative_attention_bias.weight.device
        query = torch.arange(query_length, dtype=torch.long, device=device)[:, None] + first_query
        key = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        buckets = relative_position_bucket(key - query, self.bidirectional, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)


class T5Attention(nn.Module):
    """``softmax(Q K^T + bias) V`` over ``heads`` heads of width ``head_dim``,
    no projection biases, no score scaling. ``bias`` ``[1 or B, heads, Tq,
    Tk]`` carries the positions and the masks (:func:`attention_bias`)."""

    def __init__(self, embed_dim: int, heads: int, head_dim: int, dropout: float):
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, head_dim, dropout
        inner = heads * head_dim
        self.q_proj = nn.Linear(embed_dim, inner, bias=False)
        self.k_proj = nn.Linear(embed_dim, inner, bias=False)
        self.v_proj = nn.Linear(embed_dim, inner, bias=False)
        self.out_proj = nn.Linear(inner, embed_dim, bias=False)

    def split_heads(self, x: Tensor) -> Tensor:
        return x.view(x.size(0), x.size(1), self.heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        bias: Tensor,
        key_value: Optional[Tensor] = None,
        cache: Optional[Dict[str, Tensor]] = None,
        static_keys: bool = False,
    ) -> Tensor:
        """``x [B, Tq, C]``; ``key_value`` (cross-attention: the encoder's
        states) or ``x`` itself; ``cache``: this layer's ``key`` and
        ``value``, extended (self-attention) or computed once and kept
        (``static_keys``, the cross-attention)."""
        query = self.split_heads(self.q_proj(x))
        if cache is not None and static_keys and "key" in cache:
            key, value = cache["key"], cache["value"]
        else:
            source = x if key_value is None else key_value
            key, value = self.split_heads(self.k_proj(source)), self.split_heads(self.v_proj(source))
            if cache is not None and not static_keys and "key" in cache:
                key = torch.cat([cache["key"], key], dim=2)
                value = torch.cat([cache["value"], value], dim=2)
            if cache is not None:
                cache["key"], cache["value"] = key, value
        scores = torch.matmul(query, key.transpose(2, 3)) + bias
        weights = F.dropout(F.softmax(scores, dim=-1), p=self.dropout, training=self.training)
        output = torch.matmul(weights, value).transpose(1, 2).reshape(x.size(0), x.size(1), -1)
        return self.out_proj(output)
