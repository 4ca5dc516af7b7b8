"""Self-attention with an additive bias per head, on the parameters of
fairseq's ``MultiheadAttention``: ``softmax(s Q K^T + M) V`` (Vaswani et al.
2017, Eq. 1), with ``M`` a float mask of one ``[T, S]`` matrix or one per
batch row and head (``[B * H, T, S]``) and ``s`` the module's ``scaling``.

T5 (Raffel et al. 2020, Sec. 2.1) adds a learned bias per head and relative
offset to the scores of every self-attention, leaves the scores unscaled
(``s = 1``) and has no biases in its projections. fairseq's
``MultiheadAttention`` takes an additive mask of one ``[T, S]`` matrix in its
own computation, while its call of PyTorch's ``multi_head_attention_forward``
(every full, non-incremental pass) scales the queries by ``d^-0.5`` whatever
its ``scaling`` and concatenates the three projections' biases; so a module
built without biases or with ``scaling`` 1, or given a bias per head, runs
:func:`biased_self_attention` instead (:func:`runs_as_fairseq` says which).
The computation is fairseq's own (queries scaled after the projection, the
padded keys at ``-inf``, dropout on the probabilities), its softmax in at
least float32 (fairseq's is float32 always; a float64 model stays float64),
and incremental decoding keeps fairseq's key/value cache
(``prev_key``/``prev_value``, ``[B, H, S, d]``), which fairseq's
``reorder_incremental_state`` reorders. The decoder's attention over the
encoder's states on T5's backbone runs it too (:class:`EncoderDecoderAttention`:
fairseq's own takes its softmax in float32 always). The heads together need not be as
wide as the model (T5's ``d_kv``; ``--attention-head-dim``): the output
projection maps ``H x d`` back to the model's width.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor


def runs_as_fairseq(attention: MultiheadAttention, attn_mask: Optional[Tensor] = None) -> bool:
    """Whether fairseq's ``forward`` computes ``attention`` as this module
    does: biased projections, ``d^-0.5`` scaling, no mask or one ``[T, S]`` mask."""
    return (
        attention.q_proj.bias is not None
        and attention.scaling == attention.head_dim**-0.5
        and (attn_mask is None or attn_mask.dim() == 2)
    )


def biased_self_attention(
    attention: MultiheadAttention,
    x: Tensor,
    key_padding_mask: Optional[Tensor] = None,
    attn_mask: Optional[Tensor] = None,
    incremental_state=None,
    need_weights: bool = False,
    source: Optional[Tensor] = None,
    need_head_weights: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Self-attention of ``x [T, B, C]`` with ``attention``'s parameters, or
    with ``source [S, B, C_src]`` its attention over those states (the
    decoder's over the encoder's: their keys and values computed once and
    kept in fairseq's cache, as fairseq's ``static_kv``).
    ``key_padding_mask [B, S]`` True at padded keys; ``attn_mask`` added to
    the scores (``[T, S]`` or ``[B * H, T, S]``); with ``incremental_state``
    the keys and values of the earlier steps are read from and the new ones
    appended to fairseq's cache. Returns ``(output [T, B, C], weights)``,
    the weights ``[B, T, S]`` averaged over the heads when ``need_weights``
    (``[H, B, T, S]`` per head with ``need_head_weights``, as fairseq's)."""
    length, batch_size, _ = x.shape
    heads, head_dim = attention.num_heads, attention.head_dim

    def by_head(projected: Tensor) -> Tensor:  # [T, B, C] -> [B * H, T, d]
        return projected.contiguous().view(projected.size(0), batch_size * heads, head_dim).transpose(0, 1)

    query = by_head(attention.q_proj(x) * attention.scaling)
    saved = attention._get_input_buffer(incremental_state) if incremental_state is not None else {}
    if source is not None and "prev_key" in saved:  # the source's keys and values, kept
        key = saved["prev_key"].view(batch_size * heads, -1, head_dim)
        value = saved["prev_value"].view(batch_size * heads, -1, head_dim)
    else:
        states = x if source is None else source
        key, value = by_head(attention.k_proj(states)), by_head(attention.v_proj(states))
        if source is None and "prev_key" in saved:
            key = torch.cat([saved["prev_key"].view(batch_size * heads, -1, head_dim), key], dim=1)
            value = torch.cat([saved["prev_value"].view(batch_size * heads, -1, head_dim), value], dim=1)
        if incremental_state is not None:
            saved["prev_key"] = key.reshape(batch_size, heads, -1, head_dim)
            saved["prev_value"] = value.reshape(batch_size, heads, -1, head_dim)
            attention._set_input_buffer(incremental_state, saved)
    source_length = key.size(1)
    scores = torch.bmm(query, key.transpose(1, 2))
    if attn_mask is not None:
        scores = scores + attn_mask.to(scores.dtype)
    if key_padding_mask is not None:
        scores = (
            scores.view(batch_size, heads, length, source_length)
            .masked_fill(key_padding_mask.view(batch_size, 1, 1, source_length).bool(), float("-inf"))
            .view(batch_size * heads, length, source_length)
        )
    probabilities = F.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).type_as(scores)
    output = torch.bmm(attention.dropout_module(probabilities), value)
    output = attention.out_proj(output.transpose(0, 1).contiguous().view(length, batch_size, heads * head_dim))
    weights = None
    if need_weights or need_head_weights:
        weights = probabilities.view(batch_size, heads, length, source_length)
        weights = weights.transpose(0, 1) if need_head_weights else weights.mean(dim=1)
    return output, weights


class BackboneAttention(MultiheadAttention):
    """fairseq's ``MultiheadAttention`` (the same parameters and cache) that
    runs fairseq's computation where that computes it
    (:meth:`runs_fairseqs`), else its own (:meth:`own_attention`, on
    :func:`biased_self_attention`)."""

    def runs_fairseqs(self, key, value, static_kv: bool, attn_mask, before_softmax: bool) -> bool:
        return runs_as_fairseq(self, attn_mask)

    def own_attention(
        self, query, key, key_padding_mask, incremental_state, need_weights, attn_mask, need_head_weights
    ) -> Tuple[Tensor, Optional[Tensor]]:
        raise NotImplementedError

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ):
        if self.runs_fairseqs(key, value, static_kv, attn_mask, before_softmax):
            return super().forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                incremental_state=incremental_state,
                need_weights=need_weights,
                static_kv=static_kv,
                attn_mask=attn_mask,
                before_softmax=before_softmax,
                need_head_weights=need_head_weights,
            )
        if static_kv != self.encoder_decoder_attention or before_softmax:
            raise ValueError(
                f"{type(self).__name__} with a mask per head or T5's backbone (no biases, unscaled) takes neither "
                f"static_kv={static_kv} nor before_softmax"
            )
        return self.own_attention(
            query, key, key_padding_mask, incremental_state, need_weights, attn_mask, need_head_weights
        )


class EncoderDecoderAttention(BackboneAttention):
    """The decoder layer's attention over the encoder's states: fairseq's
    ``MultiheadAttention`` (the same parameters), whose own computation
    takes its softmax in float32 whatever the model's dtype. On T5's
    backbone (projections without biases or unscaled scores, where
    :func:`runs_as_fairseq` is false) it runs :func:`biased_self_attention`
    over the source instead: the same computation, its softmax in the model's
    dtype when that is wider (a float64 model computes Hugging Face's T5 in
    float64), the source's keys and values kept in fairseq's cache."""

    def runs_fairseqs(self, key, value, static_kv, attn_mask, before_softmax):
        return runs_as_fairseq(self, attn_mask) or not static_kv or before_softmax or key is not value

    def own_attention(
        self, query, key, key_padding_mask, incremental_state, need_weights, attn_mask, need_head_weights
    ):
        return biased_self_attention(
            self, query, key_padding_mask, attn_mask, incremental_state, need_weights, key, need_head_weights
        )
