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
  two from :attr:`~mdsfair.modules.document_blocks.DocumentLayout.SHORTEST_BUCKET` tokens; the longest
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
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.modules.document_blocks import DocumentLayout
from mdsfair.modules.heads import from_heads, to_heads
from mdsfair.modules.parameter_cache import derived_from_parameters, linear_parameters, scaled_query_key_value
from mdsfair.modules.segment_positions import segment_start_mask

IMPLEMENTATIONS = ("blocked", "dense")


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
