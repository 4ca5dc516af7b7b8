"""HierEncDec's hierarchical encoder self-attention (Shen et al., 2023,
Sec. 4.1), computed per document block.

Rule (Sec. 4.1.1 "Restricted Intra-Document Full Attention" and Sec. 4.1.2
"Document-Level Attention"): every token attends to the tokens of its own
document; the start-of-document (SOD) token, the first token of a document
(``<s>`` in the data contract), additionally attends to the SOD tokens of all
other documents. Eq. 1-2 are otherwise unchanged: one softmax over the
allowed keys of each query.

Two implementations with the same parameters and the same numbers:

* ``dense``: the authors' way, a ``[B, H, T, T]`` score matrix with the rule
  as an additive mask. Kept as the reference for tests and benchmarks.
* ``blocked`` (the optimization the paper leaves undone, Sec. 7): every
  document is one block of queries, keys and values gathered from the
  source, and attention runs inside each block; each block's keys are
  extended by the ``D`` SOD keys of its example, which only the block's SOD
  query may use, so a SOD row is one softmax over the union of its document
  and the other SODs (where those ``D`` keys would more than double the
  batch's block slots, many documents shorter than ``D``, the blocks hold
  their documents only and the ``B * D`` SOD rows are recomputed after them
  over their document and the other SODs, one masked attention of ``D``
  queries per example). The blocks are bucketed by document length (powers of
  two from :attr:`DocumentLayout.SHORTEST_BUCKET` tokens; the longest
  bucket's blocks as long as the longest document), one attention call per
  bucket: a document of ``n`` tokens costs at most ``m * (m + D)`` scores
  per head, ``m = max(2n, S)`` (or ``m * m`` plus the SOD rows' ``D * T``
  per example), so memory grows with the sum over documents of
  ``n * (n + D)`` instead of ``B * T^2`` (dense), and a batch mixing a cluster of
  many short documents with one of a long document costs what its documents
  cost, not ``B * D * L * (L + D)`` (blocks padded to the most documents
  times the longest document).

  On a GPU in 16-bit without attention dropout, ``blocked`` runs as
  variable-length flash attention instead (:func:`varlen_flash_available`):
  every document (and every run of padding) of the flat ``[B * T]`` source is
  one sequence of ``torch.nn.attention.varlen.varlen_attn``, so there are no
  block gathers, no padded slots and no mask; the ``B * D`` SOD rows are then
  recomputed over the union of their document and the other SODs (one small
  masked attention of ``D`` queries per example) and written over their
  varlen rows. Same rule, same numbers up to the kernels' rounding
  (``tests/test_hierencdec.py`` compares it with ``dense`` on the test
  device). The H100 profile that led here is in examples/hierencdec/README.md.
"""

import functools
import inspect
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.modules.heads import from_heads, to_heads
from mdsfair.modules.parameter_cache import derived_from_parameters, linear_parameters, scaled_query_key_value
from mdsfair.modules.segment_positions import segment_boundaries, segment_runs, segment_start_mask

IMPLEMENTATIONS = ("blocked", "dense")


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
        :class:`~mdsfair.modules.components.SourceStructure`) holds: one
        synchronization per batch. ``read_segment_sizes`` (default: on a
        GPU, where the variable-length flash path may run): the sizes of
        :meth:`flat_segments` are read in the same host read.
        ``shortest_bucket``: the first bucket's block length (default
        :attr:`SHORTEST_BUCKET`)."""
        from mdsfair.modules.components import SourceStructure

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
            num_documents, *runs.offset_range, *longer_than.unbind(0), *segment_counts
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


def varlen_flash_available(query: Tensor, dropout: float, head_dim: Optional[int] = None) -> bool:
    """Whether :func:`torch.nn.attention.varlen.varlen_attn` (flash, CUDA,
    16-bit, no dropout, head size a multiple of 8 up to 256; torch >= 2.10)
    can run the document attention of ``query [..., H, d]`` (or of a tensor
    of its device and dtype, with heads of ``head_dim``)."""
    if not query.is_cuda or query.dtype not in (torch.float16, torch.bfloat16) or dropout > 0:
        return False
    head_dim = query.size(-1) if head_dim is None else head_dim
    if head_dim % 8 or head_dim > 256:
        return False
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def accepts_scale(function) -> bool:
    """Whether ``function`` takes ``scale`` (torch 2.11's ``varlen_attn`` does,
    its first release did not); read once per function, not at every layer
    call."""
    return "scale" in inspect.signature(function).parameters


def document_attention_mask(document_ids: Tensor) -> Tensor:
    """``[B, T, T]`` bool, True where query ``i`` may attend to key ``j``:
    same document, or both are SOD tokens (Sec. 4.1). Padding queries may
    attend to every real token (their output is discarded) so that no softmax
    row is empty."""
    valid = document_ids.ge(0)
    same_document = document_ids.unsqueeze(2).eq(document_ids.unsqueeze(1)) & valid.unsqueeze(2)
    starts = segment_start_mask(document_ids)
    start_exchange = starts.unsqueeze(2) & starts.unsqueeze(1)
    padding_rows = (~valid).unsqueeze(2) & valid.unsqueeze(1)
    return same_document | start_exchange | padding_rows


class DocumentBlockedSelfAttention(MultiheadAttention):
    """fairseq ``MultiheadAttention`` (same parameters, same state-dict keys)
    that also runs HierEncDec's hierarchical encoder self-attention.

    ``forward`` is the stock full attention (BART, Table 3 row 4/5);
    :meth:`forward_documents` applies the document rule of Sec. 4.1 with the
    ``blocked`` or ``dense`` implementation.
    """

    def __init__(self, *args, implementation: str = "blocked", **kwargs):
        super().__init__(*args, **kwargs)
        self.implementation = implementation
        self._check_implementation(implementation)

    @staticmethod
    def _check_implementation(implementation: str) -> None:
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"unknown document attention implementation {implementation!r}; choose {IMPLEMENTATIONS}")

    def _project(self, x: Tensor):
        """``x [T, B, C]`` -> scaled queries, keys and values ``[B, T, H, d]``."""
        length, batch_size, _ = x.shape
        x = x.transpose(0, 1)

        return (
            to_heads(self.q_proj(x) * self.scaling, self.num_heads),
            to_heads(self.k_proj(x), self.num_heads),
            to_heads(self.v_proj(x), self.num_heads),
        )

    def _output(self, context: Tensor) -> Tensor:
        """``context [B, T, H, d]`` -> ``[T, B, C]`` through ``out_proj``."""
        return self.out_proj(from_heads(context).transpose(0, 1))

    def forward_documents(self, x: Tensor, layout: DocumentLayout, need_weights: bool = False):
        """Hierarchical self-attention of ``x [T, B, C]``.

        Returns ``(output [T, B, C], weights)``; ``weights`` are the per-head
        ``[B, H, T, T]`` attention probabilities when ``need_weights`` (this
        materializes the dense matrix and is meant for analysis), else None.
        """
        self._check_implementation(self.implementation)
        if need_weights or self.implementation == "dense":
            return self._dense_masked(x, layout, need_weights)
        return self._blocked(x, layout), None

    def _dense_masked(self, x: Tensor, layout: DocumentLayout, need_weights: bool):
        """Reference: full ``[B, H, T, T]`` scores with the document mask."""
        query, key, value = self._project(x)
        scores = torch.einsum("bihd,bjhd->bhij", query, key)
        allowed = document_attention_mask(layout.document_ids).unsqueeze(1)
        # the softmax in at least float32 (a float64 reference stays float64)
        probabilities = F.softmax(
            scores.masked_fill(~allowed, float("-inf")), dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)
        )
        probabilities = probabilities.type_as(scores)
        context = torch.einsum("bhij,bjhd->bihd", self.dropout_module(probabilities), value)
        context = context * layout.document_ids.ge(0).view(*context.shape[:2], 1, 1).type_as(context)
        return self._output(context), (probabilities if need_weights else None)

    def _blocked(self, x: Tensor, layout: DocumentLayout) -> Tensor:
        """Attention inside the document blocks of every length bucket, plus
        the SOD exchange.

        Every block's keys are its slots followed by the ``D`` SOD keys of
        its example; only the block's SOD query (slot 0) may use the latter,
        and not its own SOD twice, so each SOD row is one softmax over the
        union of its document and the other SODs. The attention of each
        bucket runs in ``F.scaled_dot_product_attention`` (fused kernels
        where the device has them).
        """
        length, batch_size, _ = x.shape
        num_documents = layout.num_documents
        heads, head_dim = self.num_heads, self.head_dim
        dropout = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        if varlen_flash_available(x, dropout, head_dim):
            return self._output(self._varlen_documents(*self._project(x), layout))
        weight, bias = self._stacked_projection()
        # queries (scaled), keys and values from one product, gathered into the blocks of every bucket with
        # one index: [B*T, 3C] -> per bucket [3, documents, H, length + D, d], every block's slots, then its
        # example's D SOD tokens
        projected = F.linear(x.transpose(0, 1), weight, bias).reshape(batch_size * length, 3 * self.embed_dim)
        slots = projected.index_select(0, layout.block_index)
        sod_keys = num_documents if layout.sod_keys_in_blocks else 0
        if len(layout.buckets) > 1:
            slots = slots.split([documents * (block_length + sod_keys) for documents, block_length in layout.buckets])
        else:
            slots = (slots,)
        contexts = []
        for bucket_slots, (documents, block_length), block_bias in zip(
            slots, layout.buckets, layout.block_attention_bias(projected.dtype)
        ):
            blocks = bucket_slots.view(documents, block_length + sod_keys, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            # the queries are the block slots; the keys and values also the SOD slots
            context = F.scaled_dot_product_attention(
                blocks[0, :, :, :block_length], blocks[1], blocks[2], attn_mask=block_bias, dropout_p=dropout, scale=1.0
            )
            contexts.append(context.transpose(1, 2).reshape(-1, self.embed_dim))
        context = contexts[0] if len(contexts) == 1 else torch.cat(contexts)
        context = context.index_select(0, layout.unblock_index)
        if not layout.sod_keys_in_blocks:
            context = self._sod_rows(projected.view(batch_size, length, 3, heads, head_dim), context, layout, dropout)
        if layout.padding_rows is not None:  # padding read slot 0: zero it
            context.masked_fill_(layout.padding_rows, 0)
        return self.out_proj(context.view(batch_size, length, self.embed_dim).transpose(0, 1))

    def _sod_rows(self, projected: Tensor, context: Tensor, layout: DocumentLayout, dropout: float) -> Tensor:
        """``context [B * T, C]`` with every SOD row replaced by its attention
        over its document and the other SODs of its example (Sec. 4.1.2):
        ``D`` queries per example against the ``T`` keys of ``projected
        [B, T, 3, H, d]`` (scaled queries, keys, values) under
        :meth:`DocumentLayout.sod_key_mask`, one SDPA call."""
        batch_size, length, _, heads, head_dim = projected.shape
        read_rows, write_rows = layout.sod_rows()
        sod_queries = projected.view(batch_size * length, 3, heads, head_dim)[:, 0].index_select(0, read_rows)
        sod_queries = sod_queries.view(batch_size, layout.num_documents, heads, head_dim).transpose(1, 2)
        sod_context = F.scaled_dot_product_attention(
            sod_queries,
            projected[:, :, 1].transpose(1, 2),
            projected[:, :, 2].transpose(1, 2),
            attn_mask=layout.sod_key_mask(),
            dropout_p=dropout,
            scale=1.0,
        )  # [B, H, D, d]
        sod_context = sod_context.transpose(1, 2).reshape(-1, self.embed_dim)
        context = torch.cat([context, context.new_zeros(1, self.embed_dim)])  # row B*T: missing documents'
        return context.index_copy(0, write_rows, sod_context)[:-1]

    def _stacked_projection(self):
        """``[q_proj * scaling; k_proj; v_proj]`` weights ``[3C, C]`` and
        biases: the three projections as one product. Without autograd the
        stack is kept until a parameter changes
        (:func:`~mdsfair.modules.parameter_cache.derived_from_parameters`)."""
        return derived_from_parameters(
            self,
            "_stacked_projection_cache",
            linear_parameters(self.q_proj, self.k_proj, self.v_proj),
            lambda: scaled_query_key_value(self),
        )

    def _varlen_documents(self, query: Tensor, key: Tensor, value: Tensor, layout: DocumentLayout) -> Tensor:
        """The document rule with flash attention and no gathers: ``query``,
        ``key``, ``value`` ``[B, T, H, d]`` (queries scaled) -> context
        ``[B, T, H, d]``, zero at padding.

        1. Every token attends within its own document (every padding run
           is a sequence of its own, its rows zeroed after): one
           ``varlen_attn`` over the flat ``[B * T, H, d]`` tensors.
        2. Every SOD query attends to its document and to the other SODs of
           its example (Sec. 4.1.2): ``[B, H, D, T]`` scores with that mask,
           one SDPA call; these rows replace the SOD rows of step 1.
        """
        from torch.nn.attention.varlen import varlen_attn

        batch_size, length, num_heads, head_dim = query.shape
        offsets, longest, padded = layout.flat_segments()
        flat = [t.reshape(batch_size * length, num_heads, head_dim) for t in (query, key, value)]
        if accepts_scale(varlen_attn):
            context = varlen_attn(*flat, offsets, offsets, longest, longest, scale=1.0)
        else:  # an older varlen_attn scales by d^-0.5 (fairseq's self.scaling) itself
            context = varlen_attn(flat[0] / self.scaling, *flat[1:], offsets, offsets, longest, longest)

        read_rows, write_rows = layout.sod_rows()
        num_documents = layout.num_documents
        sod_queries = flat[0].index_select(0, read_rows).view(batch_size, num_documents, num_heads, head_dim)
        sod_context = F.scaled_dot_product_attention(
            sod_queries.transpose(1, 2),
            key.transpose(1, 2),
            value.transpose(1, 2),
            attn_mask=layout.sod_key_mask(),
            scale=1.0,
        )  # [B, H, D, d]
        sod_context = sod_context.transpose(1, 2).reshape(-1, num_heads, head_dim)
        context = torch.cat([context, context.new_zeros(1, num_heads, head_dim)])  # row B*T: missing documents'
        context = context.index_copy(0, write_rows, sod_context.to(context.dtype))[:-1]
        context = context.view(batch_size, length, num_heads, head_dim)
        if not padded:
            return context
        return context * layout.document_ids.ge(0).view(batch_size, length, 1, 1).to(context.dtype)
