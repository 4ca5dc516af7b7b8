"""N-gram blocking (``--no-repeat-ngram-size``) as one tensor pipeline.

A beam hypothesis may not contain the same n-gram twice: at decoding step
``step`` the history of hypothesis ``h`` is ``tokens[h, :step + 1]`` (the start
symbol, then the ``step`` tokens generated so far), and every token ``w`` for
which ``history[-(n-1):] + [w]`` already occurs in the history gets
log-probability -inf.

Why mdsfair has its own blocker: the pinned fairseq (main, 0.12.3) passes the
whole ``tokens`` buffer of ``SequenceGenerator`` -- ``max_len + 2`` columns,
``<pad>`` after the current step -- to
:class:`fairseq.ngram_repeat_block.NGramRepeatBlock`, whose Python path (the
one used on CPU and wherever its CUDA extension is not built) takes the last
n-1 entries of that buffer as the n-gram prefix to look for. Those are always
``<pad>``, so nothing is ever banned and ``--no-repeat-ngram-size`` silently
does nothing (fairseq issues #4709 and #5206). It also loops over hypotheses
in Python on a host copy of the tokens (fairseq issue #3582 profiled ~90% of a
decoding run inside an earlier form of that loop).

:class:`VectorizedNGramRepeatBlock` reads only the history
``tokens[:, :step + 1]`` and bans with three tensor operations on whichever
device the tensors are on (no loop over hypotheses, no host transfer):

1. ``history.unfold(1, n, 1)`` lists every n-gram of every hypothesis;
2. an n-gram whose first n-1 tokens equal the hypothesis's last n-1 tokens
   names a banned next token (its last one);
3. ``scatter_reduce_(..., "amin")`` writes -inf at the banned tokens and the
   unchanged value elsewhere (min with +inf), so duplicate indices are
   harmless and the result does not depend on write order.

For n >= 2 the banned sets equal those of fairseq's CUDA kernel and of its
Python path given the sliced history (tested). The start symbol at position 0
is context only: it is never itself banned, which matters only for n = 1
("no generated token twice"), where fairseq's CUDA kernel would ban ``</s>``
(the start symbol) and so keep every hypothesis from ending.
"""

import math

import torch
from torch import Tensor, nn


def repeated_ngram_ban(history: Tensor, scores: Tensor, no_repeat_ngram_size: int) -> Tensor:
    """Set ``scores[h, w] = -inf`` in place for every token ``w`` that would
    repeat an n-gram of ``history[h]`` (n = ``no_repeat_ngram_size``).

    Args:
        history: ``[H, L]`` token ids of each hypothesis so far, start symbol
            first (no padding: the generator's buffer sliced to the step).
        scores: ``[H, V]`` next-token scores (log-probabilities), changed in
            place and returned.
    """
    n = no_repeat_ngram_size
    length = history.size(1)
    # windows starting at 0 .. L-n; for n = 1 the window at 0 would ban the start symbol
    first_window = 1 if n == 1 else 0
    if length - n + 1 - first_window <= 0:
        return scores
    ngrams = history.unfold(1, n, 1)[:, first_window:]  # [H, W, n]
    suffix = history[:, length - n + 1 :]  # [H, n-1], the n-gram prefix to look for
    matches = ngrams[:, :, : n - 1].eq(suffix.unsqueeze(1)).all(dim=2)  # [H, W]
    ban_values = torch.where(matches, -math.inf, math.inf).to(scores.dtype)  # min(score, +inf) keeps the score
    scores.scatter_reduce_(1, ngrams[:, :, n - 1], ban_values, reduce="amin", include_self=True)
    return scores


class VectorizedNGramRepeatBlock(nn.Module):
    """Drop-in replacement for :class:`fairseq.ngram_repeat_block.NGramRepeatBlock`
    (same constructor argument, same ``forward`` signature, ``lprobs`` updated
    in place and returned) that reads the history ``tokens[:, :step + 1]``
    instead of the end of the pad-filled buffer. Device-agnostic and
    TorchScript-compatible."""

    def __init__(self, no_repeat_ngram_size: int):
        super().__init__()
        if no_repeat_ngram_size < 1:
            raise ValueError(f"no_repeat_ngram_size must be >= 1, got {no_repeat_ngram_size}")
        self.no_repeat_ngram_size = no_repeat_ngram_size

    def reset_parameters(self):
        pass

    def forward(self, tokens: Tensor, lprobs: Tensor, bsz: int, beam_size: int, step: int) -> Tensor:
        """
        Args:
            tokens: ``[bsz * beam_size, >= step + 1]`` the generator's token
                buffer; columns after ``step`` are ignored.
            lprobs: ``[bsz * beam_size, V]`` log-probabilities of the next
                token, updated in place.
            bsz, beam_size: sentences and beams of the batch.
            step: the current decoding step (0 for the first generated token).
        """
        rows = bsz * beam_size
        if tokens.size(0) != rows or lprobs.size(0) != rows:
            raise ValueError(
                f"expected {rows} hypotheses (bsz {bsz} x beam {beam_size}), got tokens of "
                f"{tokens.size(0)} and lprobs of {lprobs.size(0)} rows"
            )
        if tokens.size(1) < step + 1:
            raise ValueError(f"step {step} needs {step + 1} history columns, tokens has {tokens.size(1)}")
        return repeated_ngram_ban(tokens[:, : step + 1], lprobs, self.no_repeat_ngram_size)

    def extra_repr(self) -> str:
        return f"no_repeat_ngram_size={self.no_repeat_ngram_size}"
