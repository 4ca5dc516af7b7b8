"""Summary length limits in words (``--min-len-words``, ``--max-len-words``)
for a beam search over subword tokens.

fairseq's ``--min-len`` and ``--max-len-b`` count tokens; a paper that limits
its summaries in words (DAPE, Ma et al. 2022, Sec. IV-B: "The minimum and
maximum lengths of the generated summaries are set to 200 and 300 words for
the Multi-News dataset, while 110 and 300 words for the Multi-XScience
dataset") cannot be reproduced by a token count, since words and subword
tokens do not correspond one to one. These limits count words the way
``mdsfair-preprocess`` aligns words with subwords
(``SubwordEncoder.starts_word``): a word begins at every generated text
symbol the subword model marks as word-initial (SentencePiece's ``▁``,
GPT-2 BPE's leading space) and at the first text symbol after the start
symbol or a control symbol (``<s>``, ``<doc-sep>``, ...), which never are
words themselves.

At decoding step ``step`` hypothesis ``h`` has generated
``tokens[h, 1:step + 1]`` and holds ``w_h`` words. Before the search picks
the next token:

* ``w_h < min_words``: ``</s>`` gets log-probability -inf, so the hypothesis
  cannot end (as fairseq's ``--min-len`` bans ``</s>`` below its token
  count), unless ``</s>`` is the only token left to it (fairseq forces it at
  the token limit ``--max-len-b``, which stays the outer bound);
* ``w_h >= max_words``: every token that would begin a new word gets -inf,
  so the hypothesis may finish its last word (continuation pieces such as
  punctuation attached to it) and end, but holds at most ``max_words`` words.

The limits run where fairseq's generator and mdsfair's static-shape one call
their n-gram blocker (``repeat_ngram_blocker``, after the length, prefix and
``--min-len`` handling and right before the search step): :class:`WordLengthLimits`
takes that slot and calls the blocker it replaces first.
"""

import math
from typing import Optional

import torch
from torch import Tensor, nn

from mdsfair.generation.sequence_generator import GenerationSettingsError

#: The generation options of the limits, by dest name (the task's flags; a generation config's, e.g. the hub's
#: ``generate(min_len_words=...)``, take precedence).
WORD_LIMIT_OPTIONS = ("min_len_words", "max_len_words")


class WordLimitError(GenerationSettingsError):
    """Word limits that cannot produce a summary."""


def check_word_limits(min_words: Optional[int], max_words: Optional[int]) -> None:
    """Refuse a negative ``--min-len-words``, a ``--max-len-words`` below 1 and
    a minimum above the maximum."""
    if min_words is not None and min_words < 0:
        raise WordLimitError(f"--min-len-words must be at least 0, got {min_words}")
    if max_words is not None and max_words < 1:
        raise WordLimitError(f"--max-len-words must be at least 1, got {max_words}")
    if min_words is not None and max_words is not None and min_words > max_words:
        raise WordLimitError(
            f"--min-len-words {min_words} is above --max-len-words {max_words}: no summary can satisfy both"
        )


def word_openings(generated: Tensor, word_start: Tensor, text: Tensor) -> Tensor:
    """``[H, L]`` bool: whether each generated token begins a word.

    Args:
        generated: ``[H, L]`` token ids generated so far (the start symbol excluded).
        word_start: ``[V]`` bool, the symbol is word-initial in the subword model.
        text: ``[V]`` bool, the symbol is text (not a control symbol).
    """
    is_text = text[generated]
    after_control = torch.ones_like(is_text)
    after_control[:, 1:] = ~is_text[:, :-1]
    return is_text & (word_start[generated] | after_control)


class WordLengthLimits(nn.Module):
    """The word limits of the module docstring in the n-gram blocker's slot
    (same ``forward`` signature; ``lprobs`` updated in place and returned).

    Args:
        word_start: ``[V]`` bool, which dictionary symbols begin a word.
        text: ``[V]`` bool, which dictionary symbols are text.
        eos: the end-of-summary index.
        min_words, max_words: the limits (None: no limit).
        inner: the n-gram blocker this module replaces (called first), or None.
    """

    def __init__(
        self,
        word_start: Tensor,
        text: Tensor,
        eos: int,
        min_words: Optional[int] = None,
        max_words: Optional[int] = None,
        inner: Optional[nn.Module] = None,
    ):
        super().__init__()
        check_word_limits(min_words, max_words)
        if word_start.shape != text.shape or word_start.dim() != 1:
            raise ValueError(f"word_start {tuple(word_start.shape)} and text {tuple(text.shape)}: expected [V] each")
        self.register_buffer("word_start", (word_start & text).bool(), persistent=False)
        self.register_buffer("text", text.bool(), persistent=False)
        self.eos = eos
        self.min_words = min_words
        self.max_words = max_words
        self.inner = inner

    def forward(self, tokens: Tensor, lprobs: Tensor, bsz: int, beam_size: int, step: int) -> Tensor:
        if self.inner is not None:
            lprobs = self.inner(tokens, lprobs, bsz, beam_size, step)
        word_start = self.word_start.to(lprobs.device)
        text = self.text.to(lprobs.device)
        words = word_openings(tokens[:, 1 : step + 1], word_start, text).sum(dim=1)
        if self.min_words:
            others_open = torch.isfinite(torch.cat([lprobs[:, : self.eos], lprobs[:, self.eos + 1 :]], dim=1)).any(1)
            keep_going = (words < self.min_words) & others_open
            lprobs[:, self.eos].masked_fill_(keep_going, -math.inf)
        if self.max_words is not None:
            last_is_text = text[tokens[:, step]]  # the start symbol at step 0 is no text
            full = words >= self.max_words
            opens_word = word_start.unsqueeze(0) | (text.unsqueeze(0) & ~last_is_text.unsqueeze(1))
            lprobs.masked_fill_(full.unsqueeze(1) & opens_word, -math.inf)
        return lprobs

    def extra_repr(self) -> str:
        return f"min_words={self.min_words}, max_words={self.max_words}"


def attach_word_limits(generator, word_start: Tensor, text: Tensor, min_words=None, max_words=None):
    """Put :class:`WordLengthLimits` into ``generator.repeat_ngram_blocker``
    (wrapping the blocker there, if any); returns ``generator``. Without a
    limit the generator is returned unchanged. A generator without that slot
    (``SequenceScorer`` for ``--score-reference``) generates nothing to limit
    and is returned unchanged."""
    if min_words is None and max_words is None:
        check_word_limits(min_words, max_words)
        return generator
    if not hasattr(generator, "repeat_ngram_blocker"):
        return generator
    generator.repeat_ngram_blocker = WordLengthLimits(
        word_start, text, generator.eos, min_words, max_words, inner=generator.repeat_ngram_blocker
    )
    return generator
