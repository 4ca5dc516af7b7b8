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
  ``softmax(Q K^T + B) V`` with the position bias ``B`` (zero for the
  cross-attention); the head width ``d_kv`` need not be ``d_model / heads``.
* :class:`T5FeedForward`: ``wo(relu(wi x))`` (T5) or the gated GELU of T5
  v1.1 (Shazeer 2020, "GLU Variants Improve Transformer", Eq. 6):
  ``wo(gelu_tanh(wi_0 x) * wi_1 x)`` with the tanh approximation of GELU.
* :class:`T5EncoderLayer` and :class:`T5DecoderLayer`: pre-norm blocks,
  ``x + dropout(f(norm(x)))`` for the self-attention, the cross-attention
  (decoder) and the feed-forward.

Tensors are batch-major (``[B, T, C]``); the attention's incremental cache
holds each layer's keys and values (``[B, heads, T, d_kv]``).
"""

import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

#: ``--t5-feed-forward`` choices: T5's ReLU and T5 v1.1's gated GELU
FEED_FORWARD_KINDS = ("relu", "gated-gelu")


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


def attention_bias(position_bias: Optional[Tensor], hidden: Tensor, masked: Optional[Tensor], heads: int) -> Tensor:
    """``position_bias`` (or zeros) with ``masked`` ``[B or 1, 1, Tq, Tk]``
    entries set to the dtype's lowest value, as Hugging Face adds its masks
    to the bias."""
    if position_bias is None:
        position_bias = hidden.new_zeros(1, heads, 1, 1)
    bias = position_bias.to(hidden.dtype)
    if masked is not None:
        bias = torch.where(masked, torch.finfo(hidden.dtype).min, bias)
    return bias


class T5FeedForward(nn.Module):
    """``wo(relu(wi x))`` or ``wo(gelu_tanh(wi_0 x) * wi_1 x)`` (gated GELU),
    no biases; fairseq's names: ``fc1`` (``wi`` / ``wi_1``), ``fc_gate``
    (``wi_0``), ``fc2`` (``wo``)."""

    def __init__(self, embed_dim: int, ffn_dim: int, kind: str, dropout: float):
        super().__init__()
        if kind not in FEED_FORWARD_KINDS:
            raise ValueError(f"T5 feed-forward {kind!r}: choose one of {', '.join(FEED_FORWARD_KINDS)}")
        self.kind, self.dropout = kind, dropout
        self.fc_gate = nn.Linear(embed_dim, ffn_dim, bias=False) if kind == "gated-gelu" else None
        self.fc1 = nn.Linear(embed_dim, ffn_dim, bias=False)
        self.fc2 = nn.Linear(ffn_dim, embed_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        if self.fc_gate is not None:
            hidden = gated_gelu(x, self.fc_gate, self.fc1)
        else:
            hidden = F.relu(self.fc1(x))
        return self.fc2(F.dropout(hidden, p=self.dropout, training=self.training))


class T5EncoderLayer(nn.Module):
    """``x + dropout(SelfAttention(norm(x)))``, then ``x + dropout(FFN(norm(x)))``.
    ``self_attention``: T5's :class:`T5Attention` unless given (LongT5's,
    :mod:`mdsfair.modules.longt5_attention`); it reads the stack's ``bias``."""

    def __init__(self, args, self_attention: Optional[nn.Module] = None):
        super().__init__()
        dim, eps = args.encoder_embed_dim, args.layer_norm_eps
        self.dropout = args.dropout
        if self_attention is None:
            self_attention = T5Attention(dim, args.encoder_attention_heads, args.attention_head_dim, args.dropout)
        self.self_attn = self_attention
        self.self_attn_layer_norm = T5LayerNorm(dim, eps)
        self.ffn = T5FeedForward(dim, args.encoder_ffn_embed_dim, args.t5_feed_forward, args.dropout)
        self.final_layer_norm = T5LayerNorm(dim, eps)

    def forward(self, x: Tensor, bias) -> Tensor:
        x = x + F.dropout(self.self_attn(self.self_attn_layer_norm(x), bias), p=self.dropout, training=self.training)
        return x + F.dropout(self.ffn(self.final_layer_norm(x)), p=self.dropout, training=self.training)


class T5DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder's states,
    feed-forward; each ``x + dropout(f(norm(x)))``."""

    def __init__(self, args):
        super().__init__()
        dim, eps = args.decoder_embed_dim, args.layer_norm_eps
        heads = args.decoder_attention_heads
        self.dropout = args.dropout
        self.self_attn = T5Attention(dim, heads, args.attention_head_dim, args.dropout)
        self.self_attn_layer_norm = T5LayerNorm(dim, eps)
        self.encoder_attn = T5Attention(dim, heads, args.attention_head_dim, args.dropout)
        self.encoder_attn_layer_norm = T5LayerNorm(dim, eps)
        self.ffn = T5FeedForward(dim, args.decoder_ffn_embed_dim, args.t5_feed_forward, args.dropout)
        self.final_layer_norm = T5LayerNorm(dim, eps)

    def forward(
        self,
        x: Tensor,
        self_bias: Tensor,
        encoder_states: Tensor,
        cross_bias: Tensor,
        cache: Optional[Dict[str, Dict[str, Tensor]]] = None,
    ) -> Tensor:
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache.setdefault("self", {}), cache.setdefault("cross", {})
        attended = self.self_attn(self.self_attn_layer_norm(x), self_bias, cache=self_cache)
        x = x + F.dropout(attended, p=self.dropout, training=self.training)
        attended = self.encoder_attn(
            self.encoder_attn_layer_norm(x), cross_bias, key_value=encoder_states, cache=cross_cache, static_keys=True
        )
        x = x + F.dropout(attended, p=self.dropout, training=self.training)
        return x + F.dropout(self.ffn(self.final_layer_norm(x)), p=self.dropout, training=self.training)
