"""Sentence structure of a flat source and the exact sentence saliency.

Manakul & Gales (2021), Eq. 4: the saliency of input sentence ``i`` at
decoding step ``m`` is the share of the (softmax) encoder-decoder attention
that falls on its tokens::

    alpha^s_{m,i} = 1/Z_m * sum_{j in sentence i} exp(q_m . k_{i,j})

Sentences are given by ``src_sent_ids`` ([B, N], the sentence of every
source token, -1 at padding; mdsfair's data contract), never by
full-stop token ids.
"""

from typing import NamedTuple

import torch
from torch import Tensor


class SentenceLayout(NamedTuple):
    """Where every sentence's tokens are in a right-padded flat source.

    ``token_index[b, s, l]`` is the position of the ``l``-th token of
    sentence ``s`` of example ``b`` (0 where ``token_mask`` is False);
    ``lengths[b, s]`` its number of tokens; ``sentence_mask[b, s]`` is True
    for real (non-empty) sentences.
    """

    token_index: Tensor
    token_mask: Tensor
    lengths: Tensor
    sentence_mask: Tensor


def num_sentences(src_sent_ids: Tensor) -> int:
    """Number of sentence slots ``S`` of a batch (largest id + 1)."""
    if src_sent_ids.numel() == 0:
        return 0
    return int(src_sent_ids.max().item()) + 1


def sentence_layout(src_sent_ids: Tensor, num_sentence_slots: int = None) -> SentenceLayout:
    """Tables of the token positions of every sentence (vectorized: one
    stable sort over the sentence ids, no loop over sentences). ``src_sent_ids``
    ``[B, N]`` as the batch check passed it
    (:func:`mdsfair.data.side_inputs.check_side_inputs`)."""
    bsz, src_len = src_sent_ids.shape
    if num_sentence_slots is None:
        num_sentence_slots = max(num_sentences(src_sent_ids), 1)
    valid = src_sent_ids.ge(0)
    sent_ids = src_sent_ids.clamp(min=0)
    lengths = torch.zeros(bsz, num_sentence_slots, dtype=torch.long, device=src_sent_ids.device)
    lengths.scatter_add_(1, sent_ids, valid.long())
    max_length = max(int(lengths.max().item()), 1)
    starts = lengths.cumsum(dim=1) - lengths

    # Group the positions by sentence (padding last); the rank of a token
    # inside its sentence is its position in that order minus the start.
    sort_key = torch.where(valid, src_sent_ids, torch.full_like(src_sent_ids, num_sentence_slots))
    _, order = torch.sort(sort_key, dim=1, stable=True)
    sorted_sent = sort_key.gather(1, order)
    sorted_valid = sorted_sent.lt(num_sentence_slots)
    sorted_sent = sorted_sent.clamp(max=num_sentence_slots - 1)
    rank = torch.arange(src_len, device=src_sent_ids.device).unsqueeze(0) - starts.gather(1, sorted_sent)

    # Padding positions are written to one extra slot that is dropped.
    num_slots = num_sentence_slots * max_length
    flat_slot = (sorted_sent * max_length + rank.clamp(min=0, max=max_length - 1)).masked_fill(~sorted_valid, num_slots)
    token_index = torch.zeros(bsz, num_slots + 1, dtype=torch.long, device=src_sent_ids.device)
    token_index.scatter_(1, flat_slot, order)
    token_index = token_index[:, :num_slots].view(bsz, num_sentence_slots, max_length)
    token_mask = torch.arange(max_length, device=src_sent_ids.device).view(1, 1, -1) < lengths.unsqueeze(-1)
    token_index = token_index.masked_fill(~token_mask, 0)
    return SentenceLayout(token_index, token_mask, lengths, lengths.gt(0))


def sentence_saliency(token_attention: Tensor, src_sent_ids: Tensor, num_sentence_slots: int) -> Tensor:
    """Exact sentence saliency (Eq. 4): token attention summed per sentence.

    Args:
        token_attention: ``[B, ..., N]`` softmax attention over source tokens
            (any number of middle dims, e.g. heads and target steps).
        src_sent_ids: ``[B, N]`` sentence of each source token, -1 at padding.
        num_sentence_slots: ``S``.

    Returns:
        ``[B, ..., S]``: per head and step, the attention mass of each
        sentence (padding tokens contribute nothing).
    """
    bsz, src_len = src_sent_ids.shape
    if token_attention.size(0) != bsz or token_attention.size(-1) != src_len:
        raise ValueError(
            f"token_attention {tuple(token_attention.shape)} does not match src_sent_ids {tuple(src_sent_ids.shape)}"
        )
    middle = token_attention.shape[1:-1]
    flat = token_attention.reshape(bsz, -1, src_len)
    weights = flat.masked_fill(src_sent_ids.lt(0).unsqueeze(1), 0.0)
    index = src_sent_ids.clamp(min=0).unsqueeze(1).expand_as(flat)
    saliency = flat.new_zeros(bsz, flat.size(1), num_sentence_slots).scatter_add_(2, index, weights)
    return saliency.view(bsz, *middle, num_sentence_slots)
