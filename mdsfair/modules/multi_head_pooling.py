"""Multi-head pooling of the tokens of each paragraph (Liu & Lapata 2019,
Eq. 13-16)."""

import torch
import torch.nn.functional as F
from fairseq.modules import FairseqDropout, LayerNorm
from torch import Tensor, nn

from mdsfair.modules.headwise_linear import HeadwiseLinear


class MultiHeadPooling(nn.Module):
    """One vector per head for each block of tokens::

        a^z_ij = W^z_a x_ij                       (Eq. 13, a scalar per head)
        b^z_ij = W^z_b x_ij                       (Eq. 14, d_head values)
        â^z_ij = softmax_j(a^z_ij)                (Eq. 15, over the block's tokens)
        head^z_i = LayerNorm(W^z_c Σ_j â^z_ij b^z_ij)   (Eq. 16)

    Args:
        embed_dim: token dimension ``d``.
        num_heads: pooling heads; ``d_head = d / num_heads``.
        dropout: dropout on the pooling weights ``â``.
        head_projection: apply the per-head ``W^z_c`` of Eq. 16; the hiersumm
            code has none (``use_final_linear=False``).

    The layer norm over ``d_head`` is shared by the heads (Eq. 16 gives it no
    head index; hiersumm shares it too).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, head_projection: bool = True):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by {num_heads} pooling heads")
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.score_proj = nn.Linear(embed_dim, num_heads)
        self.value_proj = nn.Linear(embed_dim, embed_dim)
        self.head_proj = HeadwiseLinear(num_heads, self.head_dim, self.head_dim) if head_projection else None
        self.head_layer_norm = LayerNorm(self.head_dim)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        nn.init.xavier_uniform_(self.score_proj.weight)
        nn.init.xavier_uniform_(self.value_proj.weight)
        nn.init.zeros_(self.score_proj.bias)
        nn.init.zeros_(self.value_proj.bias)

    def forward(self, x: Tensor, padding_mask: Tensor) -> Tensor:
        """``x``: ``[N, L, d]`` blocks of tokens; ``padding_mask``: ``[N, L]``,
        True at padding. Returns ``[N, num_heads, d_head]``; a block with no
        token pools to the layer norm of a zero vector (no NaN)."""
        num_blocks, length, _ = x.shape
        scores = self.score_proj(x).float()  # [N, L, H]
        scores = scores.masked_fill(padding_mask.unsqueeze(-1), torch.finfo(scores.dtype).min)
        weights = F.softmax(scores, dim=1) * (~padding_mask).unsqueeze(-1)
        weights = self.dropout_module(weights.type_as(x))
        values = self.value_proj(x).view(num_blocks, length, self.num_heads, self.head_dim)
        pooled = torch.einsum("nlh,nlhd->nhd", weights, values)
        if self.head_proj is not None:
            pooled = self.head_proj(pooled)
        return self.head_layer_norm(pooled)
