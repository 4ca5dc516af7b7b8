"""Encoder-decoder attention restricted to the top-r salient sentences.

Manakul & Gales (2021), Sec. 3-4: at every decoder step (and layer) the
source sentences are ranked by a sentence saliency averaged over heads
(App. A.4), the top ``r`` are kept (Eq. 6) and the word-level attention runs
over their tokens only (Eq. 3)::

    I^r_m  = [(i, j) s.t. i in top-r(alpha^s_{m,i})]          (Eq. 6)
    A_hat  = softmax(q_m K_hat^T) V_hat,  K_hat, V_hat on I^r_m (Eq. 3)

The saliency used for the ranking is chosen by ``selection``:

* ``ideal``: the exact alpha^s (Eq. 4; needs the full attention);
* ``approx``: the approximator's alpha~^s (Eq. 7 or App. D Eq. 19);
* ``random``: random sentences (the paper's lower baseline);
* ``mix``: scheduled sampling (Sec. 4.3) in training, exact with probability
  ``max(0, 1 - update / mix_decay_updates)``, else approx; approx in
  evaluation and generation.

Two code paths compute the same attention:

* teacher forcing (training, scoring): the logits of the unselected
  sentences' tokens are set to -inf before the softmax;
* incremental generation with ``approx``/``random`` selection: the encoder
  states of the selected sentences are gathered, so each step costs
  O(r * N2) instead of O(N) (N2: longest sentence of the source), and the
  source is never projected (:meth:`SparseCrossAttention._gathered_attention`);
  where r * N2 is large against N, the masked path above is cheaper and is
  used instead (:meth:`SparseCrossAttention.gathering_pays`).

What generation caches (the sentence keys; the word-level keys/values
``[B, H, N, d_h]`` on the full and masked paths; the encoder states on the
gathered path) is kept once per source example, never expanded or
reordered per beam hypothesis; every decoder row finds its source through
:class:`~mdsfair.modules.source_rows.HypothesisRows`. The gathered path
reads each row's selected encoder states from ``[N, B, C]`` with one
``index_select`` of whole C-wide rows; the full and masked paths run one
batched product per source, as do the sentence-level scores. With the model-based approximator the word queries
and the sentence queries of Eq. 8 come from one stacked projection.
"""
from typing import Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.modules.sentence_approximator import (
    SentenceLevelAttention,
    model_free_sentence_keys,
    model_free_sentence_log_scores,
    sentence_attention_log_scores,
)
from mdsfair.modules.sentence_saliency import SentenceLayout, sentence_saliency
from mdsfair.modules.source_rows import HypothesisRows

SENTENCE_SELECTIONS = ("ideal", "approx", "random", "mix")
GENERATION_PATHS = ("auto", "gather", "mask")
APPROXIMATORS = ("model-based", "model-free")


class SentenceContext(NamedTuple):
    """Sentence structure of the sources, kept once per source example.

    ``src_sent_ids [B, N]``; ``layout``: token tables of each sentence;
    ``sentence_states [B, S, C]`` from the sentence encoder (None for the
    model-free approximator); ``rows``: the source of every decoder row
    (``B'`` rows, e.g. ``B * beam`` hypotheses, possibly reordered and
    compacted by beam search).
    """

    src_sent_ids: Tensor
    layout: SentenceLayout
    sentence_states: Optional[Tensor]
    rows: HypothesisRows


class SentenceAttention(NamedTuple):
    """What one layer's sparse cross-attention reports for the losses.

    ``exact``: ``[B', H, T, S]`` alpha^s of Eq. 4 (None where not computed);
    ``approx_log``: ``[B', H, T, S]`` log alpha~^s (None without approximator
    or where not computed); ``sentence_mask``: ``[B', S]``;
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


def average_over_hypotheses(scores: Tensor, rows: HypothesisRows) -> Tensor:
    """Mean of ``scores [B', ...]`` over the rows of the same source example
    (the authors' selection shared across beams), broadcast back to ``B'``."""
    if rows.is_identity:
        return scores
    totals = scores.new_zeros(rows.num_sources, *scores.shape[1:]).index_add_(0, rows.source_index, scores)
    counts = torch.bincount(rows.source_index, minlength=rows.num_sources).clamp(min=1).to(scores.dtype)
    shape = (-1,) + (1,) * (scores.dim() - 1)
    return (totals / counts.view(shape)).index_select(0, rows.source_index)


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

    def initialize_approximator_from_cross_attention(self):
        """App. A.1: W^Q, W^K (weights and biases) from q_proj, k_proj."""
        if self.sentence_attention is not None:
            self.sentence_attention.initialize_from(self.q_proj, self.k_proj)

    # ------------------------------------------------------------ helpers

    def _split_heads(self, x: Tensor) -> Tensor:
        """``[L, B, C]`` -> ``[B, H, L, d_h]``."""
        length, bsz, _ = x.shape
        return x.view(length, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

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
        (generation) the stack is kept until a parameter changes (in place:
        its version; moved or cast: its storage)."""
        word, sentence = self.q_proj, self.sentence_attention.sentence_query_proj
        word_bias = word.bias if word.bias is not None else word.weight.new_zeros(word.out_features)
        parameters = (word.weight, word_bias, sentence.weight, sentence.bias)
        if torch.is_grad_enabled():
            return torch.cat([word.weight, sentence.weight]), torch.cat([word_bias, sentence.bias])
        signature = tuple((parameter.data_ptr(), parameter._version) for parameter in parameters)
        cached = getattr(self, "_stacked_query_cache", None)
        if cached is None or cached[0] != signature:
            stacked = (torch.cat([word.weight, sentence.weight]), torch.cat([word_bias, sentence.bias]))
            cached = self._stacked_query_cache = (signature, stacked)
        return cached[1]

    def _per_source_cache(
        self, key: Tensor, context: SentenceContext, incremental_state, gathered: bool = False
    ) -> Tuple[Optional[Tensor], Tensor, Tensor]:
        """What every decoding step reads, built once (at the first step) and
        cached per source, not per hypothesis.

        * full attention: word keys and values ``[B, H, N, d_h]``
          (``prev_key``/``prev_value``) and the per-head sentence keys
          ``[B, H, S, d_h]``;
        * the gathered sparse path (``gathered``): the encoder states
          ``[N, B, C]`` themselves (``source_states``, not copied and never
          projected: :meth:`_gathered_attention` folds ``W^K``/``W^V`` into
          the query and the output) and the sentence keys. Returned as
          ``(None, source_states, sentence_keys)``.
        """
        names = ("source_states",) if gathered else ("prev_key", "prev_value")
        saved_state = self._get_input_buffer(incremental_state) if incremental_state is not None else None
        if saved_state is not None and names[0] in saved_state:
            if gathered:
                return None, saved_state["source_states"], saved_state["sentence_keys"]
            return saved_state["prev_key"], saved_state["prev_value"], saved_state["sentence_keys"]
        if gathered:
            source_states = key.contiguous()
            # the model-free sentence keys need every word key (Eq. 19); the model-based ones do not
            word_keys = self.k_proj(key) if self.sentence_attention is None else None
            sentence_keys = self._sentence_keys(word_keys, context)
            cache = {"source_states": source_states, "sentence_keys": sentence_keys}
            result = (None, source_states, sentence_keys)
        else:
            projected_keys = self.k_proj(key)
            keys, values = self._split_heads(projected_keys), self._split_heads(self.v_proj(key))
            sentence_keys = self._sentence_keys(projected_keys, context)
            cache = {"prev_key": keys, "prev_value": values, "sentence_keys": sentence_keys}
            result = (keys, values, sentence_keys)
        if incremental_state is not None:
            self._set_input_buffer(incremental_state, cache)
        return result

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

    def _approx_log(
        self, queries: Tensor, sentence_queries: Optional[Tensor], sentence_keys: Tensor, sentence_mask: Tensor,
        rows: HypothesisRows,
    ) -> Tensor:
        """log alpha~ ``[B', H, T, S]`` (Eq. 7 or Eq. 19); the per-source
        sentence keys are read by every row in place (``rows.matmul``)."""
        if self.sentence_attention is not None:
            return sentence_attention_log_scores(sentence_queries, sentence_keys, sentence_mask, rows.matmul)
        return model_free_sentence_log_scores(queries, sentence_keys, sentence_mask, rows.matmul)

    def effective_selection(self) -> str:
        """The saliency that ranks sentences in this call (resolves ``mix``)."""
        if self.selection != "mix":
            return self.selection
        if not self.training:
            return "approx"
        exact_probability = max(0.0, 1.0 - self.num_updates / float(self.mix_decay_updates))
        return "ideal" if torch.rand(()).item() < exact_probability else "approx"

    def _selection_scores(self, selection: str, exact, approx_log, sentence_mask, rows, tgt_len) -> Tensor:
        """``[B, T, S]`` scores averaged over heads (App. A.4)."""
        if selection == "ideal":
            scores = exact.mean(dim=1)
        elif selection == "approx":
            scores = approx_log.exp().mean(dim=1)
        else:
            bsz, num_slots = sentence_mask.shape
            scores = torch.rand(bsz, tgt_len, num_slots, device=sentence_mask.device)
        if self.share_selection_across_beams:
            scores = average_over_hypotheses(scores, rows)
        return scores

    def gathering_pays(self, src_len: int, layout: SentenceLayout) -> bool:
        """Whether generation gathers the kept sentences per hypothesis
        (:meth:`_gathered_attention`) or masks the full per-source attention
        (the word-level keys/values projected once, the unselected tokens'
        logits set to -inf: the same output, at full attention's cost plus
        the approximator's).

        Gathering costs about ``r * L * H * C`` per hypothesis and step
        (``L``: the longest sentence, ``H`` heads; the key projection is folded
        into the query), the masked path ``N * C``; ``auto`` gathers when
        ``r * L * H <= 2 * N`` (measured on CPU by benchmarks/sparse_decoder.py:
        at 4,096 tokens r = 5 and 10 gather, r = 30 masks; at 1,024 tokens only
        r = 5 gathers)."""
        if self.generation_path != "auto":
            return self.generation_path == "gather"
        num_slots, max_length = layout.token_index.shape[1:]
        return min(self.top_r, num_slots) * max_length * self.num_heads <= 2 * src_len

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

        Returns:
            ``[T, B', C]`` attention output and a :class:`SentenceAttention`.
        """
        tgt_len, bsz, _ = query.shape
        rows = sentence_context.rows
        selection = self.effective_selection() if self.top_r > 0 else None
        needs_approx = compute_saliency or selection == "approx"
        gathered = (
            incremental_state is not None and selection in ("approx", "random")
            and self.gathering_pays(key.size(0), sentence_context.layout)
        )
        queries, sentence_queries = self._project_queries(query, needs_approx)
        keys, values, sentence_keys = self._per_source_cache(
            key, sentence_context, incremental_state, gathered=gathered
        )

        sentence_mask = rows.lookup(sentence_context.layout.sentence_mask)
        num_slots = sentence_mask.size(1)
        approx_log = None
        if needs_approx:
            approx_log = self._approx_log(queries, sentence_queries, sentence_keys, sentence_mask, rows)

        if gathered:
            return self._gathered_attention(
                queries, values, selection, approx_log, sentence_mask, sentence_context,
                need_weights, weight_heads,
            )

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
            scores = self._selection_scores(selection, exact, approx_log, sentence_mask, rows, tgt_len)
            indices, valid = select_top_r_sentences(scores, sentence_mask, self.top_r)
            selection_mask = selection_mask_from_indices(indices, valid, num_slots)
            token_sentence = src_sent_ids.clamp(min=0).unsqueeze(1).expand(-1, tgt_len, -1)
            kept_tokens = selection_mask.gather(2, token_sentence)
            probs = F.softmax(logits.masked_fill(~kept_tokens[:, None], float("-inf")), dim=-1)

        token_attention = probs[:, :weight_heads].mean(dim=1) if need_weights else None
        probs = self.dropout_module(probs.type_as(queries))
        output = rows.matmul(probs, values)
        output = self.out_proj(output.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))
        return output, SentenceAttention(exact, approx_log, sentence_mask, selection_mask, token_attention)

    def _gathered_attention(
        self, queries, source_states, selection: str, approx_log, sentence_mask,
        context: SentenceContext, need_weights: bool, weight_heads: Optional[int],
    ) -> Tuple[Tensor, SentenceAttention]:
        """Eq. 3 on the selected sentences only: O(r * N2) per query, and no
        projection of the other sentences at all.

        Each row's selected encoder states ``x_j`` are read from the
        per-source ``source_states [N, B, C]`` with one ``index_select`` of
        whole C-wide rows. The key and value projections are folded into the
        query and the output, per head ``h``::

            q_h . (W^K_h x_j + b^K_h) = (W^K_h^T q_h) . x_j + const
            sum_j p_hj (W^V_h x_j + b^V_h) = W^V_h (sum_j p_hj x_j) + b^V_h

        (the constant ``q_h . b^K_h`` is the same for every token of a row and
        head, so the softmax drops it; the p_hj sum to one). A step then costs
        O(C^2 + r * N2 * H * C) per row instead of projecting all N tokens
        (O(N * C^2) per source) at the first step.
        """
        bsz, num_heads, tgt_len, head_dim = queries.shape
        rows, layout = context.rows, context.layout
        src_len, num_sources, source_dim = source_states.shape
        num_slots, max_length = layout.token_index.shape[1:]
        scores = self._selection_scores(selection, None, approx_log, sentence_mask, rows, tgt_len)
        indices, valid = select_top_r_sentences(scores, sentence_mask, self.top_r)
        num_kept = indices.size(-1) * max_length

        # (source, sentence) -> that sentence's row of the per-source token tables
        sentence_rows = (rows.source_index.view(-1, 1, 1) * num_slots + indices).view(-1)
        token_positions = layout.token_index.view(-1, max_length).index_select(0, sentence_rows)
        token_valid = layout.token_mask.view(-1, max_length).index_select(0, sentence_rows)
        token_positions = token_positions.view(bsz, tgt_len, num_kept)
        token_valid = (token_valid.view(*indices.shape, max_length) & valid.unsqueeze(-1)).view(
            bsz * tgt_len, 1, num_kept
        )
        # source_states is [N, B, C]: token n of source b is row n * B + b of its [N * B, C] view
        flat_positions = (token_positions * num_sources + rows.source_index.view(-1, 1, 1)).view(-1)
        selected = source_states.view(-1, source_dim).index_select(0, flat_positions)
        selected = selected.view(bsz * tgt_len, num_kept, source_dim)  # [B'T, n, C]

        # W^K_h^T q_h for every head: [H, B'T, d_h] @ [H, d_h, C] -> [B'T, H, C]
        head_queries = queries.transpose(0, 1).reshape(num_heads, bsz * tgt_len, head_dim)
        key_weight = self.k_proj.weight.view(num_heads, head_dim, source_dim)
        source_queries = torch.matmul(head_queries, key_weight).transpose(0, 1)
        logits = torch.matmul(source_queries, selected.transpose(1, 2)).float()  # [B'T, H, n]
        probs = F.softmax(logits.masked_fill(~token_valid, float("-inf")), dim=-1)
        token_attention = None
        if need_weights:
            token_attention = probs.new_zeros(bsz, tgt_len, src_len).scatter_add_(
                2, token_positions, probs[:, :weight_heads].mean(dim=1).view(bsz, tgt_len, num_kept)
            )
        probs = self.dropout_module(probs.type_as(queries))
        # sum_j p_hj x_j, then W^V_h per head: [H, B'T, C] @ [H, C, d_h] -> [H, B'T, d_h]
        mixed_states = torch.matmul(probs, selected).transpose(0, 1)
        value_weight = self.v_proj.weight.view(num_heads, head_dim, source_dim).transpose(1, 2)
        output = torch.matmul(mixed_states, value_weight)
        if self.v_proj.bias is not None:
            output = output + self.v_proj.bias.view(num_heads, 1, head_dim)
        output = output.permute(1, 0, 2).reshape(bsz, tgt_len, self.embed_dim).transpose(0, 1)
        output = self.out_proj(output)
        selection_mask = selection_mask_from_indices(indices, valid, num_slots)
        return output, SentenceAttention(None, approx_log, sentence_mask, selection_mask, token_attention)
