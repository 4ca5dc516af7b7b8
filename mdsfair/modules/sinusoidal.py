"""Sinusoidal encodings (Liu & Lapata 2019, Eq. 7-10): a token's paragraph
rank and its position inside the paragraph for the encoder, and the target
position for the decoder.

Eq. 7-8 give the encoding of the p-th element of a sequence::

    e_p[2i]     = sin(p / 10000^(2i/d))
    e_p[2i + 1] = cos(p / 10000^(2i/d))

Eq. 9 concatenates the encoding of the paragraph rank ``i`` and of the token
position ``j`` inside the paragraph, ``d/2`` dimensions each, and Eq. 10 adds
the result to the word embedding.

The same encodings in PEGASUS's layout (all sines, then all cosines) are
:func:`halves_sinusoidal_table` and :class:`HalvesSinusoidalPositions`.
"""

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F


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
        incremental decoding). Returns ``[B, T, d]`` (float32; a table's dtype
        in a subclass that reads one), or ``[B, 1, d]`` for the last position
        only when ``incremental_state`` is given (the fairseq decoder keeps
        only the last position then)."""
        if positions is None:
            if incremental_state is not None:
                last = tokens.size(1) - 1 if timestep is None else int(timestep)
                positions = torch.full((1, 1), last, dtype=torch.long, device=tokens.device)
            else:
                positions = self.token_positions(tokens)
        return self.encode(positions).expand(tokens.size(0), -1, -1)

    def token_positions(self, tokens: Tensor) -> Tensor:
        """The positions of a whole sequence: ``0 .. T-1`` (``[1, T]``)."""
        return torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)

    def encode(self, positions: Tensor) -> Tensor:
        """The encodings of integer ``positions``: ``[..., d]``."""
        return sinusoidal_encoding(positions, self.embed_dim)


def halves_sinusoidal_table(num_positions: int, dim: int) -> Tensor:
    """Eq. 7-8 for the positions ``0 .. num_positions - 1`` in PEGASUS's
    layout (Zhang et al. 2020, a Transformer with Vaswani et al.'s sinusoidal
    positions, as Hugging Face's ``PegasusSinusoidalPositionalEmbedding``
    lays them out): the sines of every frequency ``10000^(-2i/d)`` in the
    first ``ceil(d/2)`` dimensions, the cosines in the rest (not interleaved).
    The angles are computed in float64 with numpy and the values rounded to
    float32, as that table stores them; returns ``[num_positions, dim]``
    float32."""
    if dim <= 0:
        raise ValueError(f"sinusoidal encoding needs a positive dimension, got {dim}")
    half = (dim + 1) // 2
    angles = np.arange(num_positions, dtype=np.float64)[:, None] / np.power(
        10000, 2 * np.arange(half, dtype=np.float64) / dim
    )
    table = np.concatenate([np.sin(angles), np.cos(angles[:, : dim - half])], axis=1)
    return torch.from_numpy(table.astype(np.float32))


class HalvesSinusoidalPositions(SinusoidalPositions):
    """PEGASUS's positions (:func:`halves_sinusoidal_table`) with fairseq's
    ``embed_positions`` interface, for an encoder or a decoder.

    A token's position is the number of non-padding tokens before it, so a
    left-padded batch (fairseq's sources) gets the positions ``0, 1, 2, ...``
    that the right-padded one gets; during incremental decoding the last
    token of the prefix is at ``len(prefix) - 1``. The table is a buffer
    (not in the state dict) of ``num_positions`` rows that follows the
    model's dtype: float32 values, as Hugging Face's, also in a float64 model.
    """

    def __init__(self, num_positions: int, embed_dim: int, padding_idx: int):
        super().__init__(embed_dim)
        self.padding_idx = padding_idx
        self.max_positions = num_positions
        self.register_buffer("table", halves_sinusoidal_table(num_positions, embed_dim), persistent=False)

    def token_positions(self, tokens: Tensor) -> Tensor:
        """``[B, T]``: each token's count of non-padding tokens before it."""
        return (torch.cumsum(tokens.ne(self.padding_idx), dim=1) - 1).clamp(min=0)

    def encode(self, positions: Tensor) -> Tensor:
        return F.embedding(positions, self.table)
