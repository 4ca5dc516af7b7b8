"""Sinusoidal encodings (Liu & Lapata 2019, Eq. 7-10): a token's paragraph
rank and its position inside the paragraph for the encoder, and the target
position for the decoder.

Eq. 7-8 give the encoding of the p-th element of a sequence::

    e_p[2i]     = sin(p / 10000^(2i/d))
    e_p[2i + 1] = cos(p / 10000^(2i/d))

Eq. 9 concatenates the encoding of the paragraph rank ``i`` and of the token
position ``j`` inside the paragraph, ``d/2`` dimensions each, and Eq. 10 adds
the result to the word embedding.
"""

import math
from typing import Optional

import torch
from torch import Tensor, nn


def sinusoidal_encoding(positions: Tensor, dim: int) -> Tensor:
    """Eq. 7-8 for integer ``positions`` of any shape; returns ``[..., dim]``
    with sines at even and cosines at odd dimensions."""
    if dim <= 0:
        raise ValueError(f"sinusoidal encoding needs a positive dimension, got {dim}")
    half = (dim + 1) // 2
    frequencies = torch.exp(
        torch.arange(half, dtype=torch.float32, device=positions.device) * (-2.0 * math.log(10000.0) / dim)
    )
    angles = positions.to(torch.float32).unsqueeze(-1) * frequencies
    encoding = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)
    return encoding[..., :dim]


class ParagraphTokenPositionalEncoding(nn.Module):
    """``pe_ij = [e_i ; e_j]`` (Eq. 9): paragraph rank ``i`` and token
    position ``j``, ``embed_dim / 2`` dimensions each.

    Args:
        embed_dim: model dimension ``d``.
        paragraph_position: encode the paragraph rank; when False (Table 3,
            "w/o PP") the token position takes all ``d`` dimensions.
        token_position_first: the hiersumm code's layout ``[e_j ; e_i]``
            instead of the paper's ``[e_i ; e_j]``.
    """

    def __init__(self, embed_dim: int, paragraph_position: bool = True, token_position_first: bool = False):
        super().__init__()
        self.embed_dim = embed_dim
        self.paragraph_position = paragraph_position
        self.token_position_first = token_position_first
        self.paragraph_dim = embed_dim // 2 if paragraph_position else 0
        self.token_dim = embed_dim - self.paragraph_dim

    def forward(self, paragraph_rank: Tensor, token_position: Tensor) -> Tensor:
        """Both inputs are integer tensors of the same shape; returns
        ``[..., embed_dim]`` float32."""
        token = sinusoidal_encoding(token_position, self.token_dim)
        if not self.paragraph_position:
            return token
        paragraph = sinusoidal_encoding(paragraph_rank, self.paragraph_dim)
        parts = [token, paragraph] if self.token_position_first else [paragraph, token]
        return torch.cat(parts, dim=-1)


UNBOUNDED_POSITIONS = 10**9


class SinusoidalPositions(nn.Module):
    """Eq. 7-8 encodings of the positions ``0, 1, 2, ...`` of a target
    sequence, with fairseq's ``embed_positions`` interface, for a decoder.

    This is the encoding of Vaswani et al. (2017) that the paper writes as
    Eq. 7-8 and that the hiersumm code adds to its decoder input
    (``PositionalEncoding(dropout, d)``: sines at even and cosines at odd
    dimensions, frequency ``10000^(-2i/d)``, the first target token at
    position 0). fairseq's ``SinusoidalPositionalEmbedding`` differs: it puts
    all sines in the first half and all cosines in the second, uses the
    frequency ``10000^(-i/(d/2-1))`` and starts at position ``padding_idx +
    1`` (2 with fairseq's dictionary).

    The encoding has no length limit (``max_positions`` is unbounded).
    """

    def __init__(self, embed_dim: int):
        super().__init__()
        self.embed_dim = embed_dim
        self.max_positions = UNBOUNDED_POSITIONS

    def forward(
        self,
        tokens: Tensor,
        incremental_state=None,
        timestep: Optional[Tensor] = None,
        positions: Optional[Tensor] = None,
    ) -> Tensor:
        """``tokens``: ``[B, T]`` decoder input (the whole prefix during
        incremental decoding). Returns ``[B, T, d]`` float32, or ``[B, 1, d]``
        for the last position only when ``incremental_state`` is given (the
        fairseq decoder keeps only the last position then)."""
        batch_size, length = tokens.shape[:2]
        if positions is None:
            if incremental_state is not None:
                last = length - 1 if timestep is None else int(timestep)
                positions = torch.full((1, 1), last, dtype=torch.long, device=tokens.device)
            else:
                positions = torch.arange(length, device=tokens.device).unsqueeze(0)
        encoding = sinusoidal_encoding(positions, self.embed_dim)
        return encoding.expand(batch_size, -1, -1)
