"""Which source sentences every decoder row keeps, and where their tokens lie.

Manakul & Gales (2021), Eq. 6: at every decoder step the top ``r`` source
sentences by a saliency averaged over heads (App. A.4) are kept::

    I^r_m = [(i, j) s.t. i in top-r(alpha^s_{m,i})]

:func:`select_top_r_sentences` picks them (:func:`average_over_hypotheses`
shares one choice among a source's beam hypotheses, as the authors' code
does); :func:`kept_token_layout` lays their tokens out back to back for the
gathered attention of :class:`~mdsfair.modules.sparse_cross_attention.SparseCrossAttention`,
sized on the host by :func:`kept_token_bounds`.
"""

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.sentence_saliency import SentenceLayout


def select_top_r_sentences(scores: Tensor, sentence_mask: Tensor, top_r: int) -> Tuple[Tensor, Tensor]:
    """Eq. 6: the ``top_r`` highest-scoring real sentences per query.

    ``scores [B, T, S]`` (averaged over heads), ``sentence_mask [B, S]``
    True for real sentences -> ``indices [B, T, k]`` and ``valid [B, T, k]``
    (``k = min(top_r, S)``; False where an example has fewer than ``k``
    sentences)."""
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


def kept_token_layout(
    indices: Tensor, valid: Tensor, rows: HypothesisRows, layout: SentenceLayout, bounds: Optional[Tensor] = None
) -> KeptTokens:
    """The kept tokens of ``indices [B', T, k]`` (the selected sentences,
    ``valid`` False for a source with fewer than ``k``), vectorized: slot
    ``p`` of a row belongs to the selected sentence whose running token
    count first exceeds ``p`` (one ``searchsorted``).

    ``n`` is the most tokens any row keeps at this step, read from the
    device; with ``bounds`` (:func:`kept_token_bounds`, which the encoder
    sets in evaluation) it is the most tokens any ``k`` sentences of the sources
    hold, known on the host: the extra slots are padding (``valid``
    False), and no step waits for the device to size its layout."""
    num_sources, num_slots, max_length = layout.token_index.shape
    bsz, tgt_len, k = indices.shape
    sentence_rows = (rows.source_index.view(-1, 1, 1) * num_slots + indices).view(-1, k)  # [B'T, k]
    lengths = layout.lengths.view(-1).index_select(0, sentence_rows.view(-1)).view(-1, k) * valid.view(-1, k)
    ends = lengths.cumsum(dim=1)
    if bounds is not None:
        num_kept = int(bounds[min(k, bounds.numel()) - 1])
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
