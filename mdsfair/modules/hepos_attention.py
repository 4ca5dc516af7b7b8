"""HEPOS: encoder-decoder attention with head-wise positional strides
(Huang et al. 2021, "Efficient Attentions for Long Document Summarization",
NAACL, Sec. 3, Fig. 2).

Every head of the cross-attention reads a fixed subset of the source: with
stride ``s_h = s``, head ``h`` attends to the source positions ``j`` with
``j mod s = h mod s``, so each head sees ``N / s`` of the ``N`` tokens and the
``s`` residues together cover the whole source (Sec. 3: attention heads are
redundant, and one head rarely reads several neighbouring tokens). For a query
``q_i`` and head ``h`` (``d`` the head dimension)::

    K_h = { W_K^h x_j : j mod s = h mod s },   V_h likewise
    attention_h(q_i) = softmax(q_i W_Q^h K_h^T / sqrt(d)) V_h

and the heads are concatenated and projected by ``W_O`` as in the Transformer.
The memory of the attention weights and of the cached keys and values is
``O(N / s)`` per head instead of ``O(N)``.

The positions ``j`` are a token's position within its source (its real
tokens counted from 0), so a source reads the same tokens under left padding
(fairseq's default) and right padding; the authors pad on the right
(``--left-pad-source False`` in ``Model/train_script/finetune_sinkhorn_hepos.sh``
of ``luyang-huang96/LongDocSum``) and index the padded row.

The keys and values of head ``h`` are projected from its own ``N / s``
source states only (the heads of one residue share their gathered states:
the projection costs ``1 / s`` of the full one); incremental decoding caches
them once, at the first step, per hypothesis row as fairseq's
``MultiheadAttention`` caches its static keys and values (and reorders them
with fairseq's ``reorder_incremental_state``). A head whose residue holds no
real token of a source (a source shorter than ``s``) reads nothing: its
output is zero.

Differences from the authors' ``DivideMultiheadAttention``
(``Model/longbart/decoder/AdaptiveCrossAttn.py``, ``divide_type='stride'``),
whose head-to-position assignment this module shares: the authors append
``s - N mod s`` zero states (``s`` when ``N`` is a multiple of ``s``: their
test is ``N // s != 0``) to every source and leave them unmasked, so every
head also attends to ``W_K 0 + b_K`` with value ``b_V``; here the appended
positions are masked. ``tests/test_hepos_attention.py`` compares the two on
identical weights by handing this module the authors' appended zeros as
unmasked source positions.
"""

from typing import Dict, Optional, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor


def strided_source_index(padding_mask: Tensor, stride: int) -> Tuple[Tensor, Tensor]:
    """Where each head's strided positions lie in the padded batch.

    ``padding_mask`` ``[B, S]`` (True at padding, contiguous at either end).
    Returns ``index`` ``[B, s, M]`` (``M = ceil(S / s)``): the padded column of
    the source's ``o + m s``-th real token for residue ``o``, clamped to
    ``S - 1`` past the row's end, and ``masked`` ``[B, s, M]``, True where that
    column is padding or past the end.
    """
    batch, length = padding_mask.shape
    per_residue = -(-length // stride)
    # the first real token of each row: the number of left-padding columns
    first = (~padding_mask).to(torch.int8).argmax(dim=1)
    columns = first[:, None] + torch.arange(per_residue * stride, device=padding_mask.device)[None, :]
    past_end = columns >= length
    columns = columns.clamp(max=length - 1)
    masked = past_end | padding_mask.gather(1, columns)
    # real position o + m s lies at m * s + o of the flat order: [B, M, s] -> [B, s, M]
    index = columns.view(batch, per_residue, stride).transpose(1, 2)
    return index, masked.view(batch, per_residue, stride).transpose(1, 2)


class HeposCrossAttention(MultiheadAttention):
    """fairseq's encoder-decoder ``MultiheadAttention`` (same parameters and
    state-dict names, so a BART checkpoint restores into it) whose head ``h``
    reads the source positions ``j mod s = h mod s`` (module docstring)."""

    def __init__(self, embed_dim, num_heads, stride: int = 4, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if stride < 1:
            raise ValueError(f"--hepos-stride must be at least 1, got {stride}")
        if num_heads % stride != 0:
            raise ValueError(
                f"--hepos-stride {stride} must divide the {num_heads} decoder attention heads: every residue "
                f"j mod s is read by the same number of heads (Huang et al. 2021, Sec. 3)"
            )
        self.stride = stride

    def strided_projection(self, grouped_states: Tensor, projection) -> Tensor:
        """``[B, H, M, d]``: ``projection`` (``k_proj`` or ``v_proj``) of head
        ``h = r s + o`` applied to the states of residue ``o`` only.
        ``grouped_states`` ``[B, s, M, C]``."""
        heads_per_residue = self.num_heads // self.stride
        weight = projection.weight.view(heads_per_residue, self.stride, self.head_dim, -1)
        projected = torch.einsum("bomc,rodc->bromd", grouped_states, weight)
        if projection.bias is not None:
            projected = projected + projection.bias.view(heads_per_residue, self.stride, 1, self.head_dim)
        batch, _, _, per_residue, _ = projected.shape
        return projected.reshape(batch, self.num_heads, per_residue, self.head_dim)

    def strided_keys_values(self, encoder_states: Tensor, padding_mask: Optional[Tensor]):
        """``(keys, values [B, H, M, d], masked [B, H, M], index [B, s, M])``
        of every head from the encoder states ``[S, B, C]``."""
        length, batch, _ = encoder_states.shape
        if padding_mask is None:
            padding_mask = torch.zeros(batch, length, dtype=torch.bool, device=encoder_states.device)
        index, masked = strided_source_index(padding_mask.bool(), self.stride)
        states = encoder_states.transpose(0, 1)
        grouped = states.gather(1, index.reshape(batch, -1, 1).expand(-1, -1, states.size(-1)))
        grouped = grouped.view(batch, self.stride, -1, states.size(-1))
        keys = self.strided_projection(grouped, self.k_proj)
        values = self.strided_projection(grouped, self.v_proj)
        heads_per_residue = self.num_heads // self.stride
        head_masked = masked.unsqueeze(1).expand(-1, heads_per_residue, -1, -1).reshape(batch, self.num_heads, -1)
        return keys, values, head_masked, index

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """fairseq's call; returns ``(attention [T, B, C], weights)``, the
        weights ``[B, T, S]`` over the source positions (averaged over heads,
        or ``[H, B, T, S]`` with ``need_head_weights``) when asked, else None."""
        if attn_mask is not None or before_softmax:
            raise ValueError("the HEPOS cross-attention takes no attention mask and no before_softmax")
        target_length, batch, _ = query.shape
        saved_state = self._get_input_buffer(incremental_state) if incremental_state is not None else None
        if saved_state is not None and "prev_key" in saved_state:
            keys, values = saved_state["prev_key"], saved_state["prev_value"]
            masked, index = saved_state["prev_key_padding_mask"], saved_state["strided_index"]
        else:
            keys, values, masked, index = self.strided_keys_values(key, key_padding_mask)
            if incremental_state is not None:
                saved_state = {
                    "prev_key": keys,
                    "prev_value": values,
                    "prev_key_padding_mask": masked,
                    "strided_index": index,
                }
                self._set_input_buffer(incremental_state, saved_state)

        queries = (self.q_proj(query) * self.scaling).view(target_length, batch, self.num_heads, self.head_dim)
        scores = torch.einsum("tbhd,bhmd->bhtm", queries, keys)
        # a finite fill: a head whose residue holds no real token gets uniform weights, zeroed below
        scores = scores.masked_fill(masked.unsqueeze(2), torch.finfo(scores.dtype).min)
        # in float32 at least, as fairseq's utils.softmax (float64 stays float64)
        softmax_dtype = torch.float64 if scores.dtype == torch.float64 else torch.float32
        weights = torch.softmax(scores, dim=-1, dtype=softmax_dtype).to(scores.dtype)
        weights = weights.masked_fill(masked.unsqueeze(2), 0.0)
        attention = torch.einsum("bhtm,bhmd->tbhd", self.dropout_module(weights), values)
        attention = self.out_proj(attention.reshape(target_length, batch, self.embed_dim))

        if not (need_weights or need_head_weights):
            return attention, None
        return attention, self.source_weights(weights, index, key_padding_mask, need_head_weights)

    def source_weights(self, weights: Tensor, index: Tensor, padding_mask: Optional[Tensor], per_head: bool) -> Tensor:
        """The strided weights ``[B, H, T, M]`` scattered back to the source
        columns: ``[H, B, T, S]`` with ``per_head``, else averaged over heads."""
        batch, heads, target_length, per_residue = weights.shape
        length = padding_mask.size(1) if padding_mask is not None else None
        if length is None:
            length = int(index.max()) + 1
        heads_per_residue = heads // self.stride
        columns = index.unsqueeze(1).expand(-1, heads_per_residue, -1, -1).reshape(batch, heads, 1, per_residue)
        source = weights.new_zeros(batch, heads, target_length, length)
        # clamped columns past a row's end carry weight 0, so adding them changes nothing
        source.scatter_add_(3, columns.expand(-1, -1, target_length, -1), weights)
        source = source.transpose(0, 1)
        return source if per_head else source.mean(dim=0)
