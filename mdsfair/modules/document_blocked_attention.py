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
* ``blocked`` (the optimization the paper leaves undone, Sec. 7): queries,
  keys and values are gathered into ``[B * D, L]`` document blocks (``D``
  documents, ``L`` the longest one) and attention runs inside each block;
  each block's keys are extended by the ``D`` SOD keys of its example, which
  only the block's SOD query may use, so a SOD row is one softmax over the
  union of its document and the other SODs. Memory grows with
  ``B * D * L * (L + D)`` instead of ``B * T^2``.

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
    """Where the documents of a batch lie in the flat ``[B, T]`` source.

    Built once per encoder forward and shared by all layers.

    Attributes:
        document_ids: ``[B, T]`` document of each token, -1 at padding.
        start_mask: ``[B, T]`` True at each document's first (SOD) token.
        document_lengths: ``[B, D]`` tokens per document (0: no such document).
        block_index: ``[B * D, L + D]`` index into the flattened ``[B * T]``
            sequence of every block slot (slots past a document's end, and
            every slot of a missing document's block, point at the batch's
            last token and are masked), followed by the ``D`` SOD tokens
            of the block's example (Sec. 4.1.2): the keys of the block, so
            that one gather makes a block's queries (its first ``L`` slots),
            keys and values.
        block_key_mask: ``[B * D, L]`` True where a block slot holds a token
            (an empty block keeps slot 0 so that its softmax stays finite; its
            output is never read).
        unblock_index: ``[B * T]`` index into the flattened ``[B * D * L]``
            block slots of every token; padding points at the last slot (its
            row is zeroed, :attr:`padding_rows`).
        padding_rows: ``[B * T, 1]`` True at padding, or None when the batch
            has none (read with the layout's one host read).
    """

    document_ids: Tensor
    start_mask: Tensor
    document_lengths: Tensor
    block_index: Tensor
    block_key_mask: Tensor
    unblock_index: Tensor
    padding_rows: Optional[Tensor] = None
    _segments: Optional[Tuple[Tensor, int, bool]] = field(default=None, repr=False, compare=False)
    #: (segments, longest segment, padded) of :meth:`flat_segments`, when read with the layout
    _segment_sizes: Optional[Tuple[int, int, bool]] = field(default=None, repr=False, compare=False)
    _sod_key_mask: Optional[Tensor] = field(default=None, repr=False, compare=False)
    _block_bias: Dict[torch.dtype, Tensor] = field(default_factory=dict, repr=False, compare=False)

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
                    0, segment, torch.arange(batch_size * length, device=ids.device), reduce="amin")
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
        :attr:`block_index`) and for writing (a missing document writes the extra row
        ``B * T``)."""
        read = self.block_index[:, 0]
        write = read.masked_fill(self.document_lengths.view(-1).eq(0), self.document_ids.numel())
        return read, write

    @property
    def num_documents(self) -> int:
        return self.document_lengths.size(1)

    @property
    def block_length(self) -> int:
        return self.block_key_mask.size(1)

    @classmethod
    def from_document_ids(cls, document_ids: Tensor, structure=None,
                          read_segment_sizes: Optional[bool] = None) -> "DocumentLayout":
        """Layout of the data contract's ``src_doc_ids`` (every document one
        contiguous run of tokens, -1 at padding).

        The documents are numbered by their order in the source (an id
        that no token carries has no block: its block would be empty and
        read by nothing). The two sizes the host needs (documents, longest
        document) and the checks of the ids are read in one host read,
        together with what ``structure`` (a
        :class:`~mdsfair.modules.components.SourceStructure`) holds: one
        synchronization per batch. ``read_segment_sizes`` (default: on a
        GPU, where the variable-length flash path may run): the sizes of
        :meth:`flat_segments` are read in the same host read."""
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
        checks.check(fewest_documents.eq(0),
                     "every example needs at least one document token (found an all-padding row)")
        # a run is one document exactly when no id opens two runs: as many runs as distinct ids, which
        # are the runs of the sorted ids
        distinct_ids = segment_start_mask(document_ids.sort(dim=1).values).sum(dim=1)
        checks.check(documents_per_example.ne(distinct_ids).any(),
                     "document ids must form contiguous runs (each document's tokens consecutive)")
        if read_segment_sizes is None:
            read_segment_sizes = device.type == "cuda"
        segment_counts = ()
        if read_segment_sizes:  # every document and every run of padding is one segment
            segment_counts = (segment_boundaries(document_ids).sum(), document_ids.lt(0).sum(dim=1).max())
        num_documents, lowest_offset, highest_offset, *segment_counts = checks.read(
            num_documents, *runs.offset_range, *segment_counts)
        block_length, padded = highest_offset + 1, lowest_offset < 0
        num_slots = batch_size * num_documents * block_length

        # every token's block slot: document d of example b is block b * D + d, its token i slot i
        document_index = runs.segment_count - 1  # 0, 1, ... by order in the source
        first_block = (torch.arange(batch_size, device=device) * num_documents).view(-1, 1)
        unblock_index = (first_block + document_index) * block_length + runs.offsets
        padding = runs.offsets.lt(0) if padded else None
        if padded:
            unblock_index.masked_fill_(padding, num_slots)  # one slot past the blocks, dropped below
            document_index.masked_fill_(padding, -1)
        # and the inverse, the token row of every slot; slots past a document's end hold B * T
        block_rows = unblock_index.new_full((num_slots + int(padded),), batch_size * length)
        block_rows.scatter_(0, unblock_index.view(-1), torch.arange(batch_size * length, device=device))
        block_rows = block_rows[:num_slots].view(batch_size * num_documents, block_length)
        block_key_mask = block_rows.ne(batch_size * length)
        lengths = block_key_mask.sum(dim=1).view(batch_size, num_documents)
        block_key_mask.select(1, 0).fill_(True)
        block_rows.clamp_max_(batch_size * length - 1)  # past the end: a token, masked
        blocks = block_rows.view(batch_size, num_documents, block_length)
        # every block's keys also hold the D SOD tokens of its example (Sec. 4.1.2)
        sod_rows = blocks.select(2, 0).unsqueeze(1).expand(-1, num_documents, -1)  # [B, D blocks, D SODs]
        block_index = torch.cat([blocks, sod_rows], dim=2)
        if padded:
            unblock_index.clamp_max_(num_slots - 1)  # padding reads the last slot; zeroed by padding_rows
        return cls(
            document_ids=document_index,
            start_mask=runs.start_mask,
            document_lengths=lengths,
            block_index=block_index.view(batch_size * num_documents, block_length + num_documents),
            block_key_mask=block_key_mask,
            unblock_index=unblock_index.view(-1),
            padding_rows=padding.view(-1, 1) if padded else None,
            # the longest segment: the longest document, or a run of padding (contiguous in a batch)
            _segment_sizes=(segment_counts[0], max(block_length, segment_counts[1]), padded)
            if read_segment_sizes else None,
        )

    def block_attention_bias(self, dtype: torch.dtype) -> Tensor:
        """``[B * D, 1, L, L + D]`` additive mask in ``dtype`` of the keys
        of every block slot (0: allowed, ``-inf``: not, what
        ``F.scaled_dot_product_attention`` makes of a bool mask): the block's
        own tokens, and for its SOD query (slot 0) also the SODs of the other
        documents of its example (Sec. 4.1.2). Built once per layout and
        dtype, shared by every layer."""
        bias = self._block_bias.get(dtype)
        if bias is None:
            num_documents, block_length = self.num_documents, self.block_length
            device = self.block_key_mask.device
            # the keys of every SOD query: its block's tokens, then the SODs of the other existing documents
            key_bias = torch.zeros(self.block_key_mask.size(0), block_length + num_documents, dtype=dtype,
                                   device=device)
            key_bias[:, :block_length].masked_fill_(~self.block_key_mask, float("-inf"))
            sod_bias = key_bias.view(-1, num_documents, block_length + num_documents)[:, :, block_length:]
            sod_bias.masked_fill_(self.document_lengths.eq(0).unsqueeze(1), float("-inf"))  # [B, D, D]
            sod_bias.diagonal(dim1=1, dim2=2).fill_(float("-inf"))  # its own SOD is its slot 0
            # the other queries (slots 1, 2, ...) see no SOD slot
            slot_bias = torch.zeros(block_length, block_length + num_documents, dtype=dtype, device=device)
            slot_bias[1:, block_length:].fill_(float("-inf"))
            bias = self._block_bias[dtype] = key_bias.view(-1, 1, 1, block_length + num_documents) + slot_bias
        return bias


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

        return (to_heads(self.q_proj(x) * self.scaling, self.num_heads), to_heads(self.k_proj(x), self.num_heads),
                to_heads(self.v_proj(x), self.num_heads))

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
        probabilities = F.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1, dtype=torch.float32)
        probabilities = probabilities.type_as(scores)
        context = torch.einsum("bhij,bjhd->bihd", self.dropout_module(probabilities), value)
        context = context * layout.document_ids.ge(0).view(*context.shape[:2], 1, 1).type_as(context)
        return self._output(context), (probabilities if need_weights else None)

    def _blocked(self, x: Tensor, layout: DocumentLayout) -> Tensor:
        """Attention inside ``[B * D, L]`` document blocks plus the SOD exchange.

        Every block's keys are its ``L`` slots followed by the ``D`` SOD keys
        of its example; only the block's SOD query (slot 0) may use the
        latter, and not its own SOD twice, so each SOD row is one softmax over
        the union of its document and the other SODs. The block attention
        runs in ``F.scaled_dot_product_attention`` (fused kernels where the
        device has them).
        """
        length, batch_size, _ = x.shape
        num_documents, block_length = layout.num_documents, layout.block_length
        heads, head_dim = self.num_heads, self.head_dim
        dropout = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        if varlen_flash_available(x, dropout, head_dim):
            return self._output(self._varlen_documents(*self._project(x), layout))
        weight, bias = self._stacked_projection()
        # queries (scaled), keys and values from one product, gathered into blocks with one index:
        # [B*T, 3C] -> [3, B*D, H, L + D, d], every block's L slots, then its example's D SOD tokens
        projected = F.linear(x.transpose(0, 1), weight, bias).reshape(batch_size * length, 3 * self.embed_dim)
        blocks = projected.index_select(0, layout.block_index.view(-1)).view(
            batch_size * num_documents, block_length + num_documents, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        # the queries are the block slots; the keys and values also the SOD slots
        context = F.scaled_dot_product_attention(blocks[0, :, :, :block_length], blocks[1], blocks[2],
                                                 attn_mask=layout.block_attention_bias(blocks.dtype),
                                                 dropout_p=dropout, scale=1.0)
        context = context.transpose(1, 2).reshape(-1, self.embed_dim).index_select(0, layout.unblock_index)
        if layout.padding_rows is not None:  # padding read the last slot: zero it
            context.masked_fill_(layout.padding_rows, 0)
        return self.out_proj(context.view(batch_size, length, self.embed_dim).transpose(0, 1))

    def _stacked_projection(self):
        """``[q_proj * scaling; k_proj; v_proj]`` weights ``[3C, C]`` and
        biases: the three projections as one product. Without autograd the
        stack is kept until a parameter changes
        (:func:`~mdsfair.modules.parameter_cache.derived_from_parameters`)."""
        return derived_from_parameters(self, "_stacked_projection_cache",
                                       linear_parameters(self.q_proj, self.k_proj, self.v_proj),
                                       lambda: scaled_query_key_value(self))

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
            sod_queries.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
            attn_mask=layout.sod_key_mask(), scale=1.0,
        )  # [B, H, D, d]
        sod_context = sod_context.transpose(1, 2).reshape(-1, num_heads, head_dim)
        context = torch.cat([context, context.new_zeros(1, num_heads, head_dim)])  # row B*T: missing documents'
        context = context.index_copy(0, write_rows, sod_context.to(context.dtype))[:-1]
        context = context.view(batch_size, length, num_heads, head_dim)
        if not padded:
            return context
        return context * layout.document_ids.ge(0).view(batch_size, length, 1, 1).to(context.dtype)
