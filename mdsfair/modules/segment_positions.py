"""Positions that restart at every segment (document, paragraph, ...) of a
flat token stream, and extension of learned position tables.

A segment is a run of equal, non-negative ids along the sequence (the
``src_doc_ids`` / ``src_para_ids`` of the data contract); negative ids mark
padding. HierEncDec (Shen et al., 2023, Sec. 4.1.1 "Position Restart") gives
every document positions 0, 1, 2, ... so that the encoder does not read a
later document as the continuation of the previous one.
"""

from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

TILING_METHODS = ("beltagy", "authors", "mirror")


def segment_start_mask(segment_ids: Tensor, valid: Optional[Tensor] = None) -> Tensor:
    """``[B, T]`` bool: True at the first token of every segment (padding,
    i.e. negative ids, is never a start); ``valid``: ``segment_ids.ge(0)``
    if the caller has it."""
    previous = F.pad(segment_ids[:, :-1], (1, 0), value=-1)
    return torch.bitwise_and(segment_ids.ge(0) if valid is None else valid, segment_ids.ne(previous))


def segment_boundaries(ids: Tensor) -> Tensor:
    """``[B, T]`` bool: True where a run of equal ids (a document, or a run of
    padding) starts, and at every example's first token: unlike
    :func:`segment_start_mask`, padding runs start segments too (the
    variable-length sequences of HierEncDec's flash path)."""
    boundary = torch.ones_like(ids, dtype=torch.bool)
    torch.ne(ids[:, 1:], ids[:, :-1], out=boundary[:, 1:])
    return boundary


class SegmentRuns(NamedTuple):
    """The segments of a ``[B, T]`` id tensor, computed once per batch
    (:func:`segment_runs`) and shared by what reads them: HierEncDec's
    position restart (Shen et al., 2023, Sec. 4.1.1) and its document
    blocks (Sec. 4.1).

    Attributes:
        start_mask: ``[B, T]`` bool, :func:`segment_start_mask`.
        segment_count: ``[B, T]`` segments started up to each token (1 in
            the first segment, 0 before it): the 1-based segment of every
            token.
        offsets: ``[B, T]`` position of every token within its segment,
            -1 at padding (:func:`positions_within_segments`).
        offset_range: the smallest and largest offset (0-dim tensors, not
            read here): the smallest is -1 exactly when there is padding,
            the largest is the longest segment's length minus one.
    """

    start_mask: Tensor
    segment_count: Tensor
    offsets: Tensor
    offset_range: Tuple[Tensor, Tensor]


def segment_runs(segment_ids: Tensor) -> SegmentRuns:
    """:class:`SegmentRuns` of ``segment_ids`` (negative ids: padding)."""
    valid = segment_ids.ge(0)
    start_mask = segment_start_mask(segment_ids, valid)
    time = torch.arange(segment_ids.size(1), device=segment_ids.device)
    # each token's offset from the last start at or before it (the running maximum of the starts' positions)
    offsets = time - torch.where(start_mask, time, 0).cummax(dim=1).values
    offsets.masked_fill_(segment_ids.lt(0), -1)
    offset_range = torch.aminmax(offsets) if offsets.numel() else (offsets.new_full((), -1),) * 2
    return SegmentRuns(start_mask, start_mask.cumsum(dim=1), offsets, tuple(offset_range))


def segment_start_index(segment_ids: Tensor) -> Tensor:
    """``[B, T]``: index of the first token of each token's segment (the
    running maximum of the start positions; meaningless at padding)."""
    time = torch.arange(segment_ids.size(1), device=segment_ids.device).expand_as(segment_ids)
    starts = torch.where(segment_start_mask(segment_ids), time, torch.zeros_like(time))
    return starts.cummax(dim=1).values


def positions_within_segments(segment_ids: Tensor) -> Tensor:
    """``[B, T]``: 0, 1, 2, ... restarting at every segment, -1 at padding."""
    return segment_runs(segment_ids).offsets


def segment_ids_from_start_tokens(tokens: Tensor, start_token: int, padding_idx: int) -> Tensor:
    """Segment ids of a token stream in which every segment opens with
    ``start_token`` (HierEncDec's ``<s>`` before each document): the number of
    start tokens seen so far minus one; -1 at padding and before the first
    start token."""
    ids = tokens.eq(start_token).long().cumsum(dim=1) - 1
    return ids.masked_fill(tokens.eq(padding_idx), -1)


def restarted_position_rows(segment_ids: Tensor, padding_idx: int, runs: Optional[SegmentRuns] = None) -> Tensor:
    """``[B, T]`` rows of a fairseq ``LearnedPositionalEmbedding`` table for
    positions that restart per segment: position ``p`` is row
    ``p + padding_idx + 1``, padding (offset -1) is row ``padding_idx``.
    ``runs``: :func:`segment_runs` of ``segment_ids`` if the caller has them."""
    runs = segment_runs(segment_ids) if runs is None else runs
    return runs.offsets + (padding_idx + 1)


def position_table_overflow(rows: Tensor, weight: Tensor, padding_idx: int, runs: Optional[SegmentRuns] = None):
    """``(failed, message)``: whether ``rows`` reach past the table
    ``weight`` (a 0-dim bool tensor, not read here) and a function giving
    the refusal. ``runs``: the :class:`SegmentRuns` that ``rows`` were made
    of, whose longest offset is then the largest row."""
    if runs is not None:
        longest = runs.offset_range[1] + (padding_idx + 1)
    else:
        longest = rows.max() if rows.numel() else rows.new_zeros(())

    def message():
        return (
            f"a segment is {int(longest) - padding_idx} tokens long but the position table has only "
            f"{weight.size(0) - padding_idx - 1} positions; raise --max-source-positions"
        )

    return longest.ge(weight.size(0)), message


def restarted_position_embedding(segment_ids: Tensor, weight: Tensor, padding_idx: int, rows: Tensor = None) -> Tensor:
    """Look up a fairseq ``LearnedPositionalEmbedding`` table with positions
    that restart per segment (``rows``: :func:`restarted_position_rows`,
    already checked against the table; else computed and checked here).

    fairseq stores position ``p`` in row ``p + padding_idx + 1`` and padding
    in row ``padding_idx``; ``LearnedPositionalEmbedding.forward`` refuses
    explicit positions, so the table is read with ``F.embedding`` directly.
    """
    if rows is None:
        rows = restarted_position_rows(segment_ids, padding_idx)
        failed, message = position_table_overflow(rows, weight, padding_idx)
        if bool(failed):
            raise ValueError(message())
    return F.embedding(rows, weight, padding_idx)


def tile_position_table(weight: Tensor, num_rows: int, padding_idx: int, method: str = "beltagy") -> Tensor:
    """Extend a learned position table to ``num_rows`` rows by repetition.

    ``beltagy`` (the paper, Sec. 5.3, following Longformer): the
    ``padding_idx + 1`` offset rows are kept once and the real positions are
    repeated, so position ``p`` reads pretrained position ``p mod P``.
    ``authors``: the authors' code tiles the whole table including the offset
    rows (``cat([W] * (n // m) + [W[: n % m]])``), so position ``p`` reads
    pretrained row ``(p + offset) mod m``.
    ``mirror``: LoBART (Manakul & Gales 2021) alternates the whole table and
    its reverse, ``cat([W, flip(W), W, flip(W), ...])[:n]`` (potsawee/longsum0
    ``models/localattn.py``, ``expand_learned_embed_positions``), so that
    neighbouring positions read the same or neighbouring rows across every border.
    """
    if method not in TILING_METHODS:
        raise ValueError(f"unknown position tiling {method!r}; choose one of {TILING_METHODS}")
    old_rows = weight.size(0)
    if num_rows < old_rows:
        raise ValueError(
            f"cannot shrink a position table from {old_rows} to {num_rows} rows; "
            "use a --max-source-positions / --max-target-positions at least as large as the checkpoint's"
        )
    if method == "mirror":
        pair = torch.cat([weight, weight.flip(0)], dim=0)
        repeats = -(-num_rows // pair.size(0))
        return pair.repeat(repeats, 1)[:num_rows].clone()
    if method == "authors":
        repeats = -(-num_rows // old_rows)
        return weight.repeat(repeats, 1)[:num_rows].clone()
    offset = padding_idx + 1
    positions = weight[offset:]
    needed = num_rows - offset
    repeats = -(-needed // positions.size(0))
    return torch.cat([weight[:offset], positions.repeat(repeats, 1)[:needed]], dim=0)
