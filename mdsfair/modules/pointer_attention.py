"""The attention, copy mixture and coverage of the pointer-generator network
(See, Liu & Manning, ACL 2017, "Get To The Point: Summarization with
Pointer-Generator Networks", Sections 2.1-2.3).

* :class:`CoverageAttention`: Bahdanau attention of a decoder state ``s_t``
  over the encoder states ``h_i``, with the coverage feature of Eq. 11::

      e^t_i = v^T tanh(W_h h_i + W_s s_t + w_c c^t_i + b_attn)   (Eq. 1, 11)
      a^t   = softmax(e^t)                                       (Eq. 2)
      h*_t  = sum_i a^t_i h_i                                    (Eq. 3)
      c^t   = sum_{t' < t} a^{t'}                                (Eq. 10)

  Without coverage the ``w_c`` term is absent (Eq. 1).
* :func:`copy_mixture`: the final distribution over the vocabulary (Eq. 9)::

      P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a^t_i

  ``w_i`` are the source token ids, so a token of the source gets the
  attention of each of its occurrences.
* :func:`coverage_loss_terms`: ``covloss_t = sum_i min(a^t_i, c^t_i)``
  (Eq. 12), the term the coverage loss of Eq. 13 weighs by lambda.
"""

from typing import Tuple

import torch
from torch import Tensor, nn


class CoverageAttention(nn.Module):
    """Eq. 1-3 and 10-11 for one decoder step.

    Args:
        encoder_dim: size of the encoder states ``h_i``.
        decoder_dim: size of the decoder state ``s_t``.
        attention_dim: size of ``W_h h_i`` (the rows of ``v``).
        coverage: add ``w_c c^t_i`` (Eq. 11); without it, Eq. 1.
    """

    def __init__(self, encoder_dim: int, decoder_dim: int, attention_dim: int, coverage: bool):
        super().__init__()
        self.encoder_projection = nn.Linear(encoder_dim, attention_dim, bias=False)  # W_h
        self.decoder_projection = nn.Linear(decoder_dim, attention_dim, bias=True)  # W_s, b_attn
        self.coverage_projection = nn.Linear(1, attention_dim, bias=False) if coverage else None  # w_c
        self.score = nn.Linear(attention_dim, 1, bias=False)  # v

    def encoder_features(self, encoder_states: Tensor) -> Tensor:
        """``W_h h_i`` ``[B, S, attention_dim]``, the same at every step."""
        return self.encoder_projection(encoder_states)

    def forward(
        self,
        decoder_state: Tensor,
        encoder_states: Tensor,
        encoder_features: Tensor,
        encoder_padding_mask: Tensor,
        coverage: Tensor,
    ) -> Tuple[Tensor, Tensor]:
        """The attention ``a^t`` ``[B, S]`` (zero at padding) and the context
        ``h*_t`` ``[B, encoder_dim]``.

        Args:
            decoder_state: ``s_t`` ``[B, decoder_dim]``.
            encoder_states: ``h_i`` ``[B, S, encoder_dim]``.
            encoder_features: :meth:`encoder_features` of ``encoder_states``.
            encoder_padding_mask: ``[B, S]``, True at padding.
            coverage: ``c^t`` ``[B, S]`` (zeros at the first step).
        """
        features = encoder_features + self.decoder_projection(decoder_state)[:, None, :]
        if self.coverage_projection is not None:
            features = features + self.coverage_projection(coverage[:, :, None].to(features.dtype))
        scores = self.score(torch.tanh(features)).squeeze(-1)
        scores = scores.masked_fill(encoder_padding_mask, torch.finfo(scores.dtype).min)
        attention = torch.softmax(at_least_float32(scores), dim=-1).masked_fill(encoder_padding_mask, 0.0)
        context = torch.bmm(attention.to(encoder_states.dtype)[:, None, :], encoder_states).squeeze(1)
        return attention, context


def at_least_float32(tensor: Tensor) -> Tensor:
    """``tensor`` in float32 if its dtype is narrower (half precision), else as it is."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def copy_mixture(vocabulary_probabilities: Tensor, attention: Tensor, src_tokens: Tensor, p_gen: Tensor) -> Tensor:
    """Eq. 9 in float32 (float64 stays float64): ``p_gen * P_vocab`` plus
    ``(1 - p_gen)`` times the attention scattered onto the source token ids.

    Args:
        vocabulary_probabilities: ``P_vocab`` ``[B, T, V]``.
        attention: ``a^t`` ``[B, T, S]`` (zero at padding).
        src_tokens: ``w_i`` ``[B, S]``, ids below ``V``.
        p_gen: ``[B, T, 1]``.
    """
    p_gen = at_least_float32(p_gen)
    mixture = at_least_float32(vocabulary_probabilities) * p_gen
    dtype = mixture.dtype
    index = src_tokens[:, None, :].expand(-1, attention.size(1), -1)
    return mixture.scatter_add(2, index, attention.to(dtype) * (1 - p_gen))


def coverage_loss_terms(attention: Tensor, coverage: Tensor) -> Tensor:
    """``sum_i min(a^t_i, c^t_i)`` (Eq. 12) for each step: ``[B, T]`` from
    ``[B, T, S]`` attentions and coverages (``coverage[:, t]`` the sum of
    ``attention[:, :t]``)."""
    return torch.minimum(attention, coverage).sum(dim=-1)
