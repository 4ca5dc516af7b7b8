"""HierEncDec's hierarchical decoder cross-attention (Shen et al., 2023,
Sec. 4.2, Eq. 3-5), vectorized over documents with segment operations.

For every head and decoder position, with cross-attention scores ``a`` over
the source tokens and document ``n`` holding keys ``a_{n,0..k_n}`` (``a_{n,0}``
its start-of-document token):

    Eq. 3   softmax within each document:      softmax(a_{n,0}, ..., a_{n,k_n})
    Eq. 4   document weights from SOD scores:  s = softmax(a_{0,0}, ..., a_{N,0})
    Eq. 5   w_{n,i} = s_n * softmax(a_{n,.})_i

Eq. 5 is computed in log space as corrected logits
``a_{n,i} - logsumexp_i(a_{n,.}) + log s_n``; their exponentials sum to one,
so fairseq's own softmax over the corrected logits returns exactly Eq. 5 and
the rest of ``MultiheadAttention`` (incremental key/value cache, dropout,
weights returned for alignment) is reused unchanged. The per-document
logsumexp is a scatter (segment) reduction over document ids: no loop over
documents, any batch size, padding as document -1.
"""

from typing import Optional

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.modules.segment_positions import segment_start_index, segment_start_mask


def segment_logsumexp(scores: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """logsumexp of ``scores [B, ..., S]`` within each segment of
    ``segment_ids [B, 1, ..., 1, S]`` (one row of ids per batch element,
    broadcast over the other dimensions; values ``0 .. num_segments - 1``),
    returned as ``[B, ..., num_segments]`` (-inf for empty segments)."""
    rows, length = segment_ids.size(0), segment_ids.size(-1)
    if segment_ids.numel() != rows * length or rows not in (1, scores.size(0)):
        raise ValueError(
            f"segment ids {tuple(segment_ids.shape)}: one row of ids per batch element of scores "
            f"{tuple(scores.shape)} expected"
        )
    membership = torch.nn.functional.one_hot(segment_ids.reshape(rows, length), num_segments).to(scores.dtype)
    segment_ids = segment_ids.expand_as(scores)
    shape = scores.shape[:-1] + (num_segments,)
    maxima = scores.new_full(shape, float("-inf")).scatter_reduce(
        -1, segment_ids, scores.detach(), reduce="amax", include_self=True
    )
    finite_maxima = maxima.masked_fill(maxima.isinf(), 0.0)
    shifted = (scores - finite_maxima.gather(-1, segment_ids)).exp()
    # the segment sums as one matrix product with the one-hot membership, not a
    # float scatter_add: CUDA's scatter_add adds in whatever order its atomics
    # land, so the same input gave outputs differing in the last bits from
    # one call to the next (a reloaded model did not reproduce its outputs)
    sums = torch.bmm(shifted.reshape(rows, -1, length), membership).view(shape)  # [B, (...), S] @ [B, S, N]
    # an empty segment (the padding segment of an unpadded example) sums to 0: its
    # logsumexp is -inf, and its log is taken of 1 instead, so that the backward pass
    # through the matrix product multiplies zeros, not 1/0, by the membership's zeros
    empty = sums.eq(0)
    return sums.masked_fill(empty, 1.0).log().masked_fill(empty, float("-inf")) + finite_maxima


def hierarchical_attention_logits(scores: Tensor, document_ids: Tensor) -> Tensor:
    """Log of the Eq. 5 weights.

    Args:
        scores: ``[B, H, T, S]`` scaled cross-attention scores (Eq. 3's ``a``).
        document_ids: ``[B, S]`` document of every source token, -1 at
            padding; each document's first token is its SOD token (Eq. 4).

    Returns:
        ``[B, H, T, S]``: ``log w`` of Eq. 5, -inf at padding; the
        exponentials of every row sum to one.
    """
    if document_ids.shape != (scores.size(0), scores.size(-1)):
        raise ValueError(
            f"document ids {tuple(document_ids.shape)} do not match the cross-attention keys "
            f"(batch {scores.size(0)}, source length {scores.size(-1)})"
        )
    padding = document_ids.lt(0)
    num_documents = int(document_ids.max()) + 1
    segments = document_ids.masked_fill(padding, num_documents)  # padding: an extra, discarded segment
    segments = segments.view(segments.size(0), 1, 1, -1)
    within_document = scores - segment_logsumexp(scores, segments, num_documents + 1).gather(
        -1, segments.expand_as(scores)
    )  # Eq. 3 in log space
    starts = segment_start_mask(document_ids).view_as(segments)
    start_scores = scores.masked_fill(~starts, float("-inf"))
    log_document_weight = start_scores - start_scores.logsumexp(dim=-1, keepdim=True)  # Eq. 4 at each SOD
    sod_of_token = segment_start_index(document_ids).view_as(segments).expand_as(scores)
    logits = within_document + log_document_weight.gather(-1, sod_of_token)  # Eq. 5
    return logits.masked_fill(padding.view_as(segments), float("-inf"))


class HierarchicalCrossAttention(MultiheadAttention):
    """fairseq encoder-decoder ``MultiheadAttention`` (same parameters and
    state-dict keys) whose softmax follows Eq. 3-5 while
    :attr:`key_document_ids` is set, and is the stock softmax otherwise.

    The decoder sets ``key_document_ids`` (``[batch, source length]``, from
    the encoder output, hence reordered with it during beam search) for the
    duration of one forward pass.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.encoder_decoder_attention:
            raise ValueError("HierarchicalCrossAttention is an encoder-decoder attention")
        self.key_document_ids: Optional[Tensor] = None

    def apply_sparse_mask(self, attn_weights: Tensor, tgt_len: int, src_len: int, bsz: int) -> Tensor:
        if self.key_document_ids is None:
            return attn_weights
        scores = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
        logits = hierarchical_attention_logits(scores, self.key_document_ids)
        return logits.view(bsz * self.num_heads, tgt_len, src_len)
