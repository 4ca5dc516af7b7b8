"""Where the documents of a batch lie in the flat ``[B, T]`` source, as the
blocks of HierEncDec's blocked document attention (Shen et al., 2023,
Sec. 4.1; :mod:`mdsfair.modules.document_blocked_attention`), bucketed by
length.

Every document is one block of queries, keys and values, gathered from the
source with one index; the blocks are bucketed by document length (powers of
two from :attr:`DocumentLayout.SHORTEST_BUCKET` tokens), so that a batch
mixing many short documents with one long one costs what its documents cost,
not its most documents times its longest document. :class:`DocumentLayout`
is built once per encoder forward, with one host read for what the host must
know, and shared by all layers.
"""

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from mdsfair.modules.segment_positions import segment_boundaries, segment_runs, segment_start_mask
from mdsfair.modules.source_structure import SourceStructure


@dataclass
class DocumentLayout:
    """Where the documents of a batch lie in the flat ``[B, T]`` source, and
    the length buckets of their blocks.

    Built once per encoder forward and shared by all layers. Every document
    is one block of its bucket: documents of up to ``S`` tokens
    (:attr:`SHORTEST_BUCKET`) share the first bucket, those of ``S * 2^(k-1)``
    to ``S * 2^k`` tokens bucket ``k``, whose blocks are ``S * 2^k`` slots
    long (the longest document's bucket: as long as that document). A
    document of ``n`` tokens thus costs at most ``m * (m + D)`` attention
    scores per head, ``m = max(2n, S)``, whatever the other documents of the
    batch (``D``: the most documents of an example).

    Attributes:
        document_ids: ``[B, T]`` document of each token, -1 at padding.
        start_mask: ``[B, T]`` True at each document's first (SOD) token.
        document_lengths: ``[B, D]`` tokens per document (0: no such document).
        sod_token_rows: ``[B * D]`` row of the flattened ``[B * T]`` source
            holding each document's SOD token (a missing document: the
            batch's last token).
        buckets: ``(documents, block length)`` of every bucket, shortest
            first (host integers).
        bucket_documents: per bucket, ``[documents]`` index into the
            ``B * D`` documents of its blocks; None when one bucket holds
            every document in order.
        sod_keys_in_blocks: whether every block's keys end with the ``D``
            SOD tokens of its example (Sec. 4.1.2), for its SOD query; chosen
            where they at most double the block slots of the batch. Else the
            blocks hold their documents only, and the SOD rows are
            recomputed over their document and the other SODs
            (:meth:`sod_key_mask`).
        block_index: ``[sum over buckets of documents * (length + K)]``
            index into the flattened ``[B * T]`` sequence of every block
            slot, bucket after bucket: each block's ``length`` slots (slots
            past the document's end repeat its SOD and are masked), then,
            with :attr:`sod_keys_in_blocks`, the ``K = D`` SOD tokens of its
            example (else ``K = 0``): one gather makes a block's queries (its
            first ``length`` slots), keys and values.
        unblock_index: ``[B * T]`` index into the block slots (bucket after
            bucket, ``documents * length`` each) of every token; padding
            points at slot 0 (its row is zeroed, :attr:`padding_rows`).
        padding_rows: ``[B * T, 1]`` True at padding, or None when the batch
            has none (read with the layout's one host read).
    """

    document_ids: Tensor
    start_mask: Tensor
    document_lengths: Tensor
    sod_token_rows: Tensor
    buckets: Tuple[Tuple[int, int], ...]
    bucket_documents: Optional[Tuple[Tensor, ...]]
    sod_keys_in_blocks: bool
    block_index: Tensor
    unblock_index: Tensor
    padding_rows: Optional[Tensor] = None
    _segments: Optional[Tuple[Tensor, int, bool]] = field(default=None, repr=False, compare=False)
    #: (segments, longest segment, padded) of :meth:`flat_segments`, when read with the layout
    _segment_sizes: Optional[Tuple[int, int, bool]] = field(default=None, repr=False, compare=False)
    _sod_key_mask: Optional[Tensor] = field(default=None, repr=False, compare=False)
    _block_bias: Dict[torch.dtype, Tuple[Tensor, ...]] = field(default_factory=dict, repr=False, compare=False)

    #: Block length of the first bucket (documents of at most this many tokens); bucket k's is twice bucket k-1's.
    SHORTEST_BUCKET = 16

    def flat_segments(self) -> Tuple[Tensor, int, bool]:
        """The documents and padding runs of the flat ``[B * T]`` source as
        variable-length sequences: int32 offsets ``[S + 1]`` (``varlen_attn``'s
        ``cu_seq``), the longest one's length, and whether there is padding;
        computed once per layout, then shared by all layers. With the sizes
        read by :meth:`from_document_ids` (on a GPU, in the batch's one host
        read) no further read; else one host read here."""
        if self._segments is None:
            ids = self.document_ids
            batch_size, length = ids.shape
            boundary = segment_boundaries(ids)
            if self._segment_sizes is not None:
                num_segments, longest, padded = self._segment_sizes
                # the first token of every segment, without reading the boundaries back
                segment = boundary.view(-1).cumsum(dim=0) - 1
                starts = segment.new_full((num_segments,), batch_size * length).scatter_reduce_(
                    0, segment, torch.arange(batch_size * length, device=ids.device), reduce="amin"
                )
            else:
                starts = boundary.view(-1).nonzero().view(-1)
            offsets = torch.cat([starts, starts.new_full((1,), batch_size * length)])
            if self._segment_sizes is None:
                longest, padded = torch.stack([offsets.diff().max(), ids.lt(0).any().long()]).tolist()
            self._segments = (offsets.to(torch.int32), longest, bool(padded))
        return self._segments

    def sod_key_mask(self) -> Tensor:
        """``[B, 1, D, T]`` bool: the keys of each document's SOD query, its
        own document and every SOD of its example (Sec. 4.1.2); a missing
        document's row holds the SODs only. Built once per layout."""
        if self._sod_key_mask is None:
            documents = torch.arange(self.num_documents, device=self.document_ids.device).view(1, -1, 1)
            own_document = self.document_ids.unsqueeze(1).eq(documents)
            self._sod_key_mask = (own_document | self.start_mask.unsqueeze(1)).unsqueeze(1)
        return self._sod_key_mask

    def sod_rows(self) -> Tuple[Tensor, Tensor]:
        """``[B * D]`` rows of the flat source holding each document's SOD
        token: for reading (a missing document reads the batch's last token,
        :attr:`sod_token_rows`) and for writing (a missing document writes the extra row
        ``B * T``)."""
        read = self.sod_token_rows
        write = read.masked_fill(self.document_lengths.view(-1).eq(0), self.document_ids.numel())
        return read, write

    @property
    def num_documents(self) -> int:
        return self.document_lengths.size(1)

    @classmethod
    def from_document_ids(
        cls,
        document_ids: Tensor,
        structure=None,
        read_segment_sizes: Optional[bool] = None,
        shortest_bucket: Optional[int] = None,
    ) -> "DocumentLayout":
        """Layout of the data contract's ``src_doc_ids`` (every document one
        contiguous run of tokens, -1 at padding).

        The documents are numbered by their order in the source (an id
        that no token carries has no block). What the host needs (the
        documents per example, the longest document, the documents of
        every length bucket) and the checks of the ids are read in one host
        read, together with what ``structure`` (a
        :class:`~mdsfair.modules.source_structure.SourceStructure`) holds: one
        synchronization per batch. ``read_segment_sizes`` (default: on a
        GPU, where the variable-length flash path may run): the sizes of
        :meth:`flat_segments` are read in the same host read.
        ``shortest_bucket``: the first bucket's block length (default
        :attr:`SHORTEST_BUCKET`)."""
        if document_ids.dim() != 2:
            raise ValueError(f"document ids must be [batch, length], got shape {tuple(document_ids.shape)}")
        batch_size, length = document_ids.shape
        device = document_ids.device
        checks = structure if structure is not None else SourceStructure(document_ids, document_ids.lt(0), {})
        # the runs of the ids, shared with the position restart (Sec. 4.1.1) when they come from the encoder
        shared = structure is not None and structure.document_ids is document_ids
        runs = structure.document_runs() if shared else segment_runs(document_ids)
        documents_per_example = runs.segment_count[:, -1]
        fewest_documents, num_documents = torch.aminmax(documents_per_example)
        checks.check(
            fewest_documents.eq(0), "every example needs at least one document token (found an all-padding row)"
        )
        # a run is one document exactly when no id opens two runs: as many runs as distinct ids, which
        # are the runs of the sorted ids
        distinct_ids = segment_start_mask(document_ids.sort(dim=1).values).sum(dim=1)
        checks.check(
            documents_per_example.ne(distinct_ids).any(),
            "document ids must form contiguous runs (each document's tokens consecutive)",
        )
        # the bucket bounds 0, S, 2S, 4S, ... below T: a document is longer than t tokens where it has offset t
        shortest_bucket = cls.SHORTEST_BUCKET if shortest_bucket is None else shortest_bucket
        if shortest_bucket < 1:
            raise ValueError(f"the shortest document bucket needs at least one slot, got {shortest_bucket}")
        bucket_bounds, bound = [0], shortest_bucket
        while bound < length:
            bucket_bounds.append(bound)
            bound *= 2
        bounds = torch.tensor(bucket_bounds, device=device)
        longer_than = runs.offsets.unsqueeze(-1).eq(bounds).sum(dim=(0, 1))  # [C] documents longer than each
        if read_segment_sizes is None:
            read_segment_sizes = device.type == "cuda"
        segment_counts = ()
        if read_segment_sizes:  # every document and every run of padding is one segment
            segment_counts = (segment_boundaries(document_ids).sum(), document_ids.lt(0).sum(dim=1).max())
        num_documents, lowest_offset, highest_offset, *counts = checks.read(
            num_documents, *runs.offset_range, longer_than, *segment_counts
        )
        longer_than, segment_counts = counts[: len(bucket_bounds)] + [0], counts[len(bucket_bounds) :]
        longest, padded = highest_offset + 1, lowest_offset < 0
        num_blocks, num_tokens = batch_size * num_documents, batch_size * length

        # the buckets that hold documents: (bucket class, documents, block length)
        upper_bounds = bucket_bounds[1:] + [length]
        buckets = [
            (index, longer_than[index] - longer_than[index + 1], min(upper_bounds[index], longest))
            for index in range(len(bucket_bounds))
            if longer_than[index] > longer_than[index + 1]
        ]

        # every token's document among the B * D (padding: the extra document B * D)
        document_index = runs.segment_count - 1  # 0, 1, ... by order in the source
        padding = runs.offsets.lt(0) if padded else None
        token_document = document_index + (torch.arange(batch_size, device=device) * num_documents).view(-1, 1)
        if padded:
            document_index.masked_fill_(padding, -1)
            token_document.masked_fill_(padding, num_blocks)
        token_document = token_document.view(-1)
        lengths = token_document.new_zeros(num_blocks + 1).scatter_add_(
            0, token_document, torch.ones_like(token_document)
        )[:num_blocks]
        sod_token_rows = token_document.new_full((num_blocks + 1,), num_tokens - 1).scatter_(
            0,
            torch.where(runs.start_mask.view(-1), token_document, num_blocks),
            torch.arange(num_tokens, device=device),
        )[:num_blocks]

        if len(buckets) == 1 and longer_than[0] == num_blocks:
            # one bucket holding every document, in order: document j's slots start at j * length
            block_length = buckets[0][2]
            bucket_documents = None
            unblock_index = token_document * block_length + runs.offsets.view(-1)
            starts = sod_token_rows.view(batch_size, num_documents, 1)
            example_sods = sod_token_rows.view(batch_size, 1, num_documents).expand(-1, num_documents, -1)
            block_index = [(starts, lengths.view(batch_size, num_documents, 1), example_sods, block_length)]
        else:
            # each document's bucket (missing documents: one past the last), then the documents sorted by it
            document_class = lengths.unsqueeze(1).gt(bounds).sum(dim=1) - 1
            document_class.masked_fill_(lengths.eq(0), len(bucket_bounds))
            sorted_documents = torch.sort(document_class, stable=True).indices
            rank = torch.empty_like(sorted_documents).scatter_(
                0, sorted_documents, torch.arange(num_blocks, device=device)
            )
            # per bucket class: its first document among the sorted ones, its first block slot, its block length
            first_document, first_slot, block_lengths = ([0] * (len(bucket_bounds) + 1) for _ in range(3))
            documents_before = slots_before = 0
            for index, documents, block_length in buckets:
                first_document[index], first_slot[index], block_lengths[index] = (
                    documents_before,
                    slots_before,
                    block_length,
                )
                documents_before += documents
                slots_before += documents * block_length
            first_document[-1] = documents_before
            document_first, slot_first, document_block_length = torch.tensor(
                [first_document, first_slot, block_lengths], device=device
            ).index_select(1, document_class)
            document_slots = slot_first + (rank - document_first) * document_block_length
            # every token's block slot: its document's first slot plus its offset
            unblock_index = torch.cat([document_slots, document_slots.new_zeros(1)]).index_select(0, token_document)
            unblock_index = unblock_index + runs.offsets.view(-1)
            bucket_documents, block_index = [], []
            example_sods = sod_token_rows.view(batch_size, num_documents)
            for index, documents, block_length in buckets:
                bucket = sorted_documents.narrow(0, first_document[index], documents)
                bucket_documents.append(bucket)
                block_index.append(
                    (
                        sod_token_rows.index_select(0, bucket).unsqueeze(1),
                        lengths.index_select(0, bucket).unsqueeze(1),
                        example_sods.index_select(0, bucket.div(num_documents, rounding_mode="floor")),
                        block_length,
                    )
                )
            bucket_documents = tuple(bucket_documents)
        if padded:  # padding reads slot 0
            unblock_index.masked_fill_(padding.view(-1), 0)
        # the block slots of every bucket: the document's tokens (past its end: its SOD, masked), then the
        # D SOD tokens of its example (Sec. 4.1.2)
        # the D SOD keys ride in the blocks where they at most double the slots; else (many documents much
        # shorter than D) the SOD rows are recomputed over their document and the other SODs, after the blocks
        sod_keys_in_blocks = sum(documents * num_documents for _, documents, _ in buckets) <= sum(
            documents * block_length for _, documents, block_length in buckets
        )
        for index, (starts, block_lengths, example_sods, block_length) in enumerate(block_index):
            slot = torch.arange(block_length, device=device)
            block_slots = torch.where(slot.lt(block_lengths), starts + slot, starts)
            block_index[index] = (
                torch.cat([block_slots, example_sods], dim=-1) if sod_keys_in_blocks else block_slots
            ).reshape(-1)
        return cls(
            document_ids=document_index,
            start_mask=runs.start_mask,
            document_lengths=lengths.view(batch_size, num_documents),
            sod_token_rows=sod_token_rows,
            buckets=tuple((documents, block_length) for _, documents, block_length in buckets),
            bucket_documents=bucket_documents,
            sod_keys_in_blocks=sod_keys_in_blocks,
            block_index=block_index[0] if len(block_index) == 1 else torch.cat(block_index),
            unblock_index=unblock_index,
            padding_rows=padding.view(-1, 1) if padded else None,
            # the longest segment: the longest document, or a run of padding (contiguous in a batch)
            _segment_sizes=(segment_counts[0], max(longest, segment_counts[1]), padded) if read_segment_sizes else None,
        )

    def block_attention_bias(self, dtype: torch.dtype) -> Tuple[Tensor, ...]:
        """Per bucket, the ``[documents, 1, length, length + K]`` additive
        mask in ``dtype`` of the keys of every block slot (0: allowed,
        ``-inf``: not, what ``F.scaled_dot_product_attention`` makes of a
        bool mask): the block's own tokens, and (:attr:`sod_keys_in_blocks`)
        for its SOD query (slot 0) also the SODs of the other documents of
        its example (Sec. 4.1.2).
        Built once per layout and dtype, shared by every layer."""
        biases = self._block_bias.get(dtype)
        if biases is None:
            batch_size, num_documents = self.document_lengths.shape
            device = self.document_lengths.device
            lengths = self.document_lengths.view(-1)
            biases = []
            for index, (documents, block_length) in enumerate(self.buckets):
                if self.bucket_documents is None:  # every document, in order
                    block_lengths, own_sod = lengths, None
                    example_lengths = self.document_lengths.unsqueeze(1)  # [B, 1, D]
                else:
                    bucket = self.bucket_documents[index]
                    block_lengths, own_sod = lengths.index_select(0, bucket), bucket.remainder(num_documents)
                    example_lengths = self.document_lengths.index_select(
                        0, bucket.div(num_documents, rounding_mode="floor")
                    )
                slot = torch.arange(block_length, device=device)
                if not self.sod_keys_in_blocks:  # the block's own tokens only
                    key_bias = torch.zeros(documents, block_length, dtype=dtype, device=device)
                    biases.append(
                        key_bias.masked_fill_(slot.ge(block_lengths.unsqueeze(1)), float("-inf")).view(
                            documents, 1, 1, block_length
                        )
                    )
                    continue
                key_bias = torch.zeros(documents, block_length + num_documents, dtype=dtype, device=device)
                key_bias[:, :block_length].masked_fill_(slot.ge(block_lengths.unsqueeze(1)), float("-inf"))
                # the keys of every SOD query: the SODs of the other existing documents of its example
                sod_bias = key_bias[:, block_length:]
                if own_sod is None:  # [B, D blocks, D SODs]; its own SOD is its slot 0
                    sod_bias = sod_bias.view(batch_size, num_documents, num_documents)
                    sod_bias.masked_fill_(example_lengths.eq(0), float("-inf"))
                    sod_bias.diagonal(dim1=1, dim2=2).fill_(float("-inf"))
                else:
                    sod_bias.masked_fill_(example_lengths.eq(0), float("-inf"))
                    sod_bias.scatter_(1, own_sod.unsqueeze(1), float("-inf"))
                # the other queries (slots 1, 2, ...) see no SOD slot
                slot_bias = torch.zeros(block_length, block_length + num_documents, dtype=dtype, device=device)
                slot_bias[1:, block_length:].fill_(float("-inf"))
                biases.append(key_bias.view(documents, 1, 1, block_length + num_documents) + slot_bias)
            biases = self._block_bias[dtype] = tuple(biases)
        return biases
