"""Sentence-level content selection for LoBART (Manakul & Gales 2021, ACL,
"Long-Span Summarization via Local Attention and Content Selection", Sec. 4):
what ``mdsfair-rank --method mcs|oracle`` and the ``content_selection`` task
share.

* :func:`extractive_labels`: the targets of the extractive task of the
  multitask content selection (MCS) model. As the authors' labelling
  (potsawee/longsum0 ``data/create_extractive_label.py``,
  ``rouge2recall_generate``), a sentence is labelled 1 when its ROUGE-2
  recall against the reference is above 0; a cluster with no such sentence
  has its 3 longest sentences labelled 1.
* :func:`rank_normalised`: a score vector as the ranks of its values, the
  lowest 0 and the highest 1 (``i / (N - 1)``; the authors'
  ``compute_ranking_score`` in ``decode/inference_hiermodel.py``).
* :func:`mcs_scores`: the MCS score of each sentence, the geometric mean of
  the rank-normalised sentence-level attention ``f_attn`` and extractive
  probability ``f_ext``::

      f_MCS(i) = sqrt( rank(f_attn)(i) * rank(f_ext)(i) )

* :func:`oracle_order`: the training-time selection (ORC): sentences by
  decreasing ROUGE-2 recall against the reference; ties (every sentence
  without a shared bigram) in document order (``padlead``) or in a random
  order (``padrand``), or left out (``nopad``); the authors'
  ``traintime_select/oracle_select_{pad,nopad}.py``.
* :func:`select_within_budget`: the sentences of a ranking that fit the
  summarizer's input length, in their original order.

The authors keep adding ranked sentences while the running length is below
the budget, so their last sentence can overrun it (the summarizer then cuts
the input at its limit). Here a sentence that would overrun is left out and
the lower-ranked sentences that still fit are taken: the selection never
exceeds the budget, and every sentence left out is counted
(:class:`Selection`).
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from mdsfair.text import rouge_n_recall

#: The authors' fallback when no sentence shares a bigram with the reference:
#: the 3 longest sentences are the positives (``create_extractive_label.py``).
FALLBACK_POSITIVES = 3

#: The orders of the training-time oracle (the authors' ``oracle_type``
#: ``padlead`` and ``padrand``, and ``oracle_select_nopad.py``).
ORACLE_PADDINGS = ("lead", "random", "none")


def cluster_sentences(cluster) -> List[str]:
    """The sentences of a cluster's documents in stream order (a
    :class:`mdsfair.preprocess.structure.ClusterStructure`)."""
    return [sentence for document in cluster.documents for paragraph in document for sentence in paragraph]


def sentence_recalls(sentence_words: Sequence[Sequence[str]], reference_words: Sequence[str]) -> np.ndarray:
    """ROUGE-2 recall of every sentence against the reference (``[N]``)."""
    return np.array([rouge_n_recall(words, reference_words, 2) for words in sentence_words], dtype=np.float64)


def extractive_labels(sentence_words: Sequence[Sequence[str]], reference_words: Sequence[str]) -> np.ndarray:
    """0/1 label of every sentence: 1 where its ROUGE-2 recall against the
    reference is above 0; when none is, the :data:`FALLBACK_POSITIVES`
    longest sentences (in words; the earlier of equally long ones)."""
    labels = (sentence_recalls(sentence_words, reference_words) > 0).astype(np.float64)
    if not labels.any():
        labels[longest_sentences([len(words) for words in sentence_words])] = 1.0
    return labels


def longest_sentences(word_counts: Sequence[int]) -> np.ndarray:
    """The :data:`FALLBACK_POSITIVES` longest sentences (the earlier of
    equally long ones), longest first."""
    return np.argsort(-np.asarray(word_counts), kind="stable")[:FALLBACK_POSITIVES]


def rank_normalised(scores: Sequence[float]) -> np.ndarray:
    """The rank of each score scaled to [0, 1]: the lowest 0, the highest 1,
    the ``i``-th lowest ``i / (N - 1)``; one score is 1. Equal scores take
    consecutive ranks in their order."""
    scores = np.asarray(scores, dtype=np.float64)
    count = len(scores)
    if count == 1:
        return np.ones(1)
    ranks = np.empty(count)
    ranks[np.argsort(scores, kind="stable")] = np.arange(count) / (count - 1)
    return ranks


def mcs_scores(attention: Sequence[float], extraction: Sequence[float]) -> np.ndarray:
    """``f_MCS = sqrt(rank(f_attn) * rank(f_ext))`` per sentence (the
    geometric mean of the two rank-normalised scores)."""
    attention, extraction = np.asarray(attention), np.asarray(extraction)
    if attention.shape != extraction.shape:
        raise ValueError(
            f"{len(attention)} attention scores but {len(extraction)} extraction scores: one of each per sentence"
        )
    return np.sqrt(rank_normalised(attention) * rank_normalised(extraction))


def oracle_order(
    recalls: Sequence[float],
    padding: str = "random",
    rng: Optional[np.random.Generator] = None,
    word_counts: Optional[Sequence[int]] = None,
) -> np.ndarray:
    """Sentence indices by decreasing ROUGE-2 recall against the reference
    (``recalls``: :func:`sentence_recalls`).

    Equal recalls (above all the sentences sharing no bigram with the
    reference, which pad the input up to the budget) follow ``padding``:
    ``lead`` keeps them in document order, ``random`` shuffles them with
    ``rng``, ``none`` leaves out every sentence whose recall is 0 (and, when
    no sentence is left, orders the :func:`longest_sentences` of
    ``word_counts``, as the authors' ``oracle_select_nopad.py``)."""
    if padding not in ORACLE_PADDINGS:
        raise ValueError(f"oracle padding {padding!r}: expected one of {', '.join(ORACLE_PADDINGS)}")
    recalls = np.asarray(recalls, dtype=np.float64)
    if padding == "random":
        tie_order = (rng if rng is not None else np.random.default_rng()).permutation(len(recalls))
    else:
        tie_order = np.arange(len(recalls))
    order = np.lexsort((tie_order, -recalls))  # the last key sorts first
    if padding == "none":
        order = order[recalls[order] > 0]
        if not len(order):
            if word_counts is None:
                raise ValueError("oracle padding none: no sentence shares a bigram, and no word counts to fall back on")
            order = longest_sentences(word_counts)
    return order


@dataclass
class Selection:
    """The sentences a ranking keeps within a budget.

    ``kept``: indices in their original order; ``kept_tokens``: their
    length in all; ``dropped_sentences`` / ``dropped_tokens``: every
    sentence of the input left out (ranked too low, would overrun the
    budget, or not ranked at all) and its tokens."""

    kept: List[int]
    kept_tokens: int
    dropped_sentences: int
    dropped_tokens: int


def select_within_budget(order: Sequence[int], lengths: Sequence[int], budget: int) -> Selection:
    """Take the sentences of ``order`` (indices into ``lengths``, best first)
    whose lengths fit in ``budget`` tokens, skipping any that would overrun
    it; returns them in their original order with the counts of what was left
    out. An input within the budget is kept whole."""
    if budget < 1:
        raise ValueError(f"the budget must be at least 1 token, not {budget}")
    lengths = [int(length) for length in lengths]
    kept, used = [], 0
    for index in order:
        if used + lengths[index] <= budget:
            kept.append(int(index))
            used += lengths[index]
    kept.sort()
    return Selection(
        kept=kept,
        kept_tokens=used,
        dropped_sentences=len(lengths) - len(kept),
        dropped_tokens=sum(lengths) - used,
    )
