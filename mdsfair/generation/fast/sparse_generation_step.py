"""The sparse cross-attention's generation step with as few operators as
its arithmetic needs: the fast variant of
:class:`~mdsfair.modules.sparse_cross_attention.SparseCrossAttention`.

One incremental step of beam search with ``approx`` selection computes the
same attention as the reference's gathered path (Manakul & Gales 2021,
Eq. 3, 6, 7; App. A.4, D): the sentence scores, the top-r sentences of every
row, their tokens back to back, the word-level attention over them with the
key and value projections folded into the query and the output. It differs
in how the work is laid out, never in what is computed:

* what depends only on the sources or on the rows is done once, in
  :class:`RowTables`, kept in the decoder's incremental state for as long as
  its :class:`~mdsfair.modules.hypothesis_rows.HypothesisRows` last (the
  whole generation) and shared by every layer, with the buffers a layer
  writes and the next overwrites;
* every projection is computed transposed (``W x^T``: for a few decoder
  rows the faster product on CPUs), so the per-head views are strides of
  one product; the rows of one source are grouped as a view (the rows
  blocked by source); the value bias is
  folded into the output's (``b^O + W^O b^V``: a head's weights sum to one);
* on the CPU the kept tokens of a source's rows are laid out to that
  source's widest row in the step (one host read per layer, which waits
  for nothing there), and the word-level attention runs as one batched
  product per source over its own width, so that no source multiplies the
  padding of another's longer sentences; on an accelerator every row is
  laid out to the bound known before the generation, for one product
  (:attr:`SparseGenerationStep.kept_width`);
* a product's kept tokens are gathered just before it reads them, into
  the same buffer for every product (where it finds them in cache), and
  the padding slots past a row's kept tokens enter as the bias of the
  score product (``baddbmm``), not as a pass of their own;
* the report (``approx_log``, ``sentence_mask``, ``selection``) is computed
  only if read (:class:`LazySentenceAttention`): a generator reads none of it.

On either backbone it is the reference's computation: projections without
biases (T5's) enter as zero biases, the word queries are scaled by the
module's ``scaling`` (1 under ``--attention-scaling none``) and the
approximator's sentence queries by its own (Eq. 8), and the word-level
softmax takes the reference's dtype
(:meth:`~mdsfair.modules.sparse_cross_attention.SparseCrossAttention.softmax_dtype`).

It runs only in the steps of a static beam search
(:class:`~mdsfair.generation.fast.static_beam_search.FollowsStaticBeamSearch`:
``--static-decoding`` keeps the rows blocked by source for the whole
generation); training, autograd, teacher forcing, fairseq's generator,
``random`` or shared selection, steps where the masked path pays
(:meth:`~SparseCrossAttention.gathering_pays`) and steps without the
kept-token bounds run the reference ``forward``. ``tests/test_sparse_bart.py``
compares this step with the reference (output, selection, approximator
report, alignment) in float64 and bfloat16, on BART's and T5's backbones.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import Tensor

from mdsfair.generation.fast import fast_variant_of
from mdsfair.generation.fast.static_beam_search import FollowsStaticBeamSearch
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.parameter_cache import derived_from_parameters, linear_bias, linear_parameters
from mdsfair.modules.sentence_approximator import elu_feature_map, model_free_log_probabilities
from mdsfair.modules.sentence_saliency import SentenceLayout
from mdsfair.modules.sentence_selection import selection_mask_from_indices
from mdsfair.modules.sparse_cross_attention import SentenceContext, SparseCrossAttention

#: the incremental-state entry that holds the row tables every layer of a decoder shares
ROW_TABLES_KEY = "sparse_generation_step.row_tables"


class RowTables:
    """Per-row tables a generation step reads, built once for one
    :class:`HypothesisRows` (under static decoding: once per generation)
    and shared by every layer: each row's sentence lengths and mask, the
    additive mask of the sentence scores, the kept-token slots. Keeping
    them takes the step's host work out of the layers."""

    def __init__(self, rows: HypothesisRows, layout: SentenceLayout):
        self.rows, self.layout = rows, layout
        self._built: Dict[str, object] = {}

    def get(self, name: str, build):
        table = self._built.get(name)
        if table is None:
            table = self._built[name] = build()
        return table

    def row_lengths(self) -> Tensor:
        """``[B', 1, S]`` the sentence lengths of every row's source."""
        return self.get("row_lengths", lambda: self.rows.lookup(self.layout.lengths).unsqueeze(1))

    def row_sentence_base(self, max_length: int) -> Tensor:
        """``[B', 1, 1]``: ``source * S * L``, the first token slot of the
        row's source in the flat ``[B * S * L]`` token tables."""
        num_slots = self.layout.lengths.size(1)
        return self.get(
            f"row_sentence_base_{max_length}",
            lambda: (self.rows.source_index * (num_slots * max_length)).view(-1, 1, 1),
        )

    def token_rows(self, num_kept: int) -> Tensor:
        """``[B * S * L + n]``: for token slot ``l`` of sentence ``s`` of
        source ``b``, its row ``position * B + b`` in the ``[N * B, C]`` view
        of the ``[N, B, C]`` encoder output; then ``n`` entries of row 0, so
        that a step's padding slots (past a row's last kept token, counted
        on from its last sentence's first slot) index the table without a
        clamp (their attention is masked)."""

        def build():
            num_sources = self.layout.token_index.size(0)
            sources = torch.arange(num_sources, device=self.layout.token_index.device).view(-1, 1, 1)
            table = torch.add(sources, self.layout.token_index, alpha=num_sources).view(-1)
            return torch.cat([table, table.new_zeros(num_kept)])

        return self.get(f"token_rows_{num_kept}", build)

    def sentence_padding(self) -> Tensor:
        """``[B, 1, S]`` True at the empty sentence slots of every source."""
        return self.get("sentence_padding", lambda: self.layout.sentence_mask.logical_not().unsqueeze(1))

    def has_empty_sentence_slots(self) -> bool:
        """Whether a source has fewer sentences than the ``S`` slots (read on
        the host once). Without empty slots the score bias is all zeros and
        the ranking has no slot to exclude: a step skips both passes over its
        ``[B * H, R, S]`` and ``[B, R, S]`` scores."""
        return self.get("has_empty_sentence_slots", lambda: bool(self.sentence_padding().any()))

    def sentence_score_bias(self, num_heads: int, dtype) -> Tensor:
        """``[B * H, 1, S]``: 0 at real sentences, -inf at empty slots (added
        to the sentence logits)."""

        def build():
            padding = self.sentence_padding()
            bias = torch.zeros(padding.shape, dtype=dtype, device=padding.device).masked_fill_(padding, float("-inf"))
            bsz, _, num_slots = bias.shape
            return bias.unsqueeze(1).expand(bsz, num_heads, 1, num_slots).reshape(bsz * num_heads, 1, num_slots)

        return self.get(f"sentence_score_bias_{num_heads}_{dtype}", build)

    def kept_slots(self, k: int, bounds: Tensor) -> int:
        """``n`` for ``k`` selected sentences: the most tokens any ``k``
        sentences of the sources hold (:func:`kept_token_bounds`, a host
        tensor), read once."""
        values = self._built.get("kept_token_bounds")
        if values is None:
            values = self._built["kept_token_bounds"] = bounds.tolist()
        return int(values[min(k, len(values)) - 1])

    def buffer(self, name: str, shape: Tuple[int, ...], dtype) -> Tensor:
        """An uninitialized ``shape`` tensor on the rows' device, kept for the
        next layers and steps: a step's intermediate that each layer writes
        and reads before the next layer overwrites it (without autograd)."""
        return self.get(
            f"buffer_{name}_{shape}_{dtype}",
            lambda: torch.empty(shape, dtype=dtype, device=self.rows.source_index.device),
        )

    def gather_buffer(self, rows: int, bound: int, like: Tensor) -> Tensor:
        """A ``[rows * bound, C]`` :meth:`buffer` of ``like``'s dtype, kept for
        the next products, layers and steps: one product's kept tokens'
        encoder states are gathered into its first rows
        (:meth:`SparseGenerationStep._generation_step`, without autograd;
        each product reads them before the next overwrites them)."""
        return self.buffer("gathered_states", (rows * bound, like.size(-1)), like.dtype)

    def flat_source_states(self, source_states: Tensor) -> Tensor:
        """The ``[N * B, C]`` view of the encoder output ``[N, B, C]`` (made
        contiguous once), kept with the rows: every layer and step reads the
        same encoder output."""
        key = f"flat_source_states_{source_states.data_ptr()}_{tuple(source_states.shape)}_{source_states.dtype}"
        return self.get(key, lambda: source_states.contiguous().view(-1, source_states.size(-1)))

    def padding_bias(self, k: int, dtype) -> Tensor:
        """``[k + 1]``: 0 for the ``k`` kept sentences, -inf after them,
        indexed by the sentence a kept-token slot falls in (``k`` at the
        padding slots past a row's last kept token)."""

        def build():
            bias = torch.zeros(k + 1, dtype=dtype, device=self.rows.source_index.device)
            bias[k] = float("-inf")
            return bias

        return self.get(f"padding_bias_{k}_{dtype}", build)

    def slots(self, num_kept: int) -> Tensor:
        """``[B', 1, n]``: 0 .. n - 1 in every row."""
        rows = self.rows.source_index.numel()
        return self.get(
            f"slots_{num_kept}",
            lambda: torch.arange(num_kept, device=self.rows.source_index.device).expand(rows, 1, num_kept).contiguous(),
        )


class LazySentenceAttention:
    """The reference's :class:`~mdsfair.modules.sparse_cross_attention.SentenceAttention`
    (the same fields, in the same order), whose ``approx_log``,
    ``sentence_mask`` and ``selection`` may be given as functions, called on
    first access: a generator reads none of them, so a step does not spend
    operators on them."""

    __slots__ = ("_exact", "_approx_log", "_sentence_mask", "_selection", "token_attention")

    def __init__(self, exact, approx_log, sentence_mask, selection, token_attention=None):
        self._exact, self._approx_log, self._sentence_mask = exact, approx_log, sentence_mask
        self._selection, self.token_attention = selection, token_attention

    @staticmethod
    def _value(value):
        return value() if callable(value) else value

    @property
    def exact(self) -> Optional[Tensor]:
        return self._exact

    @property
    def approx_log(self) -> Optional[Tensor]:
        self._approx_log = self._value(self._approx_log)
        return self._approx_log

    @property
    def sentence_mask(self) -> Tensor:
        self._sentence_mask = self._value(self._sentence_mask)
        return self._sentence_mask

    @property
    def selection(self) -> Optional[Tensor]:
        self._selection = self._value(self._selection)
        return self._selection

    def __iter__(self):
        return iter((self.exact, self.approx_log, self.sentence_mask, self.selection, self.token_attention))


# activation checkpointing flattens a layer's outputs into tensors (torch's pytree): this
# container is a node of that tree, as the reference's NamedTuple is
pytree.register_pytree_node(
    LazySentenceAttention,
    lambda attention: (list(attention), None),
    lambda values, _: LazySentenceAttention(*values),
    serialized_type_name="mdsfair.generation.fast.sparse_generation_step.LazySentenceAttention",
)


def softmax_in(logits: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Softmax over the last dimension computed in ``dtype`` (float32: as
    fairseq's ``utils.softmax``), without a cast where the logits already are."""
    if logits.dtype == dtype:
        return F.softmax(logits, dim=-1)
    return F.softmax(logits, dim=-1, dtype=dtype)


def rows_in(tensor: Tensor, first: int, count: int, num_rows: int) -> Tensor:
    """Rows ``first .. first + count`` of ``tensor`` (all of them without a
    slicing operator)."""
    return tensor if count == num_rows else tensor[first : first + count]


def group_slots(tensor: Tensor, first: int, count: int, num_rows: int, width: int, num_kept: int) -> Tensor:
    """Rows ``first .. first + count`` of ``tensor`` (:func:`rows_in`) and
    their first ``width`` of ``num_kept`` kept-token slots (the last
    dimension; all of them without a slicing operator)."""
    rows = rows_in(tensor, first, count, num_rows)
    return rows if width == num_kept else rows[..., :width]


def row_tables(incremental_state: Dict, context: SentenceContext) -> RowTables:
    """The :class:`RowTables` of ``context.rows``, kept in the decoder's
    incremental state (shared by its layers) until the rows change."""
    tables = incremental_state.get(ROW_TABLES_KEY)
    if tables is None or tables.rows is not context.rows:
        tables = incremental_state[ROW_TABLES_KEY] = RowTables(context.rows, context.layout)
    return tables


@fast_variant_of(SparseCrossAttention)
class SparseGenerationStep(SparseCrossAttention, FollowsStaticBeamSearch):
    """:class:`SparseCrossAttention` whose ``approx`` steps of a static beam
    search run :meth:`_generation_step` (see the module docstring); every
    other call runs the reference."""

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        key_padding_mask: Optional[Tensor],
        sentence_context: SentenceContext,
        incremental_state=None,
        compute_saliency: bool = False,
        need_weights: bool = False,
        weight_heads: Optional[int] = None,
        mix_draw: Optional[float] = None,
    ):
        if incremental_state is not None and query.size(0) == 1 and not compute_saliency:
            num_kept = self._kept_slots(sentence_context, incremental_state, key.size(0))
            if num_kept is not None:
                return self._generation_step(
                    query, key, sentence_context, incremental_state, num_kept, need_weights, weight_heads
                )
        return super().forward(
            query,
            key,
            key_padding_mask,
            sentence_context,
            incremental_state=incremental_state,
            compute_saliency=compute_saliency,
            need_weights=need_weights,
            weight_heads=weight_heads,
            mix_draw=mix_draw,
        )

    #: how a step sizes its kept-token layout: "auto" reads every source's widest row in the step on
    #: the CPU (where reading a value costs no device synchronization) and pads to the sources' bound
    #: on an accelerator; "bound" always pads to the bound; "step" always reads the widest rows
    kept_width = "auto"

    def sizes_kept_tokens_per_step(self, ends: Tensor) -> bool:
        """Whether this step lays out every source's rows to the most tokens
        any of them keeps (one host read of ``ends``) instead of the bound known before the
        generation (:func:`~mdsfair.modules.sentence_selection.kept_token_bounds`:
        the ``k`` longest sentences' tokens, several times what the rows keep
        where sentence lengths are unequal). Reading the value stalls an
        accelerator's queue, not the CPU."""
        if self.kept_width == "auto":
            return ends.device.type == "cpu"
        return self.kept_width == "step"

    def _kept_slots(self, context: SentenceContext, incremental_state, src_len: int) -> Optional[int]:
        """The kept-token slots ``n`` of a step :meth:`_generation_step` can
        take, or None where the reference runs: it needs a step of a static
        beam search (:meth:`in_static_step`: no training, no autograd),
        ``approx`` selection not shared across beams, the rows grouped by
        source as a view (``rows.blocked`` or one row per source), ``n``
        known on the host (``kept_token_bounds``), and gathering to pay
        (:meth:`gathering_pays`) or be asked for."""
        rows = context.rows
        if (
            not self.in_static_step(incremental_state)
            or self.top_r < 1
            or self.share_selection_across_beams
            or self.effective_selection() != "approx"
            or context.kept_token_bounds is None
            or not (rows.blocked or rows.is_identity)
            or self.generation_path == "mask"
        ):
            return None
        k = min(self.top_r, context.layout.lengths.size(1))
        num_kept = row_tables(incremental_state, context).kept_slots(k, context.kept_token_bounds)
        if self.generation_path == "auto" and num_kept * self.num_heads > 2 * src_len:
            return None
        return num_kept

    def _source_sentence_keys_by_head(self, key: Tensor, context: SentenceContext, incremental_state) -> Tensor:
        """The reference's per-source sentence keys ``[B, H, S, d_h]`` as one
        step multiplies them: ``[B * H, d_h, S]``, kept beside them."""

        def compute():
            keys = self._source_sentence_keys(key, context, incremental_state)
            bsz, heads, num_slots, head_dim = keys.shape
            return keys.reshape(bsz * heads, num_slots, head_dim).transpose(1, 2)

        return self._cached(incremental_state, "sentence_keys_by_head", compute)

    def _generation_weights(self) -> Dict[str, Tensor]:
        """The projections as one generation step multiplies them, kept until
        a parameter changes (in place: its version; moved or cast: its
        storage). The step computes every projection transposed (weight
        times the rows' states, ``W x^T``: for a few decoder rows the faster
        product on CPUs, and the per-head views it needs come out of it
        without a copy): the word queries stacked with the sentence queries
        of Eq. 8 (model-based), each scaled by its own attention's scaling
        (the word queries by ``scaling``, the sentence queries by the
        approximator's), with their bias as a column (zeros where a
        projection has none); the key
        and value projections per head ``[H, d_h, C]``; the output
        projection with the value bias folded into its bias
        (``b^O + W^O b^V``: the attention weights of a head sum to one, so
        ``sum_j p_j (W^V x_j + b^V) = W^V sum_j p_j x_j + b^V``)."""
        heads, head_dim = self.num_heads, self.head_dim
        projections = [self.q_proj, self.k_proj, self.v_proj, self.out_proj]
        if self.sentence_attention is not None:
            projections.append(self.sentence_attention.sentence_query_proj)

        def build() -> Dict[str, Tensor]:
            query_weight, query_bias = self.q_proj.weight * self.scaling, linear_bias(self.q_proj) * self.scaling
            if self.sentence_attention is not None:
                sentence, sentence_scaling = (
                    self.sentence_attention.sentence_query_proj,
                    self.sentence_attention.scaling,
                )
                query_weight = torch.cat([query_weight, sentence.weight * sentence_scaling])
                query_bias = torch.cat([query_bias, linear_bias(sentence) * sentence_scaling])
            source_dim = self.k_proj.weight.size(1)
            out_weight = self.out_proj.weight
            return {
                "query_weight": query_weight.contiguous(),
                "query_bias": query_bias.unsqueeze(1),
                "key_heads": self.k_proj.weight.view(heads, head_dim, source_dim),
                "value_heads": self.v_proj.weight.view(heads, head_dim, source_dim),
                "out_weight": out_weight,
                "out_bias": (linear_bias(self.out_proj) + out_weight @ linear_bias(self.v_proj)).unsqueeze(1),
            }

        return derived_from_parameters(self, "_generation_weight_cache", linear_parameters(*projections), build)

    def _generation_step(
        self,
        query: Tensor,
        source_states: Tensor,
        context: SentenceContext,
        incremental_state,
        num_kept: int,
        need_weights: bool = False,
        weight_heads: Optional[int] = None,
    ) -> Tuple[Tensor, LazySentenceAttention]:
        """One incremental step with ``approx`` selection, on the gathered
        path (Eq. 3, 6-7; App. D), as few operators as the arithmetic needs:
        the same attention as :meth:`_approximate`, top-r and
        :meth:`_gathered_attention` compute, with the work that depends only
        on the sources or the rows done once (the sentence keys, laid out
        for one batched product per source; the row tables and buffers of
        :class:`RowTables`), every projection computed transposed so that
        the per-head views are strides of its output, the rows grouped by
        source as a view, and the report (``approx_log``, ``selection``)
        left to be computed if read."""
        rows, tables, layout = context.rows, row_tables(incremental_state, context), context.layout
        num_sources, num_slots, max_length = layout.token_index.shape
        num_rows = rows.source_index.numel()
        per_source = num_rows // num_sources
        heads, head_dim, embed_dim = self.num_heads, self.head_dim, self.embed_dim
        k = min(self.top_r, num_slots)
        weights = self._generation_weights()
        # [q_proj; W^Q] x^T: [C or 2C, B'], the head h, dimension d of row b' at (h * d_h + d, b')
        projected = torch.addmm(weights["query_bias"], weights["query_weight"], query.view(num_rows, embed_dim).t())
        # the word queries as [H, B', d_h], and the model-based sentence queries' rows of one source
        # grouped per head, [B, H, R, d_h] (copied into a buffer: one batched product per source and head)
        word_queries = projected.as_strided((heads, num_rows, head_dim), (head_dim * num_rows, 1, num_rows))

        def grouped_by_source(first_feature: int) -> Tensor:  # -> [B * H, R, d_h]
            grouped = tables.buffer("grouped_queries", (num_sources, heads, per_source, head_dim), projected.dtype)
            grouped.copy_(
                projected.as_strided(
                    grouped.shape,
                    (per_source, head_dim * num_rows, 1, num_rows),
                    projected.storage_offset() + first_feature * num_rows,
                )
            )
            return grouped.view(num_sources * heads, per_source, head_dim)

        # the per-source sentence keys [B, H, S, d_h] of the general path's cache, as [B * H, d_h, S]
        keys = self._source_sentence_keys_by_head(source_states, context, incremental_state)
        # the scores of empty sentence slots are masked only where a source has some (the per-step work over
        # all S sentences is then Eq. 7's product, its softmax, the mean over heads and top-r, nothing more)
        empty_slots = tables.has_empty_sentence_slots()
        if self.sentence_attention is not None:
            sentence_logits = torch.bmm(grouped_by_source(embed_dim), keys)
            if empty_slots:
                sentence_logits.add_(tables.sentence_score_bias(heads, keys.dtype))
            probs = softmax_in(sentence_logits)  # [B * H, R, S], alpha~ of Eq. 7
            # summed over heads: H times the mean of App. A.4, the same ranking
            ranking = probs.view(num_sources, heads, per_source, num_slots).sum(dim=1)

            def approx_log():  # (a closure over sentence_logits: the word logits below have their own name)
                log_probs = F.log_softmax(sentence_logits, dim=-1, dtype=torch.float32)
                return (
                    log_probs.view(num_sources, heads, per_source, num_slots)
                    .transpose(1, 2)
                    .reshape(num_rows, heads, 1, num_slots)
                )
        else:
            phi_queries = grouped_by_source(0)
            if phi_queries.dtype != torch.float32:
                phi_queries = phi_queries.float()
            raw = torch.bmm(elu_feature_map(phi_queries), keys)  # Eq. 19
            raw = raw.view(num_sources, heads, per_source, num_slots)
            if empty_slots:
                raw.masked_fill_(tables.sentence_padding().unsqueeze(1), 0.0)
            ranking = raw.sum(dim=1)  # H times the mean over heads: the same ranking

            def approx_log():
                per_row = raw.transpose(1, 2).reshape(num_rows, heads, 1, num_slots)
                return model_free_log_probabilities(per_row, rows.lookup(layout.sentence_mask))

        # Eq. 6: the top-r real sentences of every row, [B', 1, k]
        if empty_slots:
            ranking.masked_fill_(tables.sentence_padding(), float("-inf"))
        indices = ranking.topk(k, dim=-1).indices.view(num_rows, 1, k)

        # their tokens back to back (kept_token_layout), n slots per row: slot p holds the selected sentence
        # whose running token count first exceeds p, at offset p - (the tokens of the sentences before it)
        lengths = tables.row_lengths().gather(2, indices)  # 0 for a slot past a source's sentences
        ends = lengths.cumsum(dim=2)
        bound = num_kept  # the most tokens any k sentences of the sources hold
        source_widths = None
        if self.sizes_kept_tokens_per_step(ends):
            source_widths = ends[:, 0, -1].view(num_sources, per_source).amax(dim=1).clamp_(min=1)
            widths = source_widths.tolist()
            num_kept = max(widths)
        slots = tables.slots(num_kept)  # [B', 1, n]
        which = torch.searchsorted(ends, slots, right=True)  # k at the padding slots past a row's kept tokens
        padding_bias = torch.take(tables.padding_bias(k, source_states.dtype), which)  # [B', 1, n]: 0 or -inf
        which = which.clamp_(max=k - 1)
        # the sentence's first slot in the [B * S * L] token tables, less the tokens kept before it
        first = torch.add(tables.row_sentence_base(max_length), indices, alpha=max_length).add_(lengths).sub_(ends)
        slot = first.gather(2, which).add_(slots).view(-1)  # padding slots may run past a sentence: see token_rows
        # the row of every kept token in the [N * B, C] view of the encoder output, from a per-source table
        flat_rows = tables.token_rows(bound).index_select(0, slot).view(num_rows, 1, num_kept)
        # the rows of one source laid out to that source's widest row where the widths differ and the step
        # reads them (fewer padding slots to gather and multiply); otherwise every row to the widest
        if source_widths is None or need_weights or min(widths) == num_kept:
            groups = [(0, num_rows, num_kept)]
        else:
            groups = [(source * per_source, per_source, width) for source, width in enumerate(widths)]
        source_rows = tables.flat_source_states(source_states)
        # one buffer that every group, layer and step reuses (a fresh [B' * n, C] tensor per layer and step
        # costs more than the gather on the CPU: the allocator maps and faults in its pages anew); a group's
        # kept tokens are gathered into it just before its products read them, while they are in cache
        gathered = tables.gather_buffer(num_rows, bound, source_states)

        # Eq. 3 with the key and value projections folded in (see _gathered_attention): W^K_h^T q_h, [H, B', C]
        source_queries = torch.bmm(word_queries, weights["key_heads"])
        row_queries = source_queries.as_strided(
            (num_rows, heads, embed_dim), (embed_dim, num_rows * embed_dim, 1), source_queries.storage_offset()
        )
        mixed = tables.buffer("mixed", (num_rows, heads, embed_dim), source_states.dtype)  # [B', H, C]
        word_softmax_dtype = self.softmax_dtype(source_states.dtype)
        for first_row, count, width in groups:
            group_rows = group_slots(flat_rows, first_row, count, num_rows, width, num_kept)
            states = gathered[: count * width]
            torch.index_select(source_rows, 0, group_rows.reshape(-1), out=states)
            states = states.view(count, width, embed_dim)
            # the padding slots' logits -inf: the bias added by the product (baddbmm), not a pass of its own
            logits = torch.baddbmm(
                group_slots(padding_bias, first_row, count, num_rows, width, num_kept),
                rows_in(row_queries, first_row, count, num_rows),
                states.transpose(1, 2),
            )
            probs = softmax_in(logits, word_softmax_dtype)  # [rows, H, width]
            weights_of_states = probs if probs.dtype == states.dtype else probs.to(states.dtype)
            torch.bmm(weights_of_states, states, out=rows_in(mixed, first_row, count, num_rows))  # sum_j p_hj x_j
        token_attention = None
        if need_weights:  # the alignment layer (one group): the attention over the source, averaged over heads
            token_slot = slot.clamp(max=layout.token_index.numel() - 1)
            positions = layout.token_index.view(-1).index_select(0, token_slot).view(num_rows, 1, num_kept)
            token_attention = probs.new_zeros(num_rows, 1, source_states.size(0)).scatter_add_(
                2, positions, probs[:, :weight_heads].mean(dim=1, keepdim=True)
            )
        # W^V_h per head, transposed: [H, d_h, C] @ [H, C, B'] -> [H, d_h, B'], i.e. [C, B'] with the heads' rows
        per_head = torch.bmm(
            weights["value_heads"],
            mixed.as_strided((heads, embed_dim, num_rows), (embed_dim, 1, heads * embed_dim), mixed.storage_offset()),
        )
        output = torch.mm(weights["out_weight"], per_head.view(embed_dim, num_rows)).add_(weights["out_bias"])

        def sentence_mask():
            return rows.lookup(layout.sentence_mask)

        def selection():
            flat_indices = indices.view(num_rows, k)
            valid = sentence_mask().gather(1, flat_indices)
            return selection_mask_from_indices(flat_indices.unsqueeze(1), valid.unsqueeze(1), num_slots)

        # [C, B'] -> [1, B', C] (a view)
        return output.as_strided((1, num_rows, embed_dim), (num_rows * embed_dim, 1, num_rows)), LazySentenceAttention(
            None, approx_log, sentence_mask, selection, token_attention
        )
