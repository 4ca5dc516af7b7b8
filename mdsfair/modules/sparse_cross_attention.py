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
  score ``phi(q_m) . sum_j phi(k_{i,j})`` (Eq. 19) with Z_m dropped, averaged
  over heads before top-r (App. D with App. A.4; the authors' model-free
  decoding, ``phi_prod.mean(dim=[0, 1])``);
* ``random``: random sentences (the paper's random-selection baseline);
* ``mix``: scheduled sampling (Sec. 4.3) in training: exact with probability
  ``max(0, 1 - update / mix_decay_updates)``, else approx, one draw per
  forward pass shared by every layer (``mix_draw``); approx in evaluation.

Two paths compute the same attention:

* masked (teacher forcing, scoring, ``ideal`` selection): the logits of the
  unselected sentences' tokens are set to -inf before the softmax;
* gathered (incremental generation with ``approx``/``random`` selection):
  the selected sentences' encoder states are gathered back to back
  (:func:`~mdsfair.modules.sentence_selection.kept_token_layout`), with the
  key and value projections folded into the query and the output:
  O(r * N2) per step instead of O(N) (N2: mean sentence length), unless the
  masked path is cheaper (:meth:`SparseCrossAttention.gathering_pays`).

In incremental generation the word keys/values and the sentence keys are
kept once per source example, never expanded or reordered per beam
hypothesis: every decoder row finds its source through
:class:`~mdsfair.modules.hypothesis_rows.HypothesisRows`.

The word-level attention follows the backbone of its decoder layer: its
projections with or without biases (``bias``; T5's have none), its queries'
``scaling`` (1 under ``--attention-scaling none``) and its softmax's dtype
(:meth:`SparseCrossAttention.softmax_dtype`), so that with every sentence kept
it computes that backbone's full cross-attention (Eq. 3 with ``I^r_m`` all
positions). The approximator keeps its own queries' scaling (Eq. 8,
``d_h^-0.5``) on either backbone.
"""

from typing import Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.argument_types import check_choice
from mdsfair.modules.biased_self_attention import runs_as_fairseq
from mdsfair.modules.heads import split_heads
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.sentence_approximator import (
    SentenceLevelAttention,
    model_free_log_probabilities,
    model_free_sentence_keys,
    model_free_sentence_scores,
    sentence_attention_log_scores,
)
from mdsfair.modules.sentence_saliency import SentenceLayout, sentence_saliency
from mdsfair.modules.sentence_selection import (
    KeptTokens,
    average_over_hypotheses,
    kept_token_layout,
    select_top_r_sentences,
    selection_mask_from_indices,
)

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
    :func:`~mdsfair.modules.sentence_selection.kept_token_bounds` (None:
    each step sizes its layout exactly).
    """

    src_sent_ids: Tensor
    layout: SentenceLayout
    sentence_states: Optional[Tensor]
    rows: HypothesisRows
    kept_token_bounds: Optional[Tensor] = None


class SentenceAttention(NamedTuple):
    """What one layer's sparse cross-attention reports for the losses.

    ``exact``: ``[B', H, T, S]`` alpha^s of Eq. 4 (None where not computed);
    ``approx_log``: ``[B', H, T, S]`` log alpha~^s (Eq. 7; model-free: Eq. 19
    normalized per head; None without approximator or where not computed);
    ``sentence_mask``: ``[B', S]``;
    ``selection``: ``[B', T, S]`` bool, the kept sentences (None: all);
    ``token_attention``: ``[B', T, N]`` the word-level attention actually
    used (zero off the selected sentences), averaged over the requested
    heads (None unless asked for). ``B'``: decoder rows.
    """

    exact: Optional[Tensor]
    approx_log: Optional[Tensor]
    sentence_mask: Tensor
    selection: Optional[Tensor]
    token_attention: Optional[Tensor] = None


class SparseCrossAttention(MultiheadAttention):
    """Encoder-decoder attention over the top-r sentences (Eq. 3, 6), with the
    sentence-level approximator (Eq. 7-10 or App. D) of its decoder layer.

    The word-level projections keep fairseq's names (``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj``), so BART checkpoints load unchanged; ``bias``
    False builds them without biases (T5's backbone).
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
        bias: bool = True,
    ):
        super().__init__(
            embed_dim, num_heads, kdim=kdim, vdim=vdim, dropout=dropout, bias=bias, encoder_decoder_attention=True
        )
        check_choice("sentence selection", selection, SENTENCE_SELECTIONS)
        check_choice("generation path", generation_path, GENERATION_PATHS)
        check_choice("approximator", approximator, APPROXIMATORS)
        if selection == "mix" and not mix_decay_updates:
            raise ValueError(
                "--sentence-selection mix needs --mix-decay-updates (the paper: the number of updates in one epoch)"
            )
        self.top_r, self.selection, self.approximator = top_r, selection, approximator
        self.share_selection_across_beams = share_selection_across_beams
        self.mix_decay_updates, self.generation_path = mix_decay_updates, generation_path
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
        """App. A.1: W^Q, W^K (weights and biases) from q_proj, k_proj; on a
        backbone without biases W^Q's and W^K's biases start at zero, so the
        approximator's projections start equal to the cross-attention's."""
        if self.sentence_attention is not None:
            self.sentence_attention.initialize_from(self.q_proj, self.k_proj)

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

    def gathering_pays(self, kept: KeptTokens, src_len: int) -> bool:
        """Whether a generation step gathers the kept tokens per row
        (:meth:`_gathered_attention`: about ``n * H * C``, ``n`` the most
        tokens a row keeps, the key projection folded into the ``H`` heads'
        queries) or masks the per-source attention (``N * C``, the same
        output). ``auto`` gathers when ``n * H <= 2 * N`` (benchmarks/
        sparse_decoder.py on CPU: at 4,096 tokens in sentences of 30, r = 5
        and 10 gather, r = 30 masks; at 1,024 tokens only r = 5 gathers)."""
        if self.generation_path != "auto":
            return self.generation_path == "gather"
        return kept.positions.size(-1) * self.num_heads <= 2 * src_len

    def softmax_dtype(self, logits_dtype: torch.dtype) -> torch.dtype:
        """The dtype of the word-level softmax for logits of ``logits_dtype``:
        float32 on BART's backbone (biased projections, scaled queries), as
        fairseq's attention takes it whatever the model's dtype; on T5's at
        least float32 and the model's dtype where wider, as
        :class:`~mdsfair.modules.biased_self_attention.EncoderDecoderAttention`
        (a float64 model computes Hugging Face's T5 in float64)."""
        if runs_as_fairseq(self):
            return torch.float32
        return torch.promote_types(logits_dtype, torch.float32)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Nothing to reorder: the cache is kept once per source; the encoder
        reorders the rows' sources (``hypothesis_source_index``) instead."""
        return incremental_state

    # ------------------------------------------------------------ projections and caches

    def _split_heads(self, x: Tensor) -> Tensor:
        """``[L, B, C]`` -> ``[B, H, L, d_h]``."""
        return split_heads(x, self.num_heads)

    def _cached(self, incremental_state, name: str, compute):
        """``compute()`` once per generation, kept per source in the
        incremental state (computed afresh without one)."""
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
        masked path (``prev_key``/``prev_value``, projected once)."""
        keys = self._cached(incremental_state, "prev_key", lambda: self._split_heads(self.k_proj(key)))
        values = self._cached(incremental_state, "prev_value", lambda: self._split_heads(self.v_proj(key)))
        return keys, values

    def _source_sentence_keys(
        self, key: Tensor, context: SentenceContext, incremental_state, head_keys: Optional[Tensor] = None
    ) -> Tensor:
        """Per-head sentence keys ``[B, H, S, d_h]`` of every source (cached
        as ``sentence_keys``): ``y_i W^K`` (Eq. 9) from the sentence
        encoder's states, or ``sum_j phi(k_ij)`` (Eq. 19) from the word keys
        (model-free: from ``head_keys [B, H, N, d_h]`` where the caller has
        them, else projected here)."""

        def compute():
            if self.sentence_attention is not None:
                if context.sentence_states is None:
                    raise ValueError("the model-based approximator needs sentence_states from the sentence encoder")
                return self.sentence_attention.project_sentences(context.sentence_states).contiguous()
            if head_keys is None:
                keys = self.k_proj(key)
            else:
                bsz, _, src_len, _ = head_keys.shape
                keys = head_keys.permute(2, 0, 1, 3).reshape(src_len, bsz, -1)
            num_slots = context.layout.token_index.size(1)
            return model_free_sentence_keys(keys, context.src_sent_ids, num_slots, self.num_heads).contiguous()

        return self._cached(incremental_state, "sentence_keys", compute)

    # ------------------------------------------------------------ sentence selection

    def _approximate(self, query, queries, sentence_keys, sentence_mask, rows) -> Tuple[Tensor, Tensor]:
        """log alpha~ ``[B', H, T, S]`` (Eq. 7, or Eq. 19 normalized per head)
        and the ranking scores ``[B', T, S]`` averaged over heads (App. A.4):
        alpha~ (model-based, from the decoder states ``query`` projected by
        Eq. 8), or the raw Eq. 19 scores of the scaled word-level ``queries``
        with Z_m dropped (model-free, App. D; per-head normalized ones would
        rank differently when heads' totals differ)."""
        if self.sentence_attention is not None:
            sentence_queries = self.sentence_attention.project_queries(query)
            approx_log = sentence_attention_log_scores(sentence_queries, sentence_keys, sentence_mask, rows.matmul)
            return approx_log, approx_log.exp().mean(dim=1)
        raw = model_free_sentence_scores(queries, sentence_keys, sentence_mask, rows.matmul)
        return model_free_log_probabilities(raw, sentence_mask), raw.mean(dim=1)

    def _select_sentences(self, selection: str, exact, approx_scores, sentence_mask, rows, tgt_len):
        """Eq. 6's top-r (:func:`select_top_r_sentences`) by ``[B', T, S]``
        scores averaged over heads (App. A.4; ``approx_scores`` come averaged
        from :meth:`_approximate`): the selected ``(indices, valid)`` and
        their ``[B', T, S]`` mask."""
        if selection == "ideal":
            scores = exact.mean(dim=1)
        elif selection == "approx":
            scores = approx_scores
        else:
            bsz, num_slots = sentence_mask.shape
            scores = torch.rand(bsz, tgt_len, num_slots, device=sentence_mask.device)
        if self.share_selection_across_beams:
            scores = average_over_hypotheses(scores, rows)
        selected = select_top_r_sentences(scores, sentence_mask, self.top_r)
        return selected, selection_mask_from_indices(*selected, sentence_mask.size(1))

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
            key: ``[N, B, C]`` encoder output, one column per source (also the values).
            key_padding_mask: ``[B, N]`` True at source padding.
            sentence_context: the sources' sentence structure and the source of every row.
            incremental_state: fairseq's incremental decoding state.
            compute_saliency: also return alpha^s and alpha~^s for the losses
                (teacher forcing); generation computes only what the selection needs.
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
        queries = self._split_heads(self.q_proj(query) * self.scaling)

        sentence_mask = rows.lookup(sentence_context.layout.sentence_mask)
        num_slots = sentence_mask.size(1)
        approx_log = approx_scores = None
        # teacher forcing and full or ideal generation read every word key anyway
        keys, values = (None, None) if sparse_step else self._source_keys_values(key, incremental_state)
        if needs_approx:
            sentence_keys = self._source_sentence_keys(key, sentence_context, incremental_state, keys)
            approx_log, approx_scores = self._approximate(query, queries, sentence_keys, sentence_mask, rows)

        selection_mask = None
        if sparse_step:
            selected, selection_mask = self._select_sentences(
                selection, None, approx_scores, sentence_mask, rows, tgt_len
            )
            kept = kept_token_layout(*selected, rows, sentence_context.layout, sentence_context.kept_token_bounds)
            if self.gathering_pays(kept, key.size(0)):
                output, token_attention = self._gathered_attention(queries, key, kept, need_weights, weight_heads)
                return output, SentenceAttention(None, approx_log, sentence_mask, selection_mask, token_attention)
            keys, values = self._source_keys_values(key, incremental_state)  # a sparse step that masks

        # the masked path (Eq. 3 as a mask on the full attention)
        logits = rows.matmul(queries, keys.transpose(-1, -2))
        logits = logits.to(self.softmax_dtype(logits.dtype))
        if key_padding_mask is not None:
            padding = rows.lookup(key_padding_mask.to(torch.bool))
            logits = logits.masked_fill(padding[:, None, None, :], float("-inf"))
        full_probs = F.softmax(logits, dim=-1)
        src_sent_ids = rows.lookup(sentence_context.src_sent_ids)
        exact = None
        if compute_saliency or selection == "ideal":
            exact = sentence_saliency(full_probs, src_sent_ids, num_slots)

        probs = full_probs
        if selection is not None:
            if selection_mask is None:
                _, selection_mask = self._select_sentences(
                    selection, exact, approx_scores, sentence_mask, rows, tgt_len
                )
            token_sentence = src_sent_ids.clamp(min=0).unsqueeze(1).expand(-1, tgt_len, -1)
            kept_tokens = selection_mask.gather(2, token_sentence)
            probs = F.softmax(logits.masked_fill(~kept_tokens[:, None], float("-inf")), dim=-1)

        token_attention = probs[:, :weight_heads].mean(dim=1) if need_weights else None
        probs = self.dropout_module(probs.type_as(queries))
        output = rows.matmul(probs, values)
        output = self.out_proj(output.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))
        return output, SentenceAttention(exact, approx_log, sentence_mask, selection_mask, token_attention)

    def _gathered_attention(self, queries, source_states, kept: KeptTokens, need_weights, weight_heads):
        """Eq. 3 on the selected sentences only, O(r * N2) per query: each
        row's kept encoder states ``x_j`` (``kept``) are read from the
        per-source ``source_states [N, B, C]`` with one ``index_select`` of
        whole rows, and the key and value projections are folded into the
        query and the output, per head ``h``::

            q_h . (W^K_h x_j + b^K_h) = (W^K_h^T q_h) . x_j + const
            sum_j p_hj (W^V_h x_j + b^V_h) = W^V_h (sum_j p_hj x_j) + b^V_h

        (the softmax drops the constant ``q_h . b^K_h``; the p_hj sum to one):
        O(C^2 + n * H * C) per row, never the O(N * C^2) projection of the
        source. Returns the ``[T, B', C]`` output and the token attention.
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
        logits = torch.matmul(source_queries, states.transpose(1, 2))  # [B'T, H, n]
        logits = logits.to(self.softmax_dtype(logits.dtype))
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
        return self.out_proj(output), token_attention
