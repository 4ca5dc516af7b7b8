"""The decoder's causal self-attention with its key/value cache written in
place and never reordered, for beam search whose reorders keep every
hypothesis among its own source's rows (mdsfair's static-shape generator,
:mod:`mdsfair.generation.static_decoding`): the fast variant of
:class:`~mdsfair.modules.transformer_layers.DecoderSelfAttention`.

fairseq's ``MultiheadAttention`` keeps a decoder layer's past keys and
values as ``[rows * H, t, d]`` tensors: every generation step appends the
new step's key and value with ``torch.cat`` (a copy of the whole cache) and
every beam reorder ``index_select``s both (a second copy), so each step moves
the cache three times (two copies and the attention's read) and the copies
grow with the summary.

Here the cache is one buffer per layer, ``[2, B, H, capacity, d]`` (``B``
sources of ``beam`` rows; for one source and head, step ``s`` of every beam
row side by side), written once per step. Beam search moves a hypothesis
only among the ``beam`` rows of its own source, so a row's history at step
``s`` is one of those rows' keys at ``s``: the generator's
:class:`~mdsfair.generation.fast.static_beam_search.BeamHistory` records, for every row and step, which of its source's
rows (``0 .. beam - 1``) holds it, and a reorder permutes that small integer
table once for all layers instead of copying every layer's cache. The
hypotheses of a source share their first words, so at their first steps
every row reads the same key: once the history finds such settled steps,
each layer keeps that one key per step and moves the few later steps' keys
after them (``BeamHistory.settled``, on the CPU), and the cache holds about
as many keys as steps instead of ``beam`` times as many. The attention of
one step then reads each layer's cache once, as one batched product per
source and head (the cached keys of all beam rows are one matrix of the
buffer, a view):

* scores of every query against every key of its source's ``beam`` rows,
  ``q_j . k_{s,c}`` (``beam`` times the multiply-adds of one row's scores,
  but one read of the keys), plus -inf for the keys outside the row's own
  history (one additive table for all layers, ``BeamHistory.key_bias``);
* one softmax over those scores: the -inf scores weigh an exact zero, so
  it is the softmax over the row's own ``t`` steps;
* the values the same way: the weights times the cached values (every
  term but one per step an exact zero).

The three are one ``F.scaled_dot_product_attention`` call (PyTorch's fused
kernel: on a CPU it reads the keys and values once in blocks, and never
writes the scores out; it accumulates in float32 for half
precision, as fairseq's ``utils.softmax``).

This is the attention of fairseq's layer (same parameters, same state-dict
keys; ``tests/test_beam_cached_self_attention.py`` checks it against
``MultiheadAttention`` with reorders, in float64). Every other call (training,
a full forward, fairseq's generator, whose reorders may drop rows) runs
fairseq's attention unchanged. Only the decoder layers' self-attention
(``DecoderSelfAttention``) is replaced; cross-attentions and the attentions
of other models stay fairseq's.
"""

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from mdsfair.generation.fast import fast_variant_of
from mdsfair.generation.fast.static_beam_search import BeamHistory, FollowsStaticBeamSearch
from mdsfair.generation.fast.step_linear import rows_times_weight
from mdsfair.modules.parameter_cache import (
    derived_from_parameters,
    linear_bias,
    linear_parameters,
    scaled_query_key_value,
)
from mdsfair.modules.transformer_layers import DecoderSelfAttention


@fast_variant_of(DecoderSelfAttention)
class BeamCachedSelfAttention(DecoderSelfAttention, FollowsStaticBeamSearch):
    """fairseq's decoder self-attention (same parameters and state-dict keys)
    whose steps of a static beam search keep the key/value cache in place,
    following the search's :class:`BeamHistory` (see the module docstring)."""

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
        if (
            not self.in_static_step(incremental_state)
            or key_padding_mask is not None
            or attn_mask is not None
            or need_weights
            or need_head_weights
            or before_softmax
            or static_kv
            or self.bias_k is not None
            or self.add_zero_attn
            or not self.self_attention
        ):
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
        return self._beam_step(query, incremental_state, self.static_beam_search.history), None

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Nothing to move when the cache is in place (the generator reorders
        the :class:`BeamHistory`); fairseq's reorder otherwise."""
        if self.get_incremental_state(incremental_state, "beam_cache") is not None:
            return incremental_state
        return super().reorder_incremental_state(incremental_state, new_order)

    def _step_weights(self) -> Dict[str, Tensor]:
        """``[q_proj * scaling; k_proj; v_proj]`` as one product and the
        output projection, with their biases as rows and as columns (for
        :func:`~mdsfair.generation.fast.step_linear.rows_times_weight`), kept until a
        parameter changes."""

        def build():
            weight, bias = scaled_query_key_value(self)
            out_bias = linear_bias(self.out_proj)
            return {
                "qkv_weight": weight,
                "qkv_bias": bias,
                "qkv_bias_column": bias.unsqueeze(1),
                "out_weight": self.out_proj.weight,
                "out_bias": out_bias,
                "out_bias_column": out_bias.unsqueeze(1),
            }

        return derived_from_parameters(
            self, "_beam_step_weights", linear_parameters(self.q_proj, self.k_proj, self.v_proj, self.out_proj), build
        )

    def _cache(self, incremental_state, history: BeamHistory, like: Tensor) -> Tensor:
        """This layer's ``[2, B, H, capacity, d]`` key/value buffer, laid
        out as the history's :attr:`~BeamHistory.settled` steps say (one key
        per settled step, then ``beam`` per step), made (or grown) to hold
        the history's next step."""
        state = self.get_incremental_state(incremental_state, "beam_cache")
        buffer, settled = (None, 0) if state is None else (state["keys_values"], state["settled"])
        if buffer is not None and settled < history.settled:
            self._settle(buffer, settled, history)
        used = history.cached_keys(history.length)
        needed = used + history.group_size
        if buffer is None or buffer.size(3) < needed:
            capacity = max(history.capacity * history.group_size, needed)
            grown = like.new_empty(2, history.rows // history.group_size, self.num_heads, capacity, self.head_dim)
            if buffer is not None:
                grown[:, :, :, :used] = buffer[:, :, :, :used]
            buffer = grown
        if state is None or buffer is not state["keys_values"] or settled != history.settled:
            self.set_incremental_state(
                incremental_state, "beam_cache", {"keys_values": buffer, "settled": history.settled}
            )
        return buffer

    @staticmethod
    def _settle(buffer: Tensor, settled: int, history: BeamHistory) -> None:
        """Keep one key per source for the steps ``settled .. history.settled - 1``
        (the one that all its rows read) and move the later steps' keys
        after them, in place."""
        _, sources, heads, _, head_dim = buffer.shape
        beam, newly = history.group_size, history.settled - settled
        steps = history.length - settled
        live = buffer[:, :, :, settled : settled + steps * beam].view(2, sources, heads, steps, beam, head_dim)
        slots = history.settled_slots(settled, history.settled).view(1, sources, 1, newly, 1, 1)
        kept = live[:, :, :, :newly].gather(4, slots.expand(2, sources, heads, newly, 1, head_dim))
        later = live[:, :, :, newly:].clone()  # (the destination overlaps it)
        buffer[:, :, :, settled : history.settled] = kept.squeeze(4)
        buffer[:, :, :, history.settled : history.settled + later.size(3) * beam] = later.flatten(3, 4)

    def _beam_step(self, query: Tensor, incremental_state, history: BeamHistory) -> Tensor:
        """One generation step of ``query [1, rows, C]`` (see the module
        docstring); returns ``[1, rows, C]``."""
        if incremental_state is None or query.size(0) != 1:
            raise ValueError("the in-place self-attention cache runs one generation step at a time")
        _, rows, embed_dim = query.shape
        heads, head_dim, beam = self.num_heads, self.head_dim, history.group_size
        sources = rows // beam
        history.ensure_capacity(history.length + 1)
        weights = self._step_weights()
        # [rows, 3C]: row b * beam + c, feature (part, h, d); possibly a transposed view (step_linear)
        projected = rows_times_weight(
            query.view(rows, embed_dim), weights["qkv_weight"], weights["qkv_bias"], weights["qkv_bias_column"]
        )
        row_stride, feature_stride = projected.stride()
        buffer = self._cache(incremental_state, history, projected)
        capacity = buffer.size(3)
        first_key, keys = history.cached_keys(history.length), history.cached_keys(history.length + 1)

        def of_projected(shape, strides, first_feature):  # a view of projected's [b, ., c/j, ., d] entries
            return projected.as_strided(shape, strides, projected.storage_offset() + first_feature * feature_stride)

        # this step's keys and values into the buffer: [2, B, H, beam, d] after the cached keys
        per_head = capacity * head_dim
        step_slots = buffer.as_strided(
            (2, sources, heads, beam, head_dim),
            (buffer.stride(0), heads * per_head, per_head, head_dim, 1),
            buffer.storage_offset() + first_key * head_dim,
        )
        step_slots.copy_(
            of_projected(
                (2, sources, heads, beam, head_dim),
                (embed_dim * feature_stride, beam * row_stride, head_dim * feature_stride, row_stride, feature_stride),
                embed_dim,
            )
        )
        # the queries as [B, H, j, d] (a small copy: the fused attention reads contiguous head rows)
        queries = torch.empty((sources, heads, beam, head_dim), dtype=projected.dtype, device=projected.device)
        queries.copy_(
            of_projected(queries.shape, (beam * row_stride, head_dim * feature_stride, row_stride, feature_stride), 0)
        )
        # the cached keys of a source and head (every beam row's after the settled steps), views of the buffer
        cached_shape = (sources, heads, keys, head_dim)
        cached_strides = (heads * per_head, per_head, head_dim, 1)
        cached_keys = buffer.as_strided(cached_shape, cached_strides, buffer.storage_offset())
        cached_values = buffer.as_strided(cached_shape, cached_strides, buffer.storage_offset() + buffer.stride(0))
        # sum_s p_{j,s} v_{s,parent(j,s)}: softmax_{s,c}(q_j . k_{s,c} - inf outside j's history) times the
        # values, every query against all beam rows' keys (the queries are already scaled)
        mixed = F.scaled_dot_product_attention(
            queries, cached_keys, cached_values, attn_mask=history.key_bias(queries.dtype), scale=1.0
        )
        # rows b * beam + j, features h * d_h + d, for the output projection: [B, j, H, d] (a small copy)
        output = torch.empty((sources, beam, heads, head_dim), dtype=projected.dtype, device=projected.device)
        output.copy_(
            mixed.as_strided(
                output.shape,
                (mixed.stride(0), mixed.stride(2), mixed.stride(1), mixed.stride(3)),
                mixed.storage_offset(),
            )
        )
        return rows_times_weight(
            output.view(rows, embed_dim), weights["out_weight"], weights["out_bias"], weights["out_bias_column"]
        ).view(1, rows, embed_dim)
