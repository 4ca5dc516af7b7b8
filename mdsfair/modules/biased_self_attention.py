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
``reorder_incremental_state`` reorders.
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
) -> Tuple[Tensor, Optional[Tensor]]:
    """Self-attention of ``x [T, B, C]`` with ``attention``'s parameters.
    ``key_padding_mask [B, S]`` True at padded keys; ``attn_mask`` added to
    the scores (``[T, S]`` or ``[B * H, T, S]``); with ``incremental_state``
    the keys and values of the earlier steps are read from and the new ones
    appended to fairseq's cache. Returns ``(output [T, B, C], weights)``,
    the weights ``[B, T, S]`` averaged over the heads when ``need_weights``."""
    length, batch_size, embed_dim = x.shape
    heads, head_dim = attention.num_heads, attention.head_dim

    def by_head(projected: Tensor) -> Tensor:  # [T, B, C] -> [B * H, T, d]
        return projected.contiguous().view(length, batch_size * heads, head_dim).transpose(0, 1)

    query = by_head(attention.q_proj(x) * attention.scaling)
    key, value = by_head(attention.k_proj(x)), by_head(attention.v_proj(x))
    if incremental_state is not None:
        saved = attention._get_input_buffer(incremental_state)
        if "prev_key" in saved:
            key = torch.cat([saved["prev_key"].view(batch_size * heads, -1, head_dim), key], dim=1)
            value = torch.cat([saved["prev_value"].view(batch_size * heads, -1, head_dim), value], dim=1)
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
    output = attention.out_proj(output.transpose(0, 1).contiguous().view(length, batch_size, embed_dim))
    weights = None
    if need_weights:
        weights = probabilities.view(batch_size, heads, length, source_length).mean(dim=1)
    return output, weights
