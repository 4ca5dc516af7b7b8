"""A linear map applied to each attention head separately."""

import math

import torch
from torch import Tensor, nn


class HeadwiseLinear(nn.Module):
    """``y[..., z, :] = x[..., z, :] W^z + b^z`` for every head ``z``.

    The per-head weights ``W^z`` of multi-head pooling (Eq. 16) and of the
    inter-paragraph attention (Eq. 17-19). With ``shared=True`` all heads use
    one ``W`` (the hiersumm code's single-head attention reused by every
    head).
    """

    def __init__(self, num_heads: int, in_features: int, out_features: int, shared: bool = False, bias: bool = True):
        super().__init__()
        self.num_heads = num_heads
        self.shared = shared
        stored_heads = 1 if shared else num_heads
        self.weight = nn.Parameter(torch.empty(stored_heads, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(stored_heads, out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        # Xavier-uniform per head, as nn.Linear layers of the same shape would get in fairseq.
        bound = math.sqrt(6.0 / (self.weight.size(1) + self.weight.size(2)))
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``[..., num_heads, in_features]`` -> ``[..., num_heads, out_features]``."""
        if x.size(-2) != self.num_heads:
            raise ValueError(f"expected {self.num_heads} heads in dimension -2, got shape {tuple(x.shape)}")
        weight = self.weight.expand(self.num_heads, -1, -1)
        y = torch.einsum("...hi,hio->...ho", x, weight)
        if self.bias is not None:
            y = y + self.bias.expand(self.num_heads, -1)
        return y

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, in_features={self.weight.size(1)}, "
            f"out_features={self.weight.size(2)}, shared={self.shared}"
        )
