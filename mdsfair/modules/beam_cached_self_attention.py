"""The decoder's causal self-attention with its key/value cache written in
place and never reordered, for beam search whose reorders keep every
hypothesis among its own source's rows (issue 35, mdsfair's static-shape
generator, :mod:`mdsfair.generation.static_decoding`).

fairseq's ``MultiheadAttention`` keeps a decoder layer's past keys and
values as ``[rows * H, t, d]`` tensors: every generation step appends the
new step's key and value with ``torch.cat`` (a copy of the whole cache) and
every beam reorder ``index_select``s both (a second copy), so each step moves
the cache three times (two copies and the attention's read) and the copies
grow with the summary.

Here the cache is one buffer per layer, ``[2, B, H, capacity, beam, d]``
(``B`` sources of ``beam`` rows; for one source and head, step ``s`` of
every beam row side by side), written once per step and never moved. Beam
search moves a hypothesis only among the ``beam`` rows of its own source, so
a row's history at step ``s`` is one of those rows' keys at ``s``:
:class:`BeamHistory` records, for every row and step, which of its source's
rows (``0 .. beam - 1``) holds it, and a reorder permutes that small integer
table once for all layers instead of copying every layer's cache. The
attention of one step then reads each layer's cache once, as one batched
product per source and head (the cached steps of all beam rows are one
``[t * beam, d]`` matrix of the buffer, a view):

* scores of every query against every key of its source's ``beam`` rows,
  ``q_j . k_{s,c}`` (``beam`` times the multiply-adds of one row's scores,
  but one read of the keys), plus -inf for the keys outside the row's own
  history (one additive ``[B, 1, j, t * beam]`` table for all layers,
  :meth:`BeamHistory.key_bias`);
* one softmax over those ``t * beam`` scores: the -inf scores weigh an exact
  zero, so it is the softmax over the row's own ``t`` steps, already spread
  over ``c``;
* the values the same way: the weights times the ``[t * beam, d]`` values
  (every term but one per step an exact zero).

The three are one ``F.scaled_dot_product_attention`` call (PyTorch's fused
kernel: on a CPU it reads the keys and values once in blocks, and never
writes the ``[j, t * beam]`` scores out; it accumulates in float32 for half
precision, as fairseq's ``utils.softmax``).

This is the attention of fairseq's layer (same parameters, same state-dict
keys; ``tests/test_beam_cached_self_attention.py`` checks it against
``MultiheadAttention`` with reorders, in float64). Every other call (training,
a full forward, fairseq's generator, whose reorders may drop rows) runs
fairseq's attention unchanged.
"""
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.modules.parameter_cache import (
    derived_from_parameters,
    linear_bias,
    linear_parameters,
    scaled_query_key_value,
)
from mdsfair.modules.step_linear import rows_times_weight

#: key of an incremental state whose reorders keep every row among its group of rows
BEAM_GROUPS = "mdsfair.beam_groups"
#: capacity (steps) of a new cache, or the generator's length limit if shorter; doubled when full
#: (a summary that ends early never holds memory for the limit)
INITIAL_CAPACITY = 128


def declare_beam_groups(incremental_state: Dict, beam_size: int, max_steps: Optional[int] = None) -> None:
    """Declare that every reorder of ``incremental_state`` keeps each row
    among its group of ``beam_size`` consecutive rows (``row // beam_size``
    unchanged), as beam search with a fixed batch does; ``max_steps``: the
    most decoder calls to expect (the caches start with at most that
    capacity and grow by doubling). mdsfair's decoders
    then keep their self-attention caches in place (:class:`BeamHistory`)."""
    if beam_size < 1:
        raise ValueError(f"beam size must be at least 1, got {beam_size}")
    incremental_state[BEAM_GROUPS] = (int(beam_size), max_steps)


class BeamHistory:
    """Which row of its source every row's history reads at every cached
    step, shared by all self-attention layers of one decoder.

    ``parents [rows, capacity]``: at step ``s`` row ``r`` reads the cache of
    row ``(r // beam) * beam + parents[r, s]``. Steps not yet reached hold the
    row's own slot (``r % beam``), which is where the row's next step is
    written. ``length``: the steps cached."""

    def __init__(self, rows: int, group_size: int, capacity: int, device):
        if rows % group_size:
            raise ValueError(f"{rows} decoder rows do not form groups of {group_size} (the beam size)")
        self.rows, self.group_size, self.capacity = rows, group_size, capacity
        self.parents = self._own_slots(capacity, device)
        self.length = 0
        self._key_bias: Dict[torch.dtype, Tensor] = {}
        self._bias_tables: Dict[torch.dtype, Tensor] = {}

    def _own_slots(self, steps: int, device) -> Tensor:
        return (torch.arange(self.rows, device=device) % self.group_size).unsqueeze(1).expand(
            self.rows, steps).contiguous()

    def reorder(self, new_order: Tensor) -> None:
        """Row ``r`` continues the hypothesis of row ``new_order[r]`` (of the
        same group): its history becomes that row's."""
        if new_order.numel() != self.rows:
            raise ValueError(f"a reorder of {new_order.numel()} rows for a decoder of {self.rows} rows: "
                             "beam groups keep the number of rows (declare_beam_groups)")
        if self.length:
            self.parents[:, : self.length] = self.parents[:, : self.length].index_select(0, new_order)
        self._key_bias = {}

    def ensure_capacity(self, steps: int) -> None:
        if steps > self.capacity:
            grown = max(steps, 2 * self.capacity)
            parents = self._own_slots(grown, self.parents.device)
            parents[:, : self.length] = self.parents[:, : self.length]
            self.parents, self.capacity = parents, grown
            self._key_bias = {}

    def advance(self) -> None:
        """One step more is cached (after every layer has written it)."""
        self.length += 1
        self._key_bias = {}

    def key_bias(self, dtype: torch.dtype) -> Tensor:
        """The additive attention mask of this step's keys (``length + 1``
        steps of every beam row), shared by all layers: ``[B, 1, j, t *
        beam]`` in ``dtype``, at ``(b, j, s * beam + c)`` 0 where beam row
        ``c``'s key at step ``s`` is in row ``j``'s history and -inf where
        it is not. Looked up in a ``[beam, beam]`` table (0 on the diagonal,
        -inf off it) at the parents of every row and step, once per step
        and dtype."""
        bias = self._key_bias.get(dtype)
        if bias is None:
            steps, beam = self.length + 1, self.group_size
            self.ensure_capacity(steps)
            table = self._bias_tables.get(dtype)
            if table is None:
                table = torch.full((beam, beam), float("-inf"), dtype=dtype, device=self.parents.device)
                table = self._bias_tables[dtype] = table.fill_diagonal_(0.0)
            # [rows * capacity, beam] -> [B, 1, j, capacity * beam], its first steps * beam keys (a view)
            looked_up = table.index_select(0, self.parents.view(-1))
            bias = self._key_bias[dtype] = looked_up.as_strided(
                (self.rows // beam, 1, beam, steps * beam), (beam * self.capacity * beam, 0, self.capacity * beam, 1))
        return bias


def beam_history(decoder, incremental_state: Optional[Dict], rows: int, device) -> Optional[BeamHistory]:
    """The decoder's :class:`BeamHistory` in ``incremental_state`` (made at
    its first step), or None where the in-place cache does not apply: no
    incremental state, beam groups not declared (:func:`declare_beam_groups`),
    training or autograd."""
    if incremental_state is None or BEAM_GROUPS not in incremental_state or decoder.training \
            or torch.is_grad_enabled():
        return None
    history = decoder.get_incremental_state(incremental_state, "beam_history")
    if history is None:
        group_size, max_steps = incremental_state[BEAM_GROUPS]
        history = BeamHistory(rows, group_size, min(max_steps or INITIAL_CAPACITY, INITIAL_CAPACITY), device)
        decoder.set_incremental_state(incremental_state, "beam_history", history)
    return history


def reorder_beam_history(decoder, incremental_state: Optional[Dict], new_order: Tensor) -> None:
    """Reorder the decoder's :class:`BeamHistory`, if it has one (its layers'
    caches stay where they are)."""
    history = None if incremental_state is None else decoder.get_incremental_state(incremental_state,
                                                                                   "beam_history")
    if history is not None:
        history.reorder(new_order)


class BeamCachedSelfAttention(MultiheadAttention):
    """fairseq's decoder self-attention (same parameters and state-dict keys)
    whose generation steps, given a :class:`BeamHistory`, keep the key/value
    cache in place (see the module docstring)."""

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor], *args,
                beam_history: Optional[BeamHistory] = None, **kwargs):
        if beam_history is None or self.bias_k is not None or self.add_zero_attn or not self.self_attention:
            return super().forward(query, key, value, *args, **kwargs)
        return self._beam_step(query, kwargs.get("incremental_state"), beam_history), None

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Nothing to move when the cache is in place (the decoder reorders
        its :class:`BeamHistory`); fairseq's reorder otherwise."""
        if self.get_incremental_state(incremental_state, "beam_cache") is not None:
            return incremental_state
        return super().reorder_incremental_state(incremental_state, new_order)

    def _step_weights(self) -> Dict[str, Tensor]:
        """``[q_proj * scaling; k_proj; v_proj]`` as one product and the
        output projection, with their biases as rows and as columns (for
        :func:`~mdsfair.modules.step_linear.rows_times_weight`), kept until a
        parameter changes."""
        def build():
            weight, bias = scaled_query_key_value(self)
            out_bias = linear_bias(self.out_proj)
            return {"qkv_weight": weight, "qkv_bias": bias, "qkv_bias_column": bias.unsqueeze(1),
                    "out_weight": self.out_proj.weight, "out_bias": out_bias,
                    "out_bias_column": out_bias.unsqueeze(1)}
        return derived_from_parameters(self, "_beam_step_weights", linear_parameters(
            self.q_proj, self.k_proj, self.v_proj, self.out_proj), build)

    def _cache(self, incremental_state, history: BeamHistory, like: Tensor) -> Tensor:
        """This layer's ``[2, B, H, capacity, beam, d]`` key/value buffer,
        made (or grown) to hold the history's next step."""
        state = self.get_incremental_state(incremental_state, "beam_cache")
        needed = history.length + 1
        buffer = None if state is None else state["keys_values"]
        if buffer is None or buffer.size(3) < needed:
            capacity = max(history.capacity, needed)
            beam = history.group_size
            grown = like.new_empty(2, history.rows // beam, self.num_heads, capacity, beam, self.head_dim)
            if buffer is not None:
                grown[:, :, :, : history.length] = buffer[:, :, :, : history.length]
            buffer = grown
            self.set_incremental_state(incremental_state, "beam_cache", {"keys_values": buffer})
        return buffer

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
        projected = rows_times_weight(query.view(rows, embed_dim), weights["qkv_weight"], weights["qkv_bias"],
                                      weights["qkv_bias_column"])
        row_stride, feature_stride = projected.stride()
        buffer = self._cache(incremental_state, history, projected)
        _, _, _, capacity, _, _ = buffer.shape
        step, steps = history.length, history.length + 1

        def of_projected(shape, strides, first_feature):  # a view of projected's [b, ., c/j, ., d] entries
            return projected.as_strided(shape, strides, projected.storage_offset() + first_feature * feature_stride)

        # this step's keys and values into the buffer: [2, B, H, beam, d] at step `step`
        per_head = capacity * beam * head_dim
        step_slots = buffer.as_strided((2, sources, heads, beam, head_dim), (buffer.stride(0), heads * per_head,
                                       per_head, head_dim, 1), buffer.storage_offset() + step * beam * head_dim)
        step_slots.copy_(of_projected(
            (2, sources, heads, beam, head_dim),
            (embed_dim * feature_stride, beam * row_stride, head_dim * feature_stride, row_stride, feature_stride),
            embed_dim))
        # the queries as [B, H, j, d] (a small copy: the fused attention reads contiguous head rows)
        queries = torch.empty((sources, heads, beam, head_dim), dtype=projected.dtype, device=projected.device)
        queries.copy_(of_projected(queries.shape, (beam * row_stride, head_dim * feature_stride, row_stride,
                                                   feature_stride), 0))
        # the cached steps of every beam row of a source and head: [B, H, t * beam, d], views of the buffer
        cached_shape = (sources, heads, steps * beam, head_dim)
        cached_strides = (heads * per_head, per_head, head_dim, 1)
        cached_keys = buffer.as_strided(cached_shape, cached_strides, buffer.storage_offset())
        cached_values = buffer.as_strided(cached_shape, cached_strides, buffer.storage_offset() + buffer.stride(0))
        # sum_s p_{j,s} v_{s,parent(j,s)}: softmax_{s,c}(q_j . k_{s,c} - inf outside j's history) times the
        # values, every query against all beam rows' keys (the queries are already scaled)
        mixed = F.scaled_dot_product_attention(queries, cached_keys, cached_values,
                                               attn_mask=history.key_bias(queries.dtype), scale=1.0)
        # rows b * beam + j, features h * d_h + d, for the output projection: [B, j, H, d] (a small copy)
        output = torch.empty((sources, beam, heads, head_dim), dtype=projected.dtype, device=projected.device)
        output.copy_(mixed.as_strided(output.shape, (mixed.stride(0), mixed.stride(2), mixed.stride(1),
                                                     mixed.stride(3)), mixed.storage_offset()))
        return rows_times_weight(output.view(rows, embed_dim), weights["out_weight"], weights["out_bias"],
                                 weights["out_bias_column"]).view(1, rows, embed_dim)
