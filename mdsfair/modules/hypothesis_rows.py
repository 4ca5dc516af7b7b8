"""Decoder rows (beam hypotheses) that read a cache kept once per source.

In beam search fairseq's ``SequenceGenerator`` expands the encoder output to
``B * beam`` rows, reorders it and every incremental state with ``new_order``
at each step, and compacts the batch when sources finish. A cross-attention
that keeps its encoder-side keys and values once per source (``[B, ...]``)
never copies them: only the small vector ``source_index`` (the source of
every row) is reordered, and each row looks its source up.

:class:`HypothesisRows` is that row -> source map plus each row's rank among
the rows of its source, so that per-row queries can be grouped by source for
one batched matrix product against the per-source keys/values.
"""

from typing import NamedTuple

import torch
from torch import Tensor


class HypothesisRows(NamedTuple):
    """Which source every decoder row reads.

    ``source_index [B']``: the source example of each row; ``rank [B']``:
    the row's position among the rows of its source; ``num_sources``: ``B``,
    the batch of the per-source tensors; ``rows_per_source``: the largest
    number of rows of one source; ``is_identity``: rows are the sources
    themselves (teacher forcing, or decoding before any reordering), in which
    case every lookup is a no-op.
    """

    source_index: Tensor
    rank: Tensor
    num_sources: int
    rows_per_source: int
    is_identity: bool
    #: the rows are every source's ``rows_per_source`` hypotheses back to back in
    #: source order (``source_index == arange(B).repeat_interleave(R)``, the
    #: layout of beam search before any source finishes, and always under
    #: mdsfair's static decoding): grouping by source is then a view
    blocked: bool = False

    @classmethod
    def identity(cls, num_sources: int, device) -> "HypothesisRows":
        index = torch.arange(num_sources, device=device)
        return cls(index, torch.zeros_like(index), num_sources, 1, True)

    @classmethod
    def from_source_index(cls, source_index: Tensor, num_sources: int) -> "HypothesisRows":
        """Ranks from the row counts of every source (no loop over sources).

        Beam search keeps the rows of a source together and in source order
        (``new_order`` is ``source * beam + hypothesis``); then a row's rank
        is its position minus its source's first row. Other orders take one
        stable sort of ``source_index``.
        """
        if source_index.dim() != 1:
            raise ValueError(f"source_index must be [rows], got shape {tuple(source_index.shape)}")
        if source_index.numel() == 0:
            return cls(source_index, source_index.clone(), num_sources, 1, False)
        counts = torch.bincount(source_index.clamp(0, max(num_sources - 1, 0)), minlength=num_sources)
        in_order = source_index[1:].ge(source_index[:-1]).all()
        # everything the host needs, read back at once: one synchronization per reordering
        low, high, sorted_rows, most, fewest = torch.stack(
            [source_index.min(), source_index.max(), in_order.long(), counts.max(), counts.min()]
        ).tolist()
        if low < 0 or high >= num_sources:
            raise ValueError(f"source_index must lie in [0, {num_sources}), got {source_index.tolist()}")
        starts = counts.cumsum(0) - counts
        positions = torch.arange(source_index.numel(), device=source_index.device)
        if sorted_rows:
            rank = positions - starts[source_index]
        else:
            order = torch.sort(source_index, stable=True).indices
            rank = torch.empty_like(source_index).index_copy_(0, order, positions - starts[source_index[order]])
        blocked = bool(sorted_rows) and most == fewest
        return cls(source_index, rank, num_sources, int(most), False, blocked)

    def lookup(self, per_source: Tensor) -> Tensor:
        """``[B, ...]`` -> ``[B', ...]``, each row its source's entry. Meant
        for small tensors (masks, sentence tables); for the large keys and
        values use :meth:`matmul`."""
        return per_source if self.is_identity else per_source.index_select(0, self.source_index)

    def to_sources(self, rows: Tensor) -> Tensor:
        """``[B', ...]`` -> ``[B, R, ...]`` (R = ``rows_per_source``), zeros
        where a source has fewer rows."""
        if self.is_identity:
            return rows.unsqueeze(1)
        if self.blocked:
            return rows.view(self.num_sources, self.rows_per_source, *rows.shape[1:])
        grouped = rows.new_zeros(self.num_sources, self.rows_per_source, *rows.shape[1:])
        grouped[self.source_index, self.rank] = rows
        return grouped

    def to_rows(self, grouped: Tensor) -> Tensor:
        """Inverse of :meth:`to_sources`: ``[B, R, ...]`` -> ``[B', ...]``."""
        if self.is_identity:
            return grouped.squeeze(1)
        if self.blocked:
            return grouped.reshape(self.num_sources * self.rows_per_source, *grouped.shape[2:])
        return grouped[self.source_index, self.rank]

    def matmul(self, row_input: Tensor, per_source: Tensor) -> Tensor:
        """``row_input [B', H, T, X] @ per_source[source] [H, X, Y]`` for every
        row, as one batched product per source (its rows stacked along T):
        the per-source tensor is read in place, never expanded per row.

        Returns ``[B', H, T, Y]``.
        """
        if self.is_identity:
            return torch.matmul(row_input, per_source)
        _, num_heads, tgt_len, inner = row_input.shape
        grouped = self.to_sources(row_input).transpose(1, 2)  # [B, H, R, T, X]
        grouped = grouped.reshape(self.num_sources, num_heads, self.rows_per_source * tgt_len, inner)
        product = torch.matmul(grouped, per_source)
        product = product.view(self.num_sources, num_heads, self.rows_per_source, tgt_len, -1).transpose(1, 2)
        return self.to_rows(product)
