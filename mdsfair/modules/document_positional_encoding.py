"""Document-aware positional encoding (Ma et al., 2022, Section III-A, Eq. 1-4).

For the ``i``-th token of the ``k``-th document the encoder input is::

    Pos_token(i, k) = f_token(i)                                     (Eq. 1)
    Pos_doc(i, k)   = f_doc(k)                                       (Eq. 1)
    Pos(i, k)       = alpha * Stack_dim(f_doc(k)) + f_token(i)       (Eq. 2, 3)
    E(i, k)         = Pos(i, k) + e(i, k)                            (Eq. 4)

``f_doc(k)`` is a scalar repeated over all ``dim`` embedding dimensions
(``Stack_dim``); ``f_token`` is the model's own token positional embedding
(fairseq's sinusoidal one by default, or a learned one).

Choices the paper leaves open, made here and documented:

* **Token position restarts per document.** Eq. 1 writes ``f_token(i)`` with
  ``i`` the index of the token *inside* document ``k`` (``t_i^k``), so by
  default the token position restarts at every document
  (``--doc-token-positions per-document``); ``stream`` keeps fairseq's
  positions over the concatenation. With the task's default start-of-document
  ``<s>`` tokens, position 0 of a document is its ``<s>``; the closing ``</s>``
  continues the last document.
* **Document index base.** ``k`` is the 0-based document index plus
  ``--doc-position-offset`` (0 by default). With 0-based indices the paper's
  explanation of Table IV holds (for two documents sin gives 0 and 0.84, cos 1
  and 0.54: cos separates two documents less than sin); with ``k = 1, 2`` it
  would not (sin: 0.84, 0.91).
* ``iter(A, B)`` of Table IV ("use functions A and B alternately") alternates
  over the embedding dimensions, as the token sinusoids do: even dimensions get
  ``A(k)``, odd dimensions ``B(k)``.

The functions (``--doc-position-fn``), Tables IV and V:

==================  =====================================  ======================
``sin``             ``sin(k)`` (the paper's choice)         protocol satisfied
``cos``             ``cos(k)``                              protocol satisfied
``sin-cos``         ``iter(sin(k), cos(k))``                protocol satisfied
``scaled-sin-cos``  ``iter(sin(0.1 k), cos(0.1 k))``        protocol satisfied
``linear``          ``slope * k`` (``y = x, 2x, 5x, 10x``)  unbounded
``same``            ``1`` for every document                not unique
``random``          a fixed uniform(-1, 1) value per ``k``  drawn at random
==================  =====================================  ======================

The protocol (Section III-A): the encoding of each document is unique, its
values are bounded, and not remarkably larger than the token positional
encoding (whose sinusoids lie in [-1, 1]).
"""

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding
from torch import Tensor

DOC_POSITION_FUNCTIONS = ("sin", "cos", "sin-cos", "scaled-sin-cos", "linear", "same", "random")
TOKEN_POSITION_MODES = ("per-document", "stream")
# Size of the fixed random table of ``--doc-position-fn random`` (documents per cluster).
RANDOM_TABLE_SIZE = 1024


def positions_within_documents(doc_ids: Tensor) -> Tensor:
    """0, 1, 2, ... restarting at every change of ``doc_ids`` along dim 1.

    ``doc_ids`` is ``[B, T]``, non-decreasing along each row, ``-1`` at padding
    (the task's contract); the result is ``[B, T]`` (padding gets arbitrary
    values and must be masked by the caller).
    """
    batch_size, length = doc_ids.shape
    index = torch.arange(length, device=doc_ids.device).expand(batch_size, length)
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    start_of_run = torch.cummax(torch.where(starts, index, torch.zeros_like(index)), dim=1).values
    return index - start_of_run


def token_position_encoding(embed_positions: nn.Module, positions: Tensor) -> Tensor:
    """``f_token`` at explicit fairseq positions (``padding_idx + 1 + i``) for
    fairseq's sinusoidal or learned positional embedding; ``[B, T, C]``."""
    if isinstance(embed_positions, SinusoidalPositionalEmbedding):
        needed = int(positions.max()) + 1
        weights = embed_positions.weights
        if needed > weights.size(0):
            weights = SinusoidalPositionalEmbedding.get_embedding(
                needed, embed_positions.embedding_dim, embed_positions.padding_idx
            ).to(weights)
            embed_positions.weights = weights
        return weights.index_select(0, positions.reshape(-1)).view(*positions.shape, -1).detach()
    if isinstance(embed_positions, LearnedPositionalEmbedding):
        return F.embedding(positions, embed_positions.weight, embed_positions.padding_idx)
    raise TypeError(f"unsupported token positional embedding {type(embed_positions).__name__}")


class DocumentAwarePositionalEncoding(nn.Module):
    """``alpha * Stack_dim(f_doc(k)) + f_token(i)`` (Eq. 2-3) for a flat source.

    Args:
        embed_dim: model dimension (``dim_token``).
        padding_idx: the dictionary's padding index.
        function: ``f_doc``, one of :data:`DOC_POSITION_FUNCTIONS`.
        alpha: the trade-off weight of Eq. 2.
        linear_slope: slope of ``--doc-position-fn linear``.
        offset: added to the 0-based document index to give ``k``.
        token_positions: ``per-document`` (``i`` restarts per document, Eq. 1)
            or ``stream`` (fairseq's positions over the concatenation).
    """

    def __init__(
        self,
        embed_dim: int,
        padding_idx: int,
        function: str = "sin",
        alpha: float = 0.1,
        linear_slope: float = 1.0,
        offset: int = 0,
        token_positions: str = "per-document",
    ):
        super().__init__()
        if function not in DOC_POSITION_FUNCTIONS:
            raise ValueError(f"--doc-position-fn {function!r}: choose from {DOC_POSITION_FUNCTIONS}")
        if token_positions not in TOKEN_POSITION_MODES:
            raise ValueError(f"--doc-token-positions {token_positions!r}: choose from {TOKEN_POSITION_MODES}")
        if offset < 0:
            raise ValueError(f"--doc-position-offset must be >= 0, got {offset}")
        self.embed_dim = embed_dim
        self.padding_idx = padding_idx
        self.function = function
        self.alpha = alpha
        self.linear_slope = linear_slope
        self.offset = offset
        self.token_positions = token_positions
        if function == "random":
            # Fixed at construction and saved with the model, so a checkpoint
            # decodes with the values it was trained with.
            self.register_buffer("random_values", torch.rand(RANDOM_TABLE_SIZE) * 2 - 1)
        else:
            self.random_values = None

    def document_encoding(self, doc_ids: Tensor) -> Tensor:
        """``Stack_dim(f_doc(k))`` (Eq. 3): ``[B, T]`` document ids -> ``[B, T, dim]``
        (zeros at padding, where ``doc_ids`` is ``-1``)."""
        padding = doc_ids < 0
        k = doc_ids.clamp(min=0) + self.offset
        kf = k.float()
        if self.function in ("sin-cos", "scaled-sin-cos"):
            scale = 0.1 if self.function == "scaled-sin-cos" else 1.0
            even = torch.arange(self.embed_dim, device=doc_ids.device) % 2 == 0
            angle = (scale * kf).unsqueeze(-1)
            encoding = torch.where(even, torch.sin(angle), torch.cos(angle))
        else:
            if self.function == "sin":
                value = torch.sin(kf)
            elif self.function == "cos":
                value = torch.cos(kf)
            elif self.function == "linear":
                value = self.linear_slope * kf
            elif self.function == "same":
                value = torch.ones_like(kf)
            else:  # random
                if int(k.max()) >= RANDOM_TABLE_SIZE:
                    raise ValueError(
                        f"--doc-position-fn random covers {RANDOM_TABLE_SIZE} documents per cluster; got "
                        f"document index {int(k.max())} (lower --max-documents)"
                    )
                value = self.random_values[k]
            encoding = value.unsqueeze(-1).expand(*doc_ids.shape, self.embed_dim)
        return encoding.masked_fill(padding.unsqueeze(-1), 0.0)

    def token_encoding(
        self, src_tokens: Tensor, doc_ids: Tensor, embed_positions: Optional[nn.Module]
    ) -> Optional[Tensor]:
        """``f_token(i)`` with ``i`` per document or over the stream
        (``embed_positions`` is the model's own token positional embedding)."""
        if embed_positions is None:
            return None
        if self.token_positions == "stream":
            return embed_positions(src_tokens)
        not_padding = src_tokens.ne(self.padding_idx)
        positions = positions_within_documents(doc_ids) + self.padding_idx + 1
        positions = torch.where(not_padding, positions, torch.full_like(positions, self.padding_idx))
        return token_position_encoding(embed_positions, positions)

    def forward(self, src_tokens: Tensor, doc_ids: Tensor, embed_positions: Optional[nn.Module] = None) -> Tensor:
        """``Pos`` of Eq. 2 for every source token: ``[B, T, dim]``.

        ``embed_positions`` is the model's token positional embedding
        (``f_token``: fairseq's sinusoidal or learned one; ``None`` for a model
        without token positions). It stays owned by the model, so the state
        dict keeps fairseq's parameter names. ``doc_ids`` is aligned to
        ``src_tokens`` (the encoder checks its side inputs once,
        :func:`~mdsfair.data.side_inputs.check_side_inputs`).
        """
        if doc_ids is None:
            raise ValueError(
                "document-aware positional encoding needs src_doc_ids (task multidoc_summarization provides them)"
            )
        encoding = self.alpha * self.document_encoding(doc_ids)
        token = self.token_encoding(src_tokens, doc_ids, embed_positions)
        return encoding if token is None else encoding + token.to(encoding.dtype)

    def extra_repr(self) -> str:
        return (
            f"function={self.function}, alpha={self.alpha}, offset={self.offset}, "
            f"token_positions={self.token_positions}"
            + (f", linear_slope={self.linear_slope}" if self.function == "linear" else "")
        )
