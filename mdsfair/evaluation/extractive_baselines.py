"""Extractive baselines for multi-document summarization: Lead, LexRank, oracle.

Input is the raw contract (one cluster per JSON line)::

    {"id": str, "documents": [str, ...], "summary": str, "title": str (optional)}

Paragraphs inside a document are separated by blank lines; every paragraph
is split into sentences with :func:`mdsfair.text.split_sentences`
(sentences never cross a paragraph boundary). A multi-reference variant with
``"summaries": [str, ...]`` instead of (or besides) ``"summary"`` is also
read; its references are used by the oracle and by ``mdsfair-baseline --score``.

* :func:`lead`: the first sentences (``num_sentences``) or the first words
  (``num_tokens``, a word budget) of the documents, either document after
  document (``sequential``) or one sentence of each document in turn
  (``round-robin``), optionally after the cluster's title (``include_title``).
* :func:`lexrank`: LexRank with a threshold (Erkan & Radev, 2004): tf-idf
  cosine similarity between the cluster's sentences, an edge where the
  similarity exceeds the threshold (0.1 by default, their choice), PageRank
  (networkx) on that graph; the best-ranked sentences are taken up to
  ``num_sentences`` or a word budget, optionally skipping sentences too
  similar to one already taken.
* :func:`greedy_oracle`: the greedy extractive oracle: repeatedly add the
  sentence that most increases ROUGE-1 F1 + ROUGE-2 F1 against the reference
  summary (mean over references when there are several), stop when no
  sentence increases it.

All three return the chosen sentences in document order (lead: in reading
order), ready to be joined into one summary line.

Word budgets
------------
A word is a whitespace-separated token (``str.split``), the unit of every
count here. A budget of ``W`` words is cut at the word, not at the sentence:
sentences are taken whole while they fit and the sentence that crosses the
budget is cut after its first remaining words, so a Lead summary is exactly
the first ``min(W, words in the cluster)`` words of its reading order and a
LexRank summary holds exactly ``W`` words unless the sentences it may take hold
fewer. (Some authors' scripts stop at sentence boundaries instead, under or
over the budget; :data:`mdsfair.evaluation.baselines.BUDGET_PRESETS` says which.)
:func:`reference_word_budget` is the oracle length (each cluster's budget is
its own reference's word count), as Liu & Lapata (2019) used for their
WikiSum Lead and LexRank.

The command ``mdsfair-baseline`` is :mod:`mdsfair.evaluation.baselines`.
Pure Python (no torch / fairseq import).
"""

from collections import Counter
from typing import Dict, List, Mapping, Optional, Sequence

from mdsfair.lexrank import lexrank_scores, tfidf_cosine_matrix
from mdsfair.raw_contract import cluster_references, decode_cluster_line, iter_raw_lines
from mdsfair.text import split_paragraphs, split_sentences, words

DEFAULT_NUM_SENTENCES = 3  # Lead and LexRank without a word budget
LEAD_ORDERS = ("sequential", "round-robin")


# ---------------------------------------------------------------------------
# Input


def read_clusters(path: str) -> List[Dict]:
    """Read and validate a raw-contract JSONL file (blank lines are skipped; a
    UTF-8 byte-order mark before the first line is ignored) with
    :func:`mdsfair.raw_contract.decode_cluster_line`; references are optional.

    Raises:
        InputFormatError: ``FILE:LINE: reason`` (1-based line), with the raw
        contract's reason code.
    """
    return [decode_cluster_line(raw, path, line, require_references=False) for line, raw in iter_raw_lines(path)]


def reference_summaries(cluster: Mapping) -> List[str]:
    """The cluster's non-empty references: ``summary``, then the entries of
    ``summaries`` that differ from it (:func:`mdsfair.raw_contract.cluster_references`,
    the rule ``mdsfair-preprocess`` follows too)."""
    return cluster_references(cluster)


def word_count(text: str) -> int:
    """Number of whitespace-separated words, the unit of every word budget."""
    return len(text.split())


def reference_word_budget(cluster: Mapping) -> int:
    """The oracle word budget of a cluster: its reference's word count.

    With several references, the mean of their word counts rounded half up.
    Raises ValueError when the cluster has no non-empty reference."""
    references = reference_summaries(cluster)
    if not references:
        raise ValueError(f"cluster {cluster.get('id', '?')!r} has no reference summary to take its length from")
    return int(sum(word_count(text) for text in references) / len(references) + 0.5)


def document_sentences(document: str) -> List[str]:
    """Sentences of one document, paragraph by paragraph."""
    return [s for paragraph in split_paragraphs(document) for s in split_sentences(paragraph)]


def cluster_sentences(cluster: Mapping) -> List[List[str]]:
    """Per document, its sentences (documents without text give empty lists)."""
    return [document_sentences(document) for document in cluster["documents"]]


def _flatten(per_document: Sequence[Sequence[str]]) -> List[str]:
    return [sentence for sentences in per_document for sentence in sentences]


def _truncate_words(sentence: str, words: int) -> str:
    return " ".join(sentence.split()[:words])


def _take_words(sentences: Sequence[str], budget: int) -> List[str]:
    """Sentences in order until ``budget`` words; the last one is cut to fit.

    The result holds exactly ``min(budget, total words)`` words: the first ones."""
    taken, used = [], 0
    for sentence in sentences:
        length = len(sentence.split())
        if used + length >= budget:
            if budget > used:
                taken.append(_truncate_words(sentence, budget - used))
            break
        taken.append(sentence)
        used += length
    return taken


# ---------------------------------------------------------------------------
# Lead


def lead(
    cluster: Mapping,
    num_sentences: Optional[int] = None,
    num_tokens: Optional[int] = None,
    order: str = "sequential",
    include_title: bool = False,
) -> List[str]:
    """Lead baseline: the first sentences or words of the documents.

    Args:
        cluster: a raw-contract cluster (needs ``documents``).
        num_sentences: take this many sentences (default 3 when neither limit is given).
        num_tokens: a word budget instead: exactly the first ``num_tokens``
            whitespace-separated words of the reading order (all of them if
            there are fewer), the sentence that crosses the budget cut at the
            word; exclusive with ``num_sentences``.
        order: ``sequential`` (all of document 1, then document 2, ...) or
            ``round-robin`` (sentence 1 of each document, then sentence 2, ...).
        include_title: put the cluster's ``title`` (when it has one) first, as
            one unit of the reading order; Liu & Lapata (2019)'s WikiSum Lead
            "concatenates the title and ranked paragraphs".

    Returns:
        The chosen sentences in reading order.
    """
    if num_sentences is not None and num_tokens is not None:
        raise ValueError("give num_sentences or num_tokens, not both")
    if order not in LEAD_ORDERS:
        raise ValueError(f"order must be one of {LEAD_ORDERS}, got {order!r}")
    if num_sentences is None and num_tokens is None:
        num_sentences = DEFAULT_NUM_SENTENCES
    limit = num_sentences if num_sentences is not None else num_tokens
    if limit < 1:
        raise ValueError("the lead length must be at least 1")
    per_document = cluster_sentences(cluster)
    if order == "sequential":
        ordered = _flatten(per_document)
    else:
        longest = max((len(sentences) for sentences in per_document), default=0)
        ordered = [
            sentences[position]
            for position in range(longest)
            for sentences in per_document
            if position < len(sentences)
        ]
    title = " ".join(str(cluster.get("title") or "").split())
    if include_title and title:
        ordered = [title] + ordered
    if num_sentences is not None:
        return ordered[:num_sentences]
    return _take_words(ordered, num_tokens)


# ---------------------------------------------------------------------------
# LexRank


def lexrank(
    cluster: Mapping,
    num_sentences: int = DEFAULT_NUM_SENTENCES,
    max_words: Optional[int] = None,
    threshold: float = 0.1,
    damping: float = 0.85,
    weighted: bool = False,
    redundancy_threshold: Optional[float] = None,
) -> List[str]:
    """LexRank baseline.

    Args:
        cluster: a raw-contract cluster (needs ``documents``).
        num_sentences: how many sentences to take when ``max_words`` is None.
        max_words: word budget; sentences are taken by rank until it is
            reached and the last one is cut to fit, so the summary holds
            exactly ``max_words`` words unless the sentences it may take
            (those not skipped as redundant) hold fewer (``num_sentences`` is
            then ignored).
        threshold: similarity threshold for an edge (0.1 as in Erkan & Radev).
        damping: PageRank damping factor.
        weighted: continuous LexRank (similarity-weighted edges).
        redundancy_threshold: if given, skip a sentence whose cosine
            similarity to an already chosen sentence is above this value.

    Returns:
        The chosen sentences in document order.
    """
    sentences = [s for s in _flatten(cluster_sentences(cluster)) if words(s)]
    if not sentences:
        return []
    if max_words is None and num_sentences < 1:
        raise ValueError("num_sentences must be at least 1")
    if max_words is not None and max_words < 1:
        raise ValueError("max_words must be at least 1")
    similarity = tfidf_cosine_matrix(sentences)
    scores = lexrank_scores(sentences, threshold=threshold, damping=damping, weighted=weighted, similarity=similarity)
    ranked = sorted(range(len(sentences)), key=lambda index: (-scores[index], index))
    chosen: Dict[int, str] = {}
    words_used = 0
    for index in ranked:
        if redundancy_threshold is not None and any(similarity[index][c] > redundancy_threshold for c in chosen):
            continue
        sentence = sentences[index]
        if max_words is not None:
            length = len(sentence.split())
            if words_used + length >= max_words:
                chosen[index] = _truncate_words(sentence, max_words - words_used)
                break
            words_used += length
        chosen[index] = sentence
        if max_words is None and len(chosen) == num_sentences:
            break
    return [chosen[index] for index in sorted(chosen)]


# ---------------------------------------------------------------------------
# Greedy oracle


def _ngram_counts(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _f1(candidate: Counter, candidate_total: int, reference: Counter, reference_total: int) -> float:
    if not candidate_total or not reference_total:
        return 0.0
    hits = sum(min(count, reference[gram]) for gram, count in candidate.items() if gram in reference)
    if not hits:
        return 0.0
    precision, recall = hits / candidate_total, hits / reference_total
    return 2 * precision * recall / (precision + recall)


def greedy_oracle(
    cluster: Mapping,
    summary: Optional[Sequence[str]] = None,
    max_sentences: Optional[int] = None,
    stemming: bool = True,
) -> List[str]:
    """Greedy extractive oracle maximising ROUGE-1 F1 + ROUGE-2 F1.

    Tokens are rouge-score's (lower-cased alphanumerics, Porter-stemmed when
    ``stemming``); n-grams are counted within sentences and summed.

    Args:
        cluster: a raw-contract cluster (``documents`` and ``summary`` or ``summaries``).
        summary: reference summary text(s) to use instead of the cluster's.
        max_sentences: stop after this many sentences even if ROUGE still grows.
        stemming: Porter stemming as in ROUGE ``-m``.

    Returns:
        The chosen sentences in document order (empty if nothing helps).
    """
    from rouge_score.tokenizers import DefaultTokenizer

    if summary is None:
        references = reference_summaries(cluster)
    else:
        references = [summary] if isinstance(summary, str) else list(summary)
    if not references:
        raise ValueError(f"cluster {cluster.get('id', '?')!r} has no reference summary for the oracle")
    tokenizer = DefaultTokenizer(use_stemmer=stemming)
    reference_grams = []
    for reference in references:
        tokens = tokenizer.tokenize(reference)
        reference_grams.append([(_ngram_counts(tokens, n), max(len(tokens) - n + 1, 0)) for n in (1, 2)])
    sentences = _flatten(cluster_sentences(cluster))
    sentence_grams = []
    for sentence in sentences:
        tokens = tokenizer.tokenize(sentence)
        sentence_grams.append([(_ngram_counts(tokens, n), max(len(tokens) - n + 1, 0)) for n in (1, 2)])

    def objective(selected_grams) -> float:
        total = 0.0
        for grams in reference_grams:
            for order in (0, 1):
                candidate, candidate_total = selected_grams[order]
                reference, reference_total = grams[order]
                total += _f1(candidate, candidate_total, reference, reference_total)
        return total / len(reference_grams)

    selected: List[int] = []
    current = [(Counter(), 0), (Counter(), 0)]
    best_value = 0.0
    while max_sentences is None or len(selected) < max_sentences:
        best_index, best_grams, best_candidate_value = None, None, best_value
        for index, grams in enumerate(sentence_grams):
            if index in selected:
                continue
            merged = [(current[o][0] + grams[o][0], current[o][1] + grams[o][1]) for o in (0, 1)]
            value = objective(merged)
            if value > best_candidate_value:
                best_index, best_grams, best_candidate_value = index, merged, value
        if best_index is None:
            break
        selected.append(best_index)
        current, best_value = best_grams, best_candidate_value
    return [sentences[index] for index in sorted(selected)]
