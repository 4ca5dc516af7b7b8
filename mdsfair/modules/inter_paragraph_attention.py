"""Inter-paragraph attention per head, with optional graph heads (Liu &
Lapata 2019, Eq. 17-20 and 24)."""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import FairseqDropout
from torch import Tensor, nn

from mdsfair.modules.headwise_linear import HeadwiseLinear


def row_normalise_graph(graph: Tensor, paragraph_mask: Tensor) -> Tensor:
    """Eq. 24's weights ``G_ii' / Σ_o G_io`` over the paragraphs that exist.

    ``graph``: ``[B, P, P]`` non-negative edge weights; ``paragraph_mask``:
    ``[B, P]``, True where a paragraph exists. A row with no edge (an isolated
    paragraph, or padding) gets all-zero weights, i.e. a zero context vector.
    """
    if (graph < 0).any():
        raise ValueError("graph edge weights must be non-negative (Eq. 24 normalises rows by their sum)")
    pair_mask = paragraph_mask.unsqueeze(2) & paragraph_mask.unsqueeze(1)
    graph = graph.masked_fill(~pair_mask, 0.0)
    row_sums = graph.sum(dim=-1, keepdim=True)
    return graph / row_sums.clamp(min=torch.finfo(graph.dtype).tiny)


class InterParagraphAttention(nn.Module):
    """Self-attention across paragraphs, separately for every head::

        q^z_i = W^z_q head^z_i,  k^z_i = W^z_k head^z_i,  v^z_i = W^z_v head^z_i   (Eq. 17-19)
        context^z_i = Σ_i' softmax_i'(q^z_i · k^z_i' / sqrt(d_head)) v^z_i'        (Eq. 20)

    The scores are scaled by ``1/sqrt(d_head)`` as in Vaswani et al. (2017)
    and the hiersumm code; Eq. 20 omits the scale.

    Graph-informed heads (Eq. 24): the first ``graph_heads`` heads use the
    row-normalised graph ``G`` in place of their learned softmax weights.

    Args:
        num_heads: heads (the pooling heads of :class:`MultiHeadPooling`).
        head_dim: ``d_head``.
        dropout: dropout on the learned attention weights.
        shared_across_heads: one single-head attention (``W_q, W_k, W_v``)
            shared by all heads, as in the hiersumm code; the paper has
            per-head weights ``W^z``.
    """

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, shared_across_heads: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scaling = head_dim**-0.5
        self.query_proj = HeadwiseLinear(num_heads, head_dim, head_dim, shared=shared_across_heads)
        self.key_proj = HeadwiseLinear(num_heads, head_dim, head_dim, shared=shared_across_heads)
        self.value_proj = HeadwiseLinear(num_heads, head_dim, head_dim, shared=shared_across_heads)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)

    def forward(
        self,
        heads: Tensor,
        paragraph_mask: Tensor,
        graph: Optional[Tensor] = None,
        graph_heads: int = 0,
    ) -> Tuple[Tensor, Tensor]:
        """
        Args:
            heads: ``[B, P, num_heads, d_head]`` pooled paragraph vectors.
            paragraph_mask: ``[B, P]`` True where a paragraph exists.
            graph: ``[B, P, P]`` edge weights for the graph heads.
            graph_heads: how many heads (the first ones) the graph replaces.

        Returns:
            ``context`` ``[B, P, num_heads, d_head]`` and the attention weights
            ``[B, num_heads, P, P]`` (graph heads included, before dropout).
        """
        if graph_heads > self.num_heads:
            raise ValueError(f"{graph_heads} graph heads requested, but only {self.num_heads} heads exist")
        if graph_heads > 0 and graph is None:
            raise ValueError("graph heads need a [B, P, P] graph")
        query = self.query_proj(heads) * self.scaling
        key = self.key_proj(heads)
        value = self.value_proj(heads)
        scores = torch.einsum("bihd,bjhd->bhij", query, key).float()
        key_mask = paragraph_mask[:, None, None, :]
        scores = scores.masked_fill(~key_mask, torch.finfo(scores.dtype).min)
        weights = (F.softmax(scores, dim=-1) * key_mask).type_as(heads)
        attention = weights
        if graph_heads > 0:
            graph_weights = row_normalise_graph(graph.type_as(heads), paragraph_mask)
            graph_weights = graph_weights.unsqueeze(1).expand(-1, graph_heads, -1, -1)
            attention = torch.cat([graph_weights, weights[:, graph_heads:]], dim=1)
            weights = torch.cat([graph_weights, self.dropout_module(weights[:, graph_heads:])], dim=1)
        else:
            weights = self.dropout_module(weights)
        context = torch.einsum("bhij,bjhd->bihd", weights, value)
        return context, attention
