"""Encoder-decoder attention restricted to the top-r salient sentences.

Manakul & Gales (2021), Sec. 3-4: at every decoder step (and layer) the
source sentences are ranked by a sentence saliency averaged over heads
(App. A.4), the top ``r`` are kept (Eq. 6) and the word-level attention runs
over their tokens only (Eq. 3)::

    I^r_m  = [(i, j) s.t. i in top-r(alpha^s_{m,i})]          (Eq. 6)
    A_hat  = softmax(q_m K_hat^T) V_hat,  K_hat, V_hat on I^r_m (Eq. 3)

The saliency used for the ranking is chosen by ``selection``:

* ``ideal``: the exact alpha^s (Eq. 4; needs the full attention);
* ``approx``: the approximator's alpha~^s (Eq. 7), or App. D's model-free
  score ``phi(q_m) . sum_j phi(k_{i,j})`` (Eq. 19) with Z_m dropped: the
  unnormalized scores are averaged over heads before top-r, as App. D
  (Z_m "can be dropped") with App. A.4 (heads averaged before top-r) read
  together, and as the authors' model-free decoding
  (``phi_prod.mean(dim=[0, 1])``);
* ``random``: random sentences (the paper's random-selection baseline);
* ``mix``: scheduled sampling (Sec. 4.3) in training: exact with probability
  ``max(0, 1 - update / mix_decay_updates)``, else approx, decided by one
  draw per forward pass that every layer shares (``mix_draw``; the
  authors' code draws once per training example, their batch being 1);
  approx in evaluation and generation.

Two code paths compute the same attention:

* teacher forcing (training, scoring): the logits of the unselected
  sentences' tokens are set to -inf before the softmax;
* incremental generation with ``approx``/``random`` selection: the encoder
  states of the selected sentences' tokens are gathered (back to back,
  :func:`kept_token_layout`), so each step costs O(r * N2) instead of O(N)
  (N2: mean sentence length), and the source is never projected
  (:meth:`SparseCrossAttention._gathered_attention`); at a step where the
  kept tokens are many against N, the masked path above is cheaper and is
  used instead (:meth:`SparseCrossAttention.gathering_pays`).

What generation caches (the sentence keys; the word-level keys/values
``[B, H, N, d_h]`` once the full or masked path needs them; nothing of the
source for the gathered path, which reads the encoder output itself) is kept
once per source example, never expanded or reordered per beam hypothesis;
every decoder row finds its source through
:class:`~mdsfair.modules.hypothesis_rows.HypothesisRows`. The gathered path
reads each row's kept encoder states from ``[N, B, C]`` with one
``index_select`` of whole C-wide rows; the full and masked paths run one
batched product per source, as do the sentence-level scores. With the
model-based approximator the word queries and the sentence queries of Eq. 8
come from one stacked projection.
"""
from typing import Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.modules.heads import split_heads
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.parameter_cache import derived_from_parameters, linear_bias, linear_parameters
from mdsfair.modules.sentence_approximator import (
    SentenceLevelAttention,
    elu_feature_map,
    model_free_log_probabilities,
    model_free_sentence_keys,
    model_free_sentence_scores,
    sentence_attention_log_scores,
)
from mdsfair.modules.sentence_saliency import SentenceLayout, sentence_saliency
from mdsfair.modules.step_linear import transposed

SENTENCE_SELECTIONS = ("ideal", "approx", "random", "mix")
GENERATION_PATHS = ("auto", "gather", "mask")
APPROXIMATORS = ("model-based", "model-free")


class SentenceContext(NamedTuple):
    """Sentence structure of the sources, kept once per source example.

    ``src_sent_ids [B, N]``; ``layout``: token tables of each sentence;
    ``sentence_states [B, S, C]`` from the sentence encoder (None for the
    model-free approximator); ``rows``: the source of every decoder row
    (``B'`` rows, e.g. ``B * beam`` hypotheses, possibly reordered and
    compacted by beam search); ``kept_token_bounds``: a host tensor, see
    :func:`kept_token_bounds` (None: each step sizes its layout exactly);
    ``row_tables``: what generation steps derive from ``rows`` and the
    layout, kept for as long as the rows do (:class:`RowTables`; None:
    nothing kept).
    """

    src_sent_ids: Tensor
    layout: SentenceLayout
    sentence_states: Optional[Tensor]
    rows: HypothesisRows
    kept_token_bounds: Optional[Tensor] = None
    row_tables: Optional["RowTables"] = None


class RowTables:
    """Per-row tables a generation step reads, built once for one
    :class:`HypothesisRows` (under static decoding: once per generation;
    with fairseq's generator: once per reordering) and shared by every
    layer: each row's sentence lengths and mask, the additive mask of the
    sentence scores, the kept-token slots. Keeping them takes the step's
    host work out of the layers."""

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
        return self.get(f"row_sentence_base_{max_length}", lambda: (
            self.rows.source_index * (num_slots * max_length)).view(-1, 1, 1))

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
        return self.get(f"buffer_{name}_{shape}_{dtype}", lambda: torch.empty(
            shape, dtype=dtype, device=self.rows.source_index.device))

    def gather_buffer(self, rows: int, num_kept: int, like: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """A ``[rows * n, C]`` :meth:`buffer` of ``like``'s dtype, kept for
        the next layers and steps, and its views ``[rows, n, C]`` and
        ``[rows, C, n]``: the kept tokens' encoder states are gathered into
        it (:meth:`SparseCrossAttention._generation_step`, without autograd;
        each layer reads them before the next overwrites them)."""
        def build():
            flat = self.buffer("gathered_states", (rows * num_kept, like.size(-1)), like.dtype)
            per_row = flat.view(rows, num_kept, like.size(-1))
            return flat, per_row, per_row.transpose(1, 2)
        return self.get(f"gather_buffer_{rows}_{num_kept}_{like.size(-1)}_{like.dtype}", build)

    def flat_source_states(self, source_states: Tensor) -> Tensor:
        """The ``[N * B, C]`` view of the encoder output ``[N, B, C]`` (made
        contiguous once), kept with the rows: every layer and step reads the
        same encoder output."""
        key = f"flat_source_states_{source_states.data_ptr()}_{tuple(source_states.shape)}_{source_states.dtype}"
        return self.get(key, lambda: source_states.contiguous().view(-1, source_states.size(-1)))

    def slots(self, num_kept: int) -> Tensor:
        """``[B', 1, n]``: 0 .. n - 1 in every row."""
        rows = self.rows.source_index.numel()
        return self.get(f"slots_{num_kept}", lambda: torch.arange(
            num_kept, device=self.rows.source_index.device).expand(rows, 1, num_kept).contiguous())


class SentenceAttention:
    """What one layer's sparse cross-attention reports for the losses.

    ``exact``: ``[B', H, T, S]`` alpha^s of Eq. 4 (None where not computed);
    ``approx_log``: ``[B', H, T, S]`` log alpha~^s (Eq. 7; model-free: Eq. 19
    normalized per head; None without approximator or where not computed);
    ``sentence_mask``: ``[B', S]``;
    ``selection``: ``[B', T, S]`` bool, the kept sentences (None: all);
    ``token_attention``: ``[B', T, N]`` the word-level attention actually
    used (zero off the selected sentences), averaged over the requested
    heads (None unless asked for). ``B'``: decoder rows.

    A generation step reports ``approx_log``, ``sentence_mask`` and
    ``selection`` as functions, called on first access: fairseq's
    generator reads none of them, so a step does not spend operators on
    them (``tests/test_operator_counts.py``).
    """

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
# container is a node of that tree, as the NamedTuple it replaced was
pytree.register_pytree_node(
    SentenceAttention,
    lambda attention: (list(attention), None),
    lambda values, _: SentenceAttention(*values),
    serialized_type_name="mdsfair.modules.sparse_cross_attention.SentenceAttention",
)


def select_top_r_sentences(scores: Tensor, sentence_mask: Tensor, top_r: int) -> Tuple[Tensor, Tensor]:
    """Eq. 6: the ``top_r`` highest-scoring real sentences per query.

    Args:
        scores: ``[B, T, S]`` sentence scores (already averaged over heads).
        sentence_mask: ``[B, S]`` True for real sentences.
        top_r: number of sentences to keep.

    Returns:
        ``indices [B, T, k]`` and ``valid [B, T, k]`` with ``k = min(top_r, S)``;
        ``valid`` is False where an example has fewer than ``k`` sentences.
    """
    if top_r < 1:
        raise ValueError(f"top_r must be >= 1, got {top_r}")
    bsz, tgt_len, num_slots = scores.shape
    k = min(top_r, num_slots)
    masked = scores.float().masked_fill(~sentence_mask[:, None, :], float("-inf"))
    _, indices = masked.topk(k, dim=-1)
    valid = sentence_mask.gather(1, indices.view(bsz, -1)).view(bsz, tgt_len, k)
    return indices, valid


def selection_mask_from_indices(indices: Tensor, valid: Tensor, num_slots: int) -> Tensor:
    """``[B, T, k]`` sentence indices -> ``[B, T, S]`` bool mask."""
    mask = torch.zeros(*indices.shape[:2], num_slots, dtype=torch.bool, device=indices.device)
    return mask.scatter(2, indices, valid)


class KeptTokens(NamedTuple):
    """The tokens of every row's selected sentences, back to back.

    ``positions [B', T, n]``: source positions; ``valid [B', T, n]``: False
    at the padding after a row's last kept token; ``flat_rows [B', T, n]``:
    the rows of the ``[N * B, C]`` view of the ``[N, B, C]`` encoder output
    (``position * B + source``). ``n`` is the most tokens any row keeps
    (not ``r`` times the longest sentence), or a bound of it known on the
    host (:func:`kept_token_bounds`)."""

    positions: Tensor
    valid: Tensor
    flat_rows: Tensor


def kept_token_bounds(sentence_lengths: Tensor) -> Tensor:
    """``[S]`` on the host: entry ``k - 1`` is the most tokens that ``k``
    sentences of any source hold (its ``k`` longest), from
    ``sentence_lengths [B, S]``. Read once per generation (one host-device
    synchronization), it sizes every step's kept-token layout on a GPU
    without reading the step's selection back (:func:`kept_token_layout`)."""
    longest_first = sentence_lengths.sort(dim=1, descending=True).values
    return longest_first.cumsum(dim=1).amax(dim=0).clamp(min=1).cpu()


def kept_token_layout(indices: Tensor, valid: Tensor, context: SentenceContext) -> KeptTokens:
    """The kept tokens of ``indices [B', T, k]`` (the selected sentences,
    ``valid`` False for a source with fewer than ``k``), vectorized: slot
    ``p`` of a row belongs to the selected sentence whose running token
    count first exceeds ``p`` (one ``searchsorted``).

    ``n`` is the most tokens any row keeps at this step: read from the
    device, which on a GPU waits for the step's work (one synchronization
    per layer and step; the H100 profile of examples/sparse_decoder/README.md).
    With ``context.kept_token_bounds`` (set by the encoder on a GPU in
    evaluation) ``n`` is instead the most tokens any ``k`` sentences of the
    sources hold, known on the host: the extra slots are padding
    (``valid`` False), and the attention is the same."""
    rows, layout = context.rows, context.layout
    num_sources, num_slots, max_length = layout.token_index.shape
    bsz, tgt_len, k = indices.shape
    sentence_rows = (rows.source_index.view(-1, 1, 1) * num_slots + indices).view(-1, k)  # [B'T, k]
    lengths = layout.lengths.view(-1).index_select(0, sentence_rows.view(-1)).view(-1, k) * valid.view(-1, k)
    ends = lengths.cumsum(dim=1)
    if context.kept_token_bounds is not None:
        num_kept = int(context.kept_token_bounds[min(k, context.kept_token_bounds.numel()) - 1])
    else:
        num_kept = max(int(ends[:, -1].max()), 1)
    slots = torch.arange(num_kept, device=indices.device).expand(ends.size(0), num_kept).contiguous()
    which = torch.searchsorted(ends, slots, right=True)  # [B'T, n]: the selected sentence of every slot
    kept_valid = which < k
    which = which.clamp(max=k - 1)
    offset = (slots - (ends - lengths).gather(1, which)).clamp(max=max_length - 1)
    flat_token = sentence_rows.gather(1, which) * max_length + offset
    positions = layout.token_index.view(-1).index_select(0, flat_token.view(-1)).view(bsz, tgt_len, num_kept)
    flat_rows = positions * num_sources + rows.source_index.view(-1, 1, 1)
    return KeptTokens(positions, kept_valid.view(bsz, tgt_len, num_kept), flat_rows)


def average_over_hypotheses(scores: Tensor, rows: HypothesisRows) -> Tensor:
    """Mean of ``scores [B', ...]`` over the rows of the same source example
    (the authors' selection shared across beams), broadcast back to ``B'``."""
    if rows.is_identity:
        return scores
    totals = scores.new_zeros(rows.num_sources, *scores.shape[1:]).index_add_(0, rows.source_index, scores)
    counts = torch.bincount(rows.source_index, minlength=rows.num_sources).clamp(min=1).to(scores.dtype)
    shape = (-1,) + (1,) * (scores.dim() - 1)
    return (totals / counts.view(shape)).index_select(0, rows.source_index)


def softmax_in_float32(logits: Tensor) -> Tensor:
    """Softmax over the last dimension computed in float32 (as fairseq's
    ``utils.softmax``), without a cast where the logits already are."""
    if logits.dtype == torch.float32:
        return F.softmax(logits, dim=-1)
    return F.softmax(logits, dim=-1, dtype=torch.float32)


class SparseCrossAttention(MultiheadAttention):
    """Encoder-decoder attention over the top-r sentences (Eq. 3, 6), with the
    sentence-level approximator (Eq. 7-10 or App. D) of its decoder layer.

    The word-level projections keep fairseq's names (``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj``), so BART checkpoints load unchanged.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        kdim: Optional[int] = None,
        vdim: Optional[int] = None,
        dropout: float = 0.0,
        top_r: int = 5,
        selection: str = "approx",
        approximator: str = "model-based",
        sentence_dim: Optional[int] = None,
        share_selection_across_beams: bool = False,
        mix_decay_updates: Optional[int] = None,
        generation_path: str = "auto",
    ):
        super().__init__(
            embed_dim, num_heads, kdim=kdim, vdim=vdim, dropout=dropout, encoder_decoder_attention=True
        )
        if selection not in SENTENCE_SELECTIONS:
            raise ValueError(f"sentence selection must be one of {SENTENCE_SELECTIONS}, got {selection!r}")
        if generation_path not in GENERATION_PATHS:
            raise ValueError(f"generation path must be one of {GENERATION_PATHS}, got {generation_path!r}")
        if approximator not in APPROXIMATORS:
            raise ValueError(f"approximator must be one of {APPROXIMATORS}, got {approximator!r}")
        if selection == "mix" and not mix_decay_updates:
            raise ValueError(
                "--sentence-selection mix needs --mix-decay-updates (the paper: the number of updates in one epoch)"
            )
        self.top_r = top_r
        self.selection = selection
        self.approximator = approximator
        self.share_selection_across_beams = share_selection_across_beams
        self.mix_decay_updates = mix_decay_updates
        self.generation_path = generation_path
        self.num_updates = 0
        self.sentence_attention = (
            SentenceLevelAttention(embed_dim, sentence_dim or self.kdim, num_heads)
            if approximator == "model-based"
            else None
        )

    def set_num_updates(self, num_updates: int):
        self.num_updates = num_updates

    def exact_selection_probability(self) -> float:
        """Sec. 4.3's scheduled mix: the probability of ranking by the exact
        alpha^s at this update, ``max(0, 1 - update / mix_decay_updates)``."""
        return max(0.0, 1.0 - self.num_updates / float(self.mix_decay_updates))

    def initialize_approximator_from_cross_attention(self):
        """App. A.1: W^Q, W^K (weights and biases) from q_proj, k_proj."""
        if self.sentence_attention is not None:
            self.sentence_attention.initialize_from(self.q_proj, self.k_proj)

    # ------------------------------------------------------------ helpers

    def _split_heads(self, x: Tensor) -> Tensor:
        """``[L, B, C]`` -> ``[B, H, L, d_h]``."""
        return split_heads(x, self.num_heads)

    def _project_queries(self, query: Tensor, with_sentence_queries: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """Scaled word-level queries ``[B', H, T, d_h]`` and, for the
        model-based approximator when asked, the sentence queries of Eq. 8,
        both from one matrix product (``q_proj`` and ``W^Q`` stacked)."""
        if not with_sentence_queries or self.sentence_attention is None:
            return self._split_heads(self.q_proj(query) * self.scaling), None
        weight, bias = self._stacked_query_projection()
        both = F.linear(query, weight, bias) * self.scaling
        queries, sentence_queries = both.split(self.embed_dim, dim=-1)
        return self._split_heads(queries), self._split_heads(sentence_queries)

    def _stacked_query_projection(self) -> Tuple[Tensor, Tensor]:
        """``[q_proj; W^Q]`` weights ``[2C, C]`` and biases. Without autograd
        (generation) the stack is kept until a parameter changes
        (:func:`~mdsfair.modules.parameter_cache.derived_from_parameters`)."""
        word, sentence = self.q_proj, self.sentence_attention.sentence_query_proj
        return derived_from_parameters(
            self, "_stacked_query_cache", linear_parameters(word, sentence),
            lambda: (torch.cat([word.weight, sentence.weight]), torch.cat([linear_bias(word), linear_bias(sentence)])),
        )

    def _cached(self, incremental_state, name: str, compute):
        """``compute()`` once per generation (at the first step that needs
        it), kept per source in the incremental state; every call without
        incremental state computes afresh."""
        if incremental_state is None:
            return compute()
        saved_state = self._get_input_buffer(incremental_state)
        if name not in saved_state:
            value = compute()
            saved_state = self._get_input_buffer(incremental_state)  # compute() may have cached more
            saved_state[name] = value
            self._set_input_buffer(incremental_state, saved_state)
        return saved_state[name]

    def _source_keys_values(self, key: Tensor, incremental_state) -> Tuple[Tensor, Tensor]:
        """Word keys and values ``[B, H, N, d_h]`` of every source, for the
        full and masked paths (``prev_key``/``prev_value``, projected once)."""
        keys = self._cached(incremental_state, "prev_key", lambda: self._split_heads(self.k_proj(key)))
        values = self._cached(incremental_state, "prev_value", lambda: self._split_heads(self.v_proj(key)))
        return keys, values

    def _source_sentence_keys(
        self, key: Tensor, context: SentenceContext, incremental_state, head_keys: Optional[Tensor] = None
    ) -> Tensor:
        """Per-head sentence keys ``[B, H, S, d_h]`` of every source (cached
        as ``sentence_keys``). The model-free ones sum the word keys: from
        ``head_keys [B, H, N, d_h]`` where the caller has them, else
        projected here."""
        def compute():  # contiguous: a generation step reads them as [B * H, d_h, S] without a copy
            if self.sentence_attention is not None:
                return self._sentence_keys(None, context).contiguous()
            if head_keys is None:
                return self._sentence_keys(self.k_proj(key), context).contiguous()
            bsz, _, src_len, _ = head_keys.shape
            return self._sentence_keys(head_keys.permute(2, 0, 1, 3).reshape(src_len, bsz, -1), context).contiguous()
        return self._cached(incremental_state, "sentence_keys", compute)

    def _source_sentence_keys_by_head(self, key: Tensor, context: SentenceContext, incremental_state) -> Tensor:
        """The per-source sentence keys of :meth:`_source_sentence_keys` as
        one generation step multiplies them: ``[B * H, d_h, S]`` (a view,
        kept beside them)."""
        def compute():
            keys = self._source_sentence_keys(key, context, incremental_state)
            bsz, heads, num_slots, head_dim = keys.shape
            return keys.view(bsz * heads, num_slots, head_dim).transpose(1, 2)
        return self._cached(incremental_state, "sentence_keys_by_head", compute)

    def _sentence_keys(self, keys: Optional[Tensor], context: SentenceContext) -> Tensor:
        """Per-head sentence keys ``[B, H, S, d_h]``: ``y_i W^K`` (Eq. 9) from
        the sentence encoder's states, or ``sum_j phi(k_ij)`` (Eq. 19) from
        the projected word keys ``[N, B, C]`` (model-free)."""
        if self.sentence_attention is not None:
            if context.sentence_states is None:
                raise ValueError("the model-based approximator needs sentence_states from the sentence encoder")
            return self.sentence_attention.project_sentences(context.sentence_states)
        return model_free_sentence_keys(
            keys, context.src_sent_ids, context.layout.token_index.size(1), self.num_heads
        )

    def _approximate(
        self, queries: Tensor, sentence_queries: Optional[Tensor], sentence_keys: Tensor, sentence_mask: Tensor,
        rows: HypothesisRows,
    ) -> Tuple[Tensor, Tensor]:
        """log alpha~ ``[B', H, T, S]`` (Eq. 7, or Eq. 19 normalized per head)
        and the ranking scores ``[B', T, S]`` averaged over heads (App. A.4);
        the per-source sentence keys are read by every row in place
        (``rows.matmul``).

        Model-based: the scores are alpha~ averaged over heads. Model-free:
        the raw ``phi(q_m) . sum_j phi(k_{i,j})`` averaged over heads, Z_m
        dropped (App. D; the authors' ``phi_prod.mean(dim=[0, 1])``), not
        the per-head normalized ones (which rank differently when heads'
        totals differ)."""
        if self.sentence_attention is not None:
            approx_log = sentence_attention_log_scores(sentence_queries, sentence_keys, sentence_mask, rows.matmul)
            return approx_log, approx_log.exp().mean(dim=1)
        raw = model_free_sentence_scores(queries, sentence_keys, sentence_mask, rows.matmul)
        return model_free_log_probabilities(raw, sentence_mask), raw.mean(dim=1)

    def effective_selection(self, mix_draw: Optional[float] = None) -> str:
        """The saliency that ranks sentences in this call (resolves ``mix``).

        ``mix_draw``: a uniform draw in [0, 1) shared by all layers of one
        forward pass (the decoder makes it); without it a module used on its
        own draws once for this call."""
        if self.selection != "mix":
            return self.selection
        if not self.training:
            return "approx"
        if mix_draw is None:
            mix_draw = torch.rand(()).item()
        return "ideal" if mix_draw < self.exact_selection_probability() else "approx"

    def _selection_scores(self, selection: str, exact, approx_scores, sentence_mask, rows, tgt_len) -> Tensor:
        """``[B, T, S]`` scores averaged over heads (App. A.4); ``approx_scores``
        come averaged from :meth:`_approximate`."""
        if selection == "ideal":
            scores = exact.mean(dim=1)
        elif selection == "approx":
            scores = approx_scores
        else:
            bsz, num_slots = sentence_mask.shape
            scores = torch.rand(bsz, tgt_len, num_slots, device=sentence_mask.device)
        if self.share_selection_across_beams:
            scores = average_over_hypotheses(scores, rows)
        return scores

    def gathering_pays(self, kept: KeptTokens, src_len: int) -> bool:
        """Whether this generation step gathers the kept sentences per
        hypothesis (:meth:`_gathered_attention`) or masks the full
        per-source attention (word keys/values projected once, the other
        tokens' logits set to -inf: the same output, at full attention's cost
        plus the approximator's).

        Gathering costs about ``n * H * C`` per hypothesis (``n``: the most
        tokens any row keeps, ``H`` heads: the key projection is folded into
        the query), the masked path ``N * C``; ``auto`` gathers when
        ``n * H <= 2 * N`` (measured on CPU by benchmarks/sparse_decoder.py:
        at 4,096 tokens in sentences of 30, r = 5 and 10 gather, r = 30 masks;
        at 1,024 tokens only r = 5 gathers)."""
        if self.generation_path != "auto":
            return self.generation_path == "gather"
        return kept.positions.size(-1) * self.num_heads <= 2 * src_len

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Nothing to reorder: the cache holds keys, values and sentence keys
        once per source; the rows' sources (``hypothesis_source_index`` of the
        encoder output) are reordered by the encoder instead."""
        return incremental_state

    # ------------------------------------------------------------ forward

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        key_padding_mask: Optional[Tensor],
        sentence_context: SentenceContext,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        compute_saliency: bool = False,
        need_weights: bool = False,
        weight_heads: Optional[int] = None,
        mix_draw: Optional[float] = None,
    ) -> Tuple[Tensor, SentenceAttention]:
        """
        Args:
            query: ``[T, B', C]`` decoder states (``B'`` rows, e.g. hypotheses).
            key: ``[N, B, C]`` encoder output, one column per source (also
                the values).
            key_padding_mask: ``[B, N]`` True at source padding.
            sentence_context: the sources' sentence structure and the source
                of every row.
            incremental_state: fairseq's incremental decoding state.
            compute_saliency: also return alpha^s and alpha~^s for the losses
                (teacher forcing); generation computes only what the
                selection needs.
            need_weights: also return the word-level attention, averaged
                over the first ``weight_heads`` heads (default: all).
            mix_draw: for ``mix`` selection in training, the uniform draw of
                this forward pass, shared by all layers (Sec. 4.3).

        Returns:
            ``[T, B', C]`` attention output and a :class:`SentenceAttention`.
        """
        tgt_len, bsz, _ = query.shape
        rows = sentence_context.rows
        selection = self.effective_selection(mix_draw) if self.top_r > 0 else None
        needs_approx = compute_saliency or selection == "approx"
        sparse_step = incremental_state is not None and selection in ("approx", "random")
        if sparse_step and selection == "approx" and tgt_len == 1:
            num_kept = self._static_kept_tokens(sentence_context, key.size(0))
            if num_kept is not None:
                return self._generation_step(query, key, sentence_context, incremental_state, num_kept,
                                             need_weights, weight_heads)
        queries, sentence_queries = self._project_queries(query, needs_approx)

        sentence_mask = rows.lookup(sentence_context.layout.sentence_mask)
        num_slots = sentence_mask.size(1)
        approx_log = approx_scores = None
        # teacher forcing and full or ideal generation read every word key anyway
        keys, values = (None, None) if sparse_step else self._source_keys_values(key, incremental_state)
        if needs_approx:
            sentence_keys = self._source_sentence_keys(key, sentence_context, incremental_state, keys)
            approx_log, approx_scores = self._approximate(queries, sentence_queries, sentence_keys, sentence_mask, rows)

        selected = None
        if sparse_step:
            scores = self._selection_scores(selection, None, approx_scores, sentence_mask, rows, tgt_len)
            selected = select_top_r_sentences(scores, sentence_mask, self.top_r)
            kept = kept_token_layout(*selected, sentence_context)
            if self.gathering_pays(kept, key.size(0)):
                return self._gathered_attention(
                    queries, key, selected, kept, approx_log, sentence_mask, need_weights, weight_heads
                )

        if keys is None:  # a sparse step that masks
            keys, values = self._source_keys_values(key, incremental_state)
        logits = rows.matmul(queries, keys.transpose(-1, -2)).float()
        if key_padding_mask is not None:
            padding = rows.lookup(key_padding_mask.to(torch.bool))
            logits = logits.masked_fill(padding[:, None, None, :], float("-inf"))
        full_probs = F.softmax(logits, dim=-1)
        src_sent_ids = rows.lookup(sentence_context.src_sent_ids)
        exact = None
        if compute_saliency or selection == "ideal":
            exact = sentence_saliency(full_probs, src_sent_ids, num_slots)

        selection_mask = None
        probs = full_probs
        if selection is not None:
            if selected is None:
                scores = self._selection_scores(selection, exact, approx_scores, sentence_mask, rows, tgt_len)
                selected = select_top_r_sentences(scores, sentence_mask, self.top_r)
            indices, valid = selected
            selection_mask = selection_mask_from_indices(indices, valid, num_slots)
            token_sentence = src_sent_ids.clamp(min=0).unsqueeze(1).expand(-1, tgt_len, -1)
            kept_tokens = selection_mask.gather(2, token_sentence)
            probs = F.softmax(logits.masked_fill(~kept_tokens[:, None], float("-inf")), dim=-1)

        token_attention = probs[:, :weight_heads].mean(dim=1) if need_weights else None
        probs = self.dropout_module(probs.type_as(queries))
        output = rows.matmul(probs, values)
        output = self.out_proj(output.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))
        return output, SentenceAttention(exact, approx_log, sentence_mask, selection_mask, token_attention)

    # ------------------------------------------------------------ one generation step

    def _static_kept_tokens(self, context: SentenceContext, src_len: int) -> Optional[int]:
        """The kept-token slots ``n`` of a generation step that
        :meth:`_generation_step` can take, or None where the general path
        runs: it needs the rows grouped by source as a view
        (``rows.blocked`` or one row per source), the per-row tables, ``n``
        known on the host (``kept_token_bounds``), no autograd, and
        gathering to pay (:meth:`gathering_pays`) or be asked for; the
        selection shared across beams and the ``random`` selection take the
        general path."""
        rows = context.rows
        if (self.training or torch.is_grad_enabled() or self.share_selection_across_beams
                or context.row_tables is None or context.kept_token_bounds is None
                or not (rows.blocked or rows.is_identity) or self.generation_path == "mask"):
            return None
        k = min(self.top_r, context.layout.lengths.size(1))
        num_kept = context.row_tables.kept_slots(k, context.kept_token_bounds)
        if self.generation_path == "auto" and num_kept * self.num_heads > 2 * src_len:
            return None
        return num_kept

    def _generation_weights(self) -> Dict[str, Tensor]:
        """The projections as one generation step multiplies them, kept until
        a parameter changes (in place: its version; moved or cast: its
        storage). The step computes every projection transposed (weight
        times the rows' states, ``W x^T``: for a few decoder rows the faster
        product on CPUs, and the per-head views it needs come out of it
        without a copy): the word queries stacked with the sentence queries
        of Eq. 8 (model-based), scaled, with their bias as a column; the key
        and value projections per head ``[H, d_h, C]``; the output
        projection with the value bias folded into its bias
        (``b^O + W^O b^V``: the attention weights of a head sum to one, so
        ``sum_j p_j (W^V x_j + b^V) = W^V sum_j p_j x_j + b^V``)."""
        heads, head_dim = self.num_heads, self.head_dim
        projections = [self.q_proj, self.k_proj, self.v_proj, self.out_proj]
        if self.sentence_attention is not None:
            projections.append(self.sentence_attention.sentence_query_proj)

        def build() -> Dict[str, Tensor]:
            query_weight, query_bias = self.q_proj.weight, linear_bias(self.q_proj)
            if self.sentence_attention is not None:
                sentence = self.sentence_attention.sentence_query_proj
                query_weight = torch.cat([query_weight, sentence.weight])
                query_bias = torch.cat([query_bias, linear_bias(sentence)])
            source_dim = self.k_proj.weight.size(1)
            out_weight = self.out_proj.weight
            return {
                "query_weight": (query_weight * self.scaling).contiguous(),
                "query_bias": (query_bias * self.scaling).unsqueeze(1),
                "key_heads": self.k_proj.weight.view(heads, head_dim, source_dim),
                "value_heads": self.v_proj.weight.view(heads, head_dim, source_dim),
                "out_weight": out_weight,
                "out_bias": (linear_bias(self.out_proj) + out_weight @ linear_bias(self.v_proj)).unsqueeze(1),
            }
        return derived_from_parameters(self, "_generation_weight_cache", linear_parameters(*projections), build)

    def _generation_step(
        self, query: Tensor, source_states: Tensor, context: SentenceContext, incremental_state, num_kept: int,
        need_weights: bool = False, weight_heads: Optional[int] = None,
    ) -> Tuple[Tensor, SentenceAttention]:
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
        rows, tables, layout = context.rows, context.row_tables, context.layout
        num_sources, num_slots, max_length = layout.token_index.shape
        num_rows = rows.source_index.numel()
        per_source = num_rows // num_sources
        heads, head_dim, embed_dim = self.num_heads, self.head_dim, self.embed_dim
        k = min(self.top_r, num_slots)
        weights = self._generation_weights()
        # [q_proj; W^Q] x^T: [C or 2C, B'], the head h, dimension d of row b' at (h * d_h + d, b')
        projected = torch.addmm(weights["query_bias"], weights["query_weight"],
                                transposed(query.view(num_rows, embed_dim)))
        # the word queries as [H, B', d_h], and the model-based sentence queries' rows of one source
        # grouped per head, [B, H, R, d_h] (copied into a buffer: one batched product per source and head)
        word_queries = projected.as_strided((heads, num_rows, head_dim), (head_dim * num_rows, 1, num_rows))

        def grouped_by_source(first_feature: int) -> Tensor:  # -> [B * H, R, d_h]
            grouped = tables.buffer("grouped_queries", (num_sources, heads, per_source, head_dim), projected.dtype)
            grouped.copy_(projected.as_strided(
                grouped.shape, (per_source, head_dim * num_rows, 1, num_rows),
                projected.storage_offset() + first_feature * num_rows))
            return grouped.view(num_sources * heads, per_source, head_dim)

        # the per-source sentence keys [B, H, S, d_h] of the general path's cache, as [B * H, d_h, S]
        keys = self._source_sentence_keys_by_head(source_states, context, incremental_state)
        if self.sentence_attention is not None:
            sentence_logits = torch.bmm(grouped_by_source(embed_dim), keys).add_(
                tables.sentence_score_bias(heads, keys.dtype))
            probs = softmax_in_float32(sentence_logits)  # [B * H, R, S], alpha~ of Eq. 7
            # summed over heads: H times the mean of App. A.4, the same ranking
            ranking = probs.view(num_sources, heads, per_source, num_slots).sum(dim=1)

            def approx_log():  # (a closure over sentence_logits: the word logits below have their own name)
                log_probs = F.log_softmax(sentence_logits, dim=-1, dtype=torch.float32)
                return log_probs.view(num_sources, heads, per_source, num_slots).transpose(1, 2).reshape(
                    num_rows, heads, 1, num_slots)
        else:
            phi_queries = grouped_by_source(0)
            if phi_queries.dtype != torch.float32:
                phi_queries = phi_queries.float()
            raw = torch.bmm(elu_feature_map(phi_queries), keys)  # Eq. 19
            raw = raw.view(num_sources, heads, per_source, num_slots).masked_fill_(
                tables.sentence_padding().unsqueeze(1), 0.0)
            ranking = raw.sum(dim=1)  # H times the mean over heads: the same ranking

            def approx_log():
                per_row = raw.transpose(1, 2).reshape(num_rows, heads, 1, num_slots)
                return model_free_log_probabilities(per_row, rows.lookup(layout.sentence_mask))
        # Eq. 6: the top-r real sentences of every row, [B', 1, k]
        indices = ranking.masked_fill_(tables.sentence_padding(), float("-inf")).topk(k, dim=-1).indices.view(
            num_rows, 1, k)

        # their tokens back to back (kept_token_layout), n slots per row: slot p holds the selected sentence
        # whose running token count first exceeds p, at offset p - (the tokens of the sentences before it)
        lengths = tables.row_lengths().gather(2, indices)  # 0 for a slot past a source's sentences
        ends = lengths.cumsum(dim=2)
        slots = tables.slots(num_kept)  # [B', 1, n]
        which = torch.searchsorted(ends, slots, right=True)
        padding_slots = which.ge(k)
        which = which.clamp_(max=k - 1)
        # the sentence's first slot in the [B * S * L] token tables, less the tokens kept before it
        first = torch.add(tables.row_sentence_base(max_length), indices, alpha=max_length).add_(lengths).sub_(ends)
        slot = first.gather(2, which).add_(slots).view(-1)  # padding slots may run past a sentence: see token_rows
        # the row of every kept token in the [N * B, C] view of the encoder output, from a per-source table
        flat_rows = tables.token_rows(num_kept).index_select(0, slot)
        # into one buffer that every layer of the step reuses (a fresh [B' * n, C] tensor per layer and
        # step costs more than the gather on the CPU: the allocator maps and faults in its pages anew)
        flat_states, states, states_t = tables.gather_buffer(num_rows, num_kept, source_states)
        torch.index_select(tables.flat_source_states(source_states), 0, flat_rows, out=flat_states)

        # Eq. 3 with the key and value projections folded in (see _gathered_attention): W^K_h^T q_h, [H, B', C]
        source_queries = torch.bmm(word_queries, weights["key_heads"])
        logits = torch.bmm(source_queries.as_strided((num_rows, heads, embed_dim), (embed_dim, num_rows * embed_dim, 1),
                                                     source_queries.storage_offset()), states_t)
        logits.masked_fill_(padding_slots, float("-inf"))  # [B', H, n]
        probs = softmax_in_float32(logits)
        token_attention = None
        if need_weights:  # the alignment layer: the attention over the source, averaged over heads
            token_slot = slot.clamp(max=layout.token_index.numel() - 1)
            positions = layout.token_index.view(-1).index_select(0, token_slot).view(num_rows, 1, num_kept)
            token_attention = probs.new_zeros(num_rows, 1, source_states.size(0)).scatter_add_(
                2, positions, probs[:, :weight_heads].mean(dim=1, keepdim=True))
        if probs.dtype != states.dtype:
            probs = probs.to(states.dtype)
        mixed = torch.bmm(probs, states)  # [B', H, C]: sum_j p_hj x_j
        # W^V_h per head, transposed: [H, d_h, C] @ [H, C, B'] -> [H, d_h, B'], i.e. [C, B'] with the heads' rows
        per_head = torch.bmm(weights["value_heads"], mixed.as_strided(
            (heads, embed_dim, num_rows), (embed_dim, 1, heads * embed_dim), mixed.storage_offset()))
        output = torch.mm(weights["out_weight"], per_head.view(embed_dim, num_rows)).add_(weights["out_bias"])

        def sentence_mask():
            return rows.lookup(layout.sentence_mask)

        def selection():
            flat_indices = indices.view(num_rows, k)
            valid = sentence_mask().gather(1, flat_indices)
            return selection_mask_from_indices(flat_indices.unsqueeze(1), valid.unsqueeze(1), num_slots)
        # [C, B'] -> [1, B', C] (a view)
        return output.as_strided((1, num_rows, embed_dim), (num_rows * embed_dim, 1, num_rows)), SentenceAttention(
            None, approx_log, sentence_mask, selection, token_attention)

    def _gathered_attention(
        self, queries, source_states, selected: Tuple[Tensor, Tensor], kept: KeptTokens, approx_log,
        sentence_mask, need_weights: bool, weight_heads: Optional[int],
    ) -> Tuple[Tensor, SentenceAttention]:
        """Eq. 3 on the selected sentences only: O(r * N2) per query, and no
        projection of the other sentences at all.

        Each row's kept encoder states ``x_j`` (``kept``, the selected
        sentences' tokens back to back) are read from the per-source
        ``source_states [N, B, C]`` with one ``index_select`` of whole C-wide
        rows. The key and value projections are folded into the query and
        the output, per head ``h``::

            q_h . (W^K_h x_j + b^K_h) = (W^K_h^T q_h) . x_j + const
            sum_j p_hj (W^V_h x_j + b^V_h) = W^V_h (sum_j p_hj x_j) + b^V_h

        (the constant ``q_h . b^K_h`` is the same for every token of a row and
        head, so the softmax drops it; the p_hj sum to one). A step then costs
        O(C^2 + n * H * C) per row instead of projecting all N tokens
        (O(N * C^2) per source) at the first step.
        """
        bsz, num_heads, tgt_len, head_dim = queries.shape
        src_len, num_sources, source_dim = source_states.shape
        num_kept = kept.positions.size(-1)
        # source_states is [N, B, C]: token n of source b is row n * B + b of its [N * B, C] view
        states = source_states.contiguous().view(-1, source_dim).index_select(0, kept.flat_rows.view(-1))
        states = states.view(bsz * tgt_len, num_kept, source_dim)  # [B'T, n, C]

        # W^K_h^T q_h for every head: [H, B'T, d_h] @ [H, d_h, C] -> [B'T, H, C]
        head_queries = queries.transpose(0, 1).reshape(num_heads, bsz * tgt_len, head_dim)
        key_weight = self.k_proj.weight.view(num_heads, head_dim, source_dim)
        source_queries = torch.matmul(head_queries, key_weight).transpose(0, 1)
        logits = torch.matmul(source_queries, states.transpose(1, 2)).float()  # [B'T, H, n]
        token_valid = kept.valid.view(bsz * tgt_len, 1, num_kept)
        probs = F.softmax(logits.masked_fill(~token_valid, float("-inf")), dim=-1)
        token_attention = None
        if need_weights:
            token_attention = probs.new_zeros(bsz, tgt_len, src_len).scatter_add_(
                2, kept.positions, probs[:, :weight_heads].mean(dim=1).view(bsz, tgt_len, num_kept)
            )
        probs = self.dropout_module(probs.type_as(queries))
        # sum_j p_hj x_j, then W^V_h per head: [H, B'T, C] @ [H, C, d_h] -> [H, B'T, d_h]
        mixed_states = torch.matmul(probs, states).transpose(0, 1)
        value_weight = self.v_proj.weight.view(num_heads, head_dim, source_dim).transpose(1, 2)
        output = torch.matmul(mixed_states, value_weight)
        if self.v_proj.bias is not None:
            output = output + self.v_proj.bias.view(num_heads, 1, head_dim)
        output = output.permute(1, 0, 2).reshape(bsz, tgt_len, self.embed_dim).transpose(0, 1)
        output = self.out_proj(output)
        indices, valid = selected
        selection_mask = selection_mask_from_indices(indices, valid, sentence_mask.size(1))
        return output, SentenceAttention(None, approx_log, sentence_mask, selection_mask, token_attention)
