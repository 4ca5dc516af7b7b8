"""Sentence-level approximators of the encoder-decoder attention saliency.

Manakul & Gales (2021), Sec. 4.2 and App. A.1: the exact sentence saliency
(Eq. 4) needs the query against every source token. It is approximated by
a sentence-level attention (Eq. 7)::

    alpha~^s_{m,i} = softmax_i( f1(q_m) . f2(k_{i,1..J_i}) )
    f1(q_m) = q_m W^Q                          (Eq. 8)
    f2(...) = y_i W^K                          (Eq. 9)
    y_i     = RNN(k_{i,1}, ..., k_{i,J_i})     (Eq. 10)

* :class:`SentenceEncoder` is the RNN of Eq. 10: a 2-layer bidirectional GRU
  run over each sentence's encoder states, all sentences of the batch as one
  packed sequence (:func:`pack_sentences`); the sentence vector is a linear
  map of the final forward and the final backward state (the authors'
  ``SentLevelNN`` reads the last layer's forward output at the last token and
  backward output at the first token: the same states). It is shared by
  every decoder layer.
* :class:`PoolingSentenceEncoder` is the cheaper replacement Sec. 4.5
  proposes ("replace RNN by a hierarchical attention that runs over
  sentences", cost growing with N1 N2 D instead of N1 N2 D^2 per step of a
  recurrence): multi-head attention pooling of each sentence's encoder
  states (the pooling of Liu & Lapata 2019, Eq. 13-16), heads concatenated
  and mapped to the model dimension.
* :class:`SentenceLevelAttention` holds one decoder layer's ``W^Q``/``W^K``
  (initialized from that layer's cross-attention query/key projections,
  biases included, App. A.1) and computes the per-head alpha~ of Eq. 7.
* :func:`model_free_sentence_scores` is the training-free approximation of
  App. D, Eq. 19: ``phi(q_m) . sum_j phi(k_{i,j})`` with ``phi = ELU + 1``,
  the unnormalized alpha^s (Z_m dropped) that ranks sentences;
  :func:`model_free_log_probabilities` normalizes it per head where a
  distribution is needed (losses, reports).
"""

from typing import Callable, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from mdsfair.modules.activation_checkpointing import checkpointed_call
from mdsfair.modules.heads import split_heads, to_heads
from mdsfair.modules.multi_head_pooling import MultiHeadPooling
from mdsfair.modules.sentence_saliency import SentenceLayout

SENTENCE_ENCODERS = ("bigru", "attention-pooling")


def sentence_token_states(encoder_states: Tensor, layout: SentenceLayout) -> Tensor:
    """``[B, N, C]`` encoder states -> ``[B * S, L, C]``: every sentence slot
    of the batch one row of its tokens (zero-padded to the longest, L)."""
    bsz, num_slots, max_length = layout.token_index.shape
    embed_dim = encoder_states.size(-1)
    gathered = encoder_states.gather(1, layout.token_index.view(bsz, -1, 1).expand(-1, -1, embed_dim))
    return gathered.view(bsz * num_slots, max_length, embed_dim)


class PackedSentences(NamedTuple):
    """Some sentences of a batch as the data of one ``PackedSequence``:
    step ``t`` holds token ``t`` of every sentence longer than ``t``, the
    sentences longest first (the order ``pack_padded_sequence`` gives sorted
    sequences), so that no step reads padding.

    ``rows``: ``[n]`` the sentences' flat slots ``b * S + s``, longest first.
    ``tokens``: ``[T]`` the flat source position ``b * N + j`` of every packed
    row (``T`` the sentences' tokens).
    ``batch_sizes``: ``[steps]`` the number of sentences running at every
    step (int64, on the CPU, as ``PackedSequence`` holds it).
    """

    rows: Tensor
    tokens: Tensor
    batch_sizes: Tensor


def sentences_longest_first(lengths: Tensor) -> Tensor:
    """The non-empty slots of ``lengths`` (``[n]`` token counts), longest
    first (ties in slot order)."""
    real = lengths.gt(0).nonzero(as_tuple=True)[0]
    _, order = lengths.index_select(0, real).sort(descending=True, stable=True)
    return real.index_select(0, order)


def pack_sentences(layout: SentenceLayout, rows: Tensor, source_length: int) -> PackedSentences:
    """:class:`PackedSentences` of the sentence slots ``rows`` (flat
    ``b * S + s``, non-empty, longest first) of ``layout``, over a source of
    ``source_length`` tokens per example."""
    num_slots, max_length = layout.token_index.shape[1:]
    lengths = layout.lengths.view(-1).index_select(0, rows)
    running = torch.arange(int(lengths[0]), device=rows.device).view(-1, 1) < lengths.view(1, -1)  # [steps, n]
    step, sentence = running.nonzero(as_tuple=True)  # packed rows, step by step
    positions = layout.token_index.view(-1, max_length).index_select(0, rows)
    example_start = torch.div(rows, num_slots, rounding_mode="floor") * source_length
    return PackedSentences(
        rows=rows,
        tokens=example_start[sentence] + positions[sentence, step],
        batch_sizes=running.sum(1).cpu(),
    )


class SentenceEncoder(nn.Module):
    """Eq. 10: sentence vectors ``y_i`` from a bidirectional GRU over the
    encoder states of each sentence (App. A.1: 2 layers, hidden size = model
    dimension per direction)."""

    def __init__(self, embed_dim: int, hidden_dim: int, num_layers: int = 2, dropout: float = 0.0):
        super().__init__()
        self.gru = nn.GRU(
            embed_dim,
            hidden_dim,
            num_layers=num_layers,
            bidirectional=True,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.output_proj = nn.Linear(2 * hidden_dim, embed_dim)
        self.checkpoint_chunk_sentences = 0  # see checkpoint_activations
        self.offload_activations = False
        self.reset_parameters()

    def reset_parameters(self):
        """Xavier-normal weights and zero biases (the authors' ``SentLevelNN``)."""
        for name, parameter in self.named_parameters():
            if "weight" in name:
                nn.init.xavier_normal_(parameter)
            else:
                nn.init.zeros_(parameter)

    def checkpoint_activations(self, chunk_sentences: int, offload_to_cpu: bool = False) -> None:
        """Checkpoint the GRU ``chunk_sentences`` sentences at a time (0: off):
        the backward pass then holds the GRU states of one chunk, not those of
        every sentence of the batch."""
        self.checkpoint_chunk_sentences = chunk_sentences
        self.offload_activations = offload_to_cpu

    def forward(self, encoder_states: Tensor, layout: SentenceLayout) -> Tensor:
        """
        Args:
            encoder_states: ``[B, N, C]`` final encoder states (batch first).
            layout: the sentence layout of the source (``sentence_layout``).

        Returns:
            ``[B, S, C]`` sentence vectors, zero for empty sentence slots.

        All sentences of the batch run as one packed sequence
        (:func:`pack_sentences`), which holds every sentence's tokens and no
        padding; under ``--checkpoint-activations`` one chunk of sentences
        at a time (sentences are independent sequences), so that the
        backward pass recomputes the GRU of one chunk.
        """
        bsz, num_slots, _ = layout.token_index.shape
        source_states = encoder_states.reshape(-1, encoder_states.size(-1))
        sentences = torch.zeros(
            bsz * num_slots, self.output_proj.out_features, dtype=encoder_states.dtype, device=encoder_states.device
        )
        rows = sentences_longest_first(layout.lengths.view(-1))
        if rows.numel() == 0:
            return sentences.view(bsz, num_slots, -1)
        chunk = rows.numel()
        if self.checkpoint_chunk_sentences > 0 and torch.is_grad_enabled():
            chunk = self.checkpoint_chunk_sentences
        vectors = []
        for start in range(0, rows.numel(), chunk):
            packed = pack_sentences(layout, rows[start : start + chunk], encoder_states.size(1))
            tokens = source_states.index_select(0, packed.tokens)
            if chunk < rows.numel():
                vectors.append(
                    checkpointed_call(
                        self.sentence_vectors, tokens, packed.batch_sizes, offload_to_cpu=self.offload_activations
                    )
                )
            else:
                vectors.append(self.sentence_vectors(tokens, packed.batch_sizes))
        vectors = torch.cat(vectors)
        sentences = sentences.to(vectors.dtype).index_copy(0, rows, vectors)
        return sentences.view(bsz, num_slots, -1)

    def sentence_vectors(self, tokens: Tensor, batch_sizes: Tensor) -> Tensor:
        """``y_i`` (Eq. 10) ``[n, C]`` of packed sentences (their ``[T, C]``
        token states ``tokens`` and ``batch_sizes``, as
        :class:`PackedSentences` gives them, longest first): the GRU's
        last-layer final forward state (after the sentence's last token) and
        final backward state (after its first), as ``nn.GRU`` gives them for
        a ``PackedSequence``."""
        _, final = self.gru(PackedSequence(tokens, batch_sizes))
        return self.output_proj(torch.cat([final[-2], final[-1]], dim=-1))


class PoolingSentenceEncoder(nn.Module):
    """Sentence vectors ``y_i`` by multi-head attention pooling over each
    sentence's encoder states (the hierarchical-attention replacement of the
    RNN that Sec. 4.5 proposes): per head a softmax over the sentence's
    tokens weighs their value projections (Eq. 13-16 of Liu & Lapata 2019,
    :class:`~mdsfair.modules.multi_head_pooling.MultiHeadPooling`); the heads
    are concatenated and mapped to the model dimension. One pass over the
    tokens, no recurrence: about N * C^2 multiply-adds in one matrix product
    (the value projection) instead of the 2-layer BiGRU's about 30 * N * C^2,
    half of them in sequential steps."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.pooling = MultiHeadPooling(embed_dim, num_heads, dropout=dropout)
        self.output_proj = nn.Linear(embed_dim, embed_dim)
        self.reset_parameters()

    def reset_parameters(self):
        """Xavier-normal weights and zero biases (as the GRU encoder), unit
        layer norm."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_normal_(module.weight)
                nn.init.zeros_(module.bias)
        if self.pooling.head_proj is not None:
            self.pooling.head_proj.reset_parameters()
        self.pooling.head_layer_norm.reset_parameters()

    def forward(self, encoder_states: Tensor, layout: SentenceLayout) -> Tensor:
        """``[B, S, C]`` sentence vectors, as :meth:`SentenceEncoder.forward`."""
        bsz, num_slots, _ = layout.token_index.shape
        tokens = sentence_token_states(encoder_states, layout)
        pooled = self.pooling(tokens, ~layout.token_mask.view(bsz * num_slots, -1))  # [B*S, H, d_h]
        vectors = self.output_proj(pooled.flatten(1)).view(bsz, num_slots, -1)
        return vectors * layout.sentence_mask.unsqueeze(-1).to(vectors.dtype)


class SentenceLevelAttention(nn.Module):
    """One decoder layer's sentence-level encoder-decoder attention (Eq. 7-9),
    per head: ``log alpha~ = log_softmax((x W^Q)_h . (y W^K)_h / sqrt(d_h))``."""

    def __init__(self, embed_dim: int, sentence_dim: int, num_heads: int):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.sentence_query_proj = nn.Linear(embed_dim, embed_dim)
        self.sentence_key_proj = nn.Linear(sentence_dim, embed_dim)

    @torch.no_grad()
    def initialize_from(self, query_proj: nn.Linear, key_proj: nn.Linear):
        """App. A.1: W^Q, W^K start as the word-level cross-attention's
        query/key projections, weights and biases (as the authors' LoBART
        scripts copy every ``sent_q``/``sent_k`` tensor from ``q_proj``/
        ``k_proj``; their BART scripts leave W^Q/W^K at ``nn.Linear``'s
        random initialization)."""
        for target, source in ((self.sentence_query_proj, query_proj), (self.sentence_key_proj, key_proj)):
            if target.weight.shape != source.weight.shape:
                raise ValueError(
                    f"cannot initialize a {tuple(target.weight.shape)} projection from {tuple(source.weight.shape)}"
                )
            target.weight.copy_(source.weight)
            if source.bias is not None:
                target.bias.copy_(source.bias)
            else:
                target.bias.zero_()

    def project_sentences(self, sentence_states: Tensor) -> Tensor:
        """``[B, S, C]`` -> per-head sentence keys ``[B, H, S, d_h]`` (Eq. 9)."""
        return to_heads(self.sentence_key_proj(sentence_states), self.num_heads).transpose(1, 2)

    def project_queries(self, query: Tensor) -> Tensor:
        """``[T, B, C]`` decoder states -> scaled per-head sentence queries
        ``[B, H, T, d_h]`` (Eq. 8)."""
        return split_heads(self.sentence_query_proj(query) * self.scaling, self.num_heads)

    def forward(self, query: Tensor, sentence_keys: Tensor, sentence_mask: Tensor) -> Tensor:
        """
        Args:
            query: ``[T, B, C]`` decoder states entering the cross-attention.
            sentence_keys: ``[B, H, S, d_h]`` from :meth:`project_sentences`.
            sentence_mask: ``[B, S]`` True for real sentences.

        Returns:
            ``[B, H, T, S]`` log alpha~ (Eq. 7), -inf at empty sentence slots.
        """
        return sentence_attention_log_scores(self.project_queries(query), sentence_keys, sentence_mask)


def sentence_attention_log_scores(
    sentence_queries: Tensor, sentence_keys: Tensor, sentence_mask: Tensor, matmul: Callable = torch.matmul
) -> Tensor:
    """Eq. 7 per head: ``log_softmax_i(f1(q_m) . f2(k_i))``.

    Args:
        sentence_queries: ``[B', H, T, d_h]`` from :meth:`SentenceLevelAttention.project_queries`.
        sentence_keys: ``[B, H, S, d_h]`` (``B = B'`` with the default ``matmul``).
        sentence_mask: ``[B', S]`` True for real sentences.
        matmul: the batched product; :meth:`HypothesisRows.matmul` reads
            per-source keys for every decoder row without copying them.

    Returns:
        ``[B', H, T, S]`` log alpha~, -inf at empty sentence slots.
    """
    logits = matmul(sentence_queries, sentence_keys.transpose(-1, -2))
    logits = logits.float().masked_fill(~sentence_mask[:, None, None, :], float("-inf"))
    return F.log_softmax(logits, dim=-1)


def elu_feature_map(x: Tensor) -> Tensor:
    """phi(x) = ELU(x) + 1 (App. D), a positive feature map (the + 1 in place
    on ELU's fresh output: ELU's gradient needs its input, not its output)."""
    return F.elu(x).add_(1.0)


def model_free_sentence_keys(keys: Tensor, src_sent_ids: Tensor, num_slots: int, num_heads: int) -> Tensor:
    """``sum_j phi(k_{i,j})`` of Eq. 19, per head.

    Args:
        keys: ``[N, B, C]`` projected word keys, as the key projection of
            the ``[N, B, C]`` encoder output gives them (``C = H * d_h``).
        src_sent_ids: ``[B, N]`` sentence of every token, -1 at padding.
        num_slots: sentence slots ``S`` of the output.
        num_heads: ``H``.

    Returns:
        ``[B, H, S, d_h]`` sentence key sums (padding tokens excluded), from
        one ``index_add_`` of every token's ``phi(k)`` into its
        (source, sentence) row.
    """
    src_len, bsz, dim = keys.shape
    # token n of source b is row n * B + b of the [N * B, C] view; padding goes to a spare last row
    rows = src_sent_ids + torch.arange(bsz, device=keys.device).unsqueeze(1) * num_slots
    rows = rows.masked_fill(src_sent_ids.lt(0), bsz * num_slots).t().reshape(-1)
    features = elu_feature_map(keys.float().reshape(src_len * bsz, dim))
    sums = features.new_zeros(bsz * num_slots + 1, dim).index_add_(0, rows, features)[:-1]
    return to_heads(sums.view(bsz, num_slots, dim), num_heads).transpose(1, 2)


def model_free_sentence_scores(
    queries: Tensor, sentence_key_sums: Tensor, sentence_mask: Tensor, matmul: Callable = torch.matmul
) -> Tensor:
    """App. D, Eq. 19: ``phi(q_m) . sum_j phi(k_{i,j})`` per head, the
    approximation of the unnormalized ``sum_j exp(q_m . k_{i,j})`` (Z_m
    dropped: it does not change a head's ranking).

    Args:
        queries: ``[B, H, T, d_h]`` scaled word-level cross-attention queries
            (the authors' ``q_proj(query) * scaling``).
        sentence_key_sums: ``[B, H, S, d_h]`` from :func:`model_free_sentence_keys`.
        sentence_mask: ``[B, S]``.
        matmul: the batched product (see :func:`sentence_attention_log_scores`).

    Returns:
        ``[B, H, T, S]`` positive scores, 0 at empty sentence slots.
    """
    scores = matmul(elu_feature_map(queries.float()), sentence_key_sums.transpose(-1, -2))
    return scores.masked_fill(~sentence_mask[:, None, None, :], 0.0)


def model_free_log_probabilities(scores: Tensor, sentence_mask: Tensor) -> Tensor:
    """Eq. 19's scores ``[B, H, T, S]`` normalized over sentences per head:
    log alpha~ ``[B, H, T, S]``, -inf at empty sentence slots."""
    log_scores = scores.clamp(min=torch.finfo(scores.dtype).tiny).log()
    log_scores = log_scores.masked_fill(~sentence_mask[:, None, None, :], float("-inf"))
    return F.log_softmax(log_scores, dim=-1)


def approximator_parameter_names(named_parameters) -> Tuple[str, ...]:
    """Names of the approximator's parameters (theta~ of Eq. 13-14) among a
    model's ``named_parameters()``."""
    markers = ("sentence_encoder.", "sentence_attention.")
    return tuple(name for name, _ in named_parameters if any(marker in name for marker in markers))
