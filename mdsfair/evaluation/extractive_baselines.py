"""Extractive baselines for multi-document summarization: Lead, LexRank,
TextRank, MMR, oracle.

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
* :func:`textrank`: TextRank (Mihalcea & Tarau, 2004): the complete graph of
  the sentences weighted by their word overlap over their log lengths,
  weighted PageRank (damping 0.85) by power iteration to a stated tolerance;
  the best-ranked sentences are taken as LexRank takes them.
* :func:`mmr`: maximal marginal relevance (Carbonell & Goldstein, 1998):
  sentences chosen one at a time by relevance to the cluster centroid minus
  redundancy with those already chosen (lambda 0.5), up to the same lengths.
* LexRank, TextRank and MMR rank sentences or, with ``unit="paragraph"``,
  whole paragraphs, as Liu & Lapata (2019) rank WikiSum's paragraphs; a
  sentence count then counts paragraphs.
* :func:`greedy_oracle`: the greedy extractive oracle: repeatedly add the
  sentence that most increases ROUGE-1 F1 + ROUGE-2 F1 against the reference
  summary (mean over references when there are several), stop when no
  sentence increases it.

All of them return the chosen sentences (or paragraphs) in document order
(lead: in reading order), ready to be joined into one summary line.

Word budgets
------------
A word is a whitespace-separated token (``str.split``), the unit of every
count here. A budget of ``W`` words is cut at the word, not at the sentence:
sentences are taken whole while they fit and the sentence that crosses the
budget is cut after its first remaining words, so a Lead summary is exactly
the first ``min(W, words in the cluster)`` words of its reading order and a
LexRank, TextRank or MMR summary holds exactly ``W`` words unless the units it
may take hold fewer. (Some authors' scripts stop at sentence boundaries instead, under or
over the budget; :data:`mdsfair.evaluation.baselines.BUDGET_PRESETS` says which.)
:func:`reference_word_budget` is the oracle length (each cluster's budget is
its own reference's word count), as Liu & Lapata (2019) used for their
WikiSum Lead and LexRank.

The command ``mdsfair-baseline`` is :mod:`mdsfair.evaluation.baselines`.
Pure Python (no torch / fairseq import).
"""

import math
from collections import Counter
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from mdsfair.lexrank import (
    cosine_matrix,
    cosine_similarity,
    lexrank_scores,
    tfidf_cosine_matrix,
    tfidf_vectors,
    vector_norm,
)
from mdsfair.raw_contract import cluster_references, decode_cluster_line, iter_raw_lines
from mdsfair.text import split_paragraphs, split_sentences, words

DEFAULT_NUM_SENTENCES = 3  # Lead, LexRank, TextRank and MMR without a word budget
LEAD_ORDERS = ("sequential", "round-robin")
TEXT_UNITS = ("sentence", "paragraph")  # what LexRank, TextRank and MMR rank
TEXTRANK_TOLERANCE = 1e-4  # the power iteration stops when no score changes by this much
MMR_LAMBDA = 0.5  # MMR's trade-off between relevance and redundancy


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


def text_units(cluster: Mapping, unit: str = "sentence") -> List[str]:
    """The units a ranking baseline chooses from, in document order: the
    cluster's sentences, or its paragraphs (:func:`mdsfair.text.split_paragraphs`,
    each paragraph of each document one unit), keeping those with a word."""
    if unit not in TEXT_UNITS:
        raise ValueError(f"unit must be one of {TEXT_UNITS}, got {unit!r}")
    if unit == "sentence":
        units = _flatten(cluster_sentences(cluster))
    else:
        units = [paragraph for document in cluster["documents"] for paragraph in split_paragraphs(document)]
    return [text for text in units if words(text)]


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


def _units_to_rank(cluster: Mapping, unit: str, num_sentences: int, max_words: Optional[int]) -> List[str]:
    """The :func:`text_units` a ranking baseline chooses from; the length is
    checked when there is anything to choose."""
    units = text_units(cluster, unit)
    if units and max_words is None and num_sentences < 1:
        raise ValueError("num_sentences must be at least 1")
    if units and max_words is not None and max_words < 1:
        raise ValueError("max_words must be at least 1")
    return units


def _best_first(scores: Sequence[float]) -> List[int]:
    """Indices by decreasing score, ties to the earlier unit."""
    return sorted(range(len(scores)), key=lambda index: (-scores[index], index))


def _take_in_order(
    units: Sequence[str],
    order: Iterable[int],
    num_units: int,
    max_words: Optional[int],
    admissible: Optional[Callable[[int, Mapping[int, str]], bool]] = None,
) -> List[str]:
    """Units in the given order (a ranking) until ``num_units`` are taken or,
    with ``max_words``, until the word budget is reached, the unit that crosses
    it cut at the word; ``admissible(index, chosen)`` may skip a unit. Returns
    the chosen units in document order."""
    chosen: Dict[int, str] = {}
    words_used = 0
    for index in order:
        if admissible is not None and not admissible(index, chosen):
            continue
        text = units[index]
        if max_words is not None:
            length = len(text.split())
            if words_used + length >= max_words:
                chosen[index] = _truncate_words(text, max_words - words_used)
                break
            words_used += length
        chosen[index] = text
        if max_words is None and len(chosen) == num_units:
            break
    return [chosen[index] for index in sorted(chosen)]


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
    unit: str = "sentence",
) -> List[str]:
    """LexRank baseline.

    Args:
        cluster: a raw-contract cluster (needs ``documents``).
        num_sentences: how many units to take when ``max_words`` is None.
        max_words: word budget; units are taken by rank until it is
            reached and the last one is cut to fit, so the summary holds
            exactly ``max_words`` words unless the units it may take
            (those not skipped as redundant) hold fewer (``num_sentences`` is
            then ignored).
        threshold: similarity threshold for an edge (0.1 as in Erkan & Radev).
        damping: PageRank damping factor.
        weighted: continuous LexRank (similarity-weighted edges).
        redundancy_threshold: if given, skip a unit whose cosine
            similarity to an already chosen unit is above this value.
        unit: rank each ``sentence`` or each whole ``paragraph`` (:func:`text_units`);
            Liu & Lapata (2019)'s WikiSum LexRank builds "a graph with paragraphs
            as nodes and edges weighted by tf-idf cosine similarity": ``unit="paragraph",
            weighted=True, threshold=0``.

    Returns:
        The chosen units in document order.
    """
    sentences = _units_to_rank(cluster, unit, num_sentences, max_words)
    if not sentences:
        return []
    similarity = tfidf_cosine_matrix(sentences)
    scores = lexrank_scores(sentences, threshold=threshold, damping=damping, weighted=weighted, similarity=similarity)

    def not_redundant(index: int, chosen: Mapping[int, str]) -> bool:
        return not any(similarity[index][c] > redundancy_threshold for c in chosen)

    return _take_in_order(
        sentences,
        _best_first(scores),
        num_sentences,
        max_words,
        None if redundancy_threshold is None else not_redundant,
    )


# ---------------------------------------------------------------------------
# TextRank


def textrank_similarity(first: Sequence[str], second: Sequence[str]) -> float:
    """Mihalcea & Tarau (2004)'s similarity of two sentences given as word lists:
    the number of distinct words they share over the sum of their log lengths,

        Similarity(S_i, S_j) = |{w : w in S_i and w in S_j}| / (log |S_i| + log |S_j|),

    with natural logarithms (the base scales every weight alike, which the
    normalised PageRank of :func:`weighted_pagerank` ignores) and 0 where the
    denominator is 0 (two one-word sentences) or a sentence is empty."""
    if not first or not second:
        return 0.0
    denominator = math.log(len(first)) + math.log(len(second))
    if denominator == 0:
        return 0.0
    return len(set(first) & set(second)) / denominator


def weighted_pagerank(
    weights: Sequence[Sequence[float]], damping: float = 0.85, tolerance: float = TEXTRANK_TOLERANCE
) -> List[float]:
    """TextRank's weighted PageRank (Mihalcea & Tarau 2004) on an undirected graph,

        WS(V_i) = (1 - d) + d * sum_{j in In(V_i)} w_ji / (sum_{k in Out(V_j)} w_jk) * WS(V_j),

    by power iteration from WS = 1 for every vertex, stopping when no vertex's
    score changes by ``tolerance`` or more in one iteration (their criterion: the
    error rate of every vertex below a threshold). The map shrinks L1 distances by
    ``d``, so the scores returned lie within ``N * tolerance * d / (1 - d)`` (L1)
    of its fixed point. A vertex without edges scores ``1 - d``. Without such
    vertices the fixed point is ``N`` times networkx's ``pagerank`` (which
    normalises the scores to sum to 1).

    Args:
        weights: symmetric matrix of edge weights (0: no edge; the diagonal is ignored).
        damping: ``d``, 0.85 by default (Mihalcea & Tarau's setting, PageRank's).
        tolerance: the convergence threshold (positive).
    """
    if not 0 < damping < 1:
        raise ValueError(f"damping must lie in (0, 1), got {damping}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance}")
    count = len(weights)
    out_weight = [sum(weights[j][k] for k in range(count) if k != j) for j in range(count)]
    incoming = [
        [(j, weights[j][i] / out_weight[j]) for j in range(count) if j != i and weights[j][i] > 0] for i in range(count)
    ]
    # From WS = 1 the L1 distance to the fixed point is at most 2N, so in exact
    # arithmetic an iteration's change is below 4N d^k after k iterations.
    iterations = max(1, math.ceil(math.log(tolerance / (4 * max(count, 1))) / math.log(damping))) + 10
    scores = [1.0] * count
    for _ in range(iterations):
        updated = [(1 - damping) + damping * sum(share * scores[j] for j, share in incoming[i]) for i in range(count)]
        change = max((abs(new - old) for new, old in zip(updated, scores)), default=0.0)
        scores = updated
        if change < tolerance:
            return scores
    raise ValueError(
        f"the TextRank power iteration did not reach the tolerance {tolerance:g} in {iterations} iterations "
        "(a tolerance below floating-point rounding)"
    )


def textrank_scores(units: Sequence[str], damping: float = 0.85, tolerance: float = TEXTRANK_TOLERANCE) -> List[float]:
    """TextRank score of each unit: :func:`weighted_pagerank` on the complete
    graph weighted by :func:`textrank_similarity` of their :func:`mdsfair.text.words`
    (every word kept: the paper names no stop list or stemmer for sentences)."""
    tokens = [words(text) for text in units]
    count = len(units)
    weights = [[0.0] * count for _ in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            weights[i][j] = weights[j][i] = textrank_similarity(tokens[i], tokens[j])
    return weighted_pagerank(weights, damping=damping, tolerance=tolerance)


def textrank(
    cluster: Mapping,
    num_sentences: int = DEFAULT_NUM_SENTENCES,
    max_words: Optional[int] = None,
    damping: float = 0.85,
    tolerance: float = TEXTRANK_TOLERANCE,
    unit: str = "sentence",
) -> List[str]:
    """TextRank baseline (Mihalcea & Tarau 2004, sentence extraction): the units
    with the highest :func:`textrank_scores` (ties: the earlier unit), taken up to
    ``num_sentences`` or a word budget as :func:`lexrank` takes them.

    Args:
        cluster: a raw-contract cluster (needs ``documents``).
        num_sentences: how many units to take when ``max_words`` is None.
        max_words: word budget (the unit that crosses it is cut at the word).
        damping: PageRank damping factor ``d``.
        tolerance: the power iteration's convergence threshold.
        unit: ``sentence`` or ``paragraph`` (:func:`text_units`).

    Returns:
        The chosen units in document order.
    """
    units = _units_to_rank(cluster, unit, num_sentences, max_words)
    if not units:
        return []
    scores = textrank_scores(units, damping=damping, tolerance=tolerance)
    return _take_in_order(units, _best_first(scores), num_sentences, max_words)


# ---------------------------------------------------------------------------
# Maximal marginal relevance


def mmr_order(relevance: Sequence[float], similarity: Sequence[Sequence[float]], trade_off: float) -> Iterator[int]:
    """Maximal marginal relevance (Carbonell & Goldstein 1998): yield, one at a
    time, the unit not yet chosen that maximises

        MMR(D_i) = lambda * Sim1(D_i, Q) - (1 - lambda) * max_{D_j in S} Sim2(D_i, D_j),

    where ``S`` holds the units already yielded (the second term is 0 while ``S``
    is empty, so the first unit is the most relevant); ties go to the earlier unit.

    Args:
        relevance: ``Sim1(D_i, Q)`` of each unit.
        similarity: ``Sim2``, the units' pairwise similarity matrix (non-negative).
        trade_off: ``lambda`` in [0, 1]: 1 ranks by relevance alone, 0 by novelty alone.
    """
    if not 0 <= trade_off <= 1:
        raise ValueError(f"the MMR lambda must lie in [0, 1], got {trade_off}")
    remaining = list(range(len(relevance)))
    redundancy = [0.0] * len(relevance)  # max similarity to a chosen unit
    while remaining:
        best = max(remaining, key=lambda i: (trade_off * relevance[i] - (1 - trade_off) * redundancy[i], -i))
        yield best
        remaining.remove(best)
        for i in remaining:
            redundancy[i] = max(redundancy[i], similarity[i][best])


def centroid_relevance(vectors: Sequence[Mapping[str, float]]) -> List[float]:
    """Each unit's cosine with the cluster centroid, given the units'
    :func:`mdsfair.lexrank.tfidf_vectors`: the centroid is the sum of those
    vectors, i.e. the cluster's term counts times idf (cosine ignores the scale,
    so the sum and the mean are the same query)."""
    centroid: Counter = Counter()
    for vector in vectors:
        centroid.update(vector)
    centroid_norm = vector_norm(centroid)
    return [cosine_similarity(vector, centroid, second_norm=centroid_norm) for vector in vectors]


def mmr(
    cluster: Mapping,
    num_sentences: int = DEFAULT_NUM_SENTENCES,
    max_words: Optional[int] = None,
    trade_off: float = MMR_LAMBDA,
    unit: str = "sentence",
) -> List[str]:
    """MMR baseline: units in :func:`mmr_order` up to ``num_sentences`` or a word
    budget (the unit that crosses it cut at the word).

    Carbonell & Goldstein rank against a user's query; a generic multi-document
    summary has none, so the query ``Q`` is the cluster centroid
    (:func:`centroid_relevance`). ``Sim1`` and ``Sim2`` are both the idf-modified
    cosine of :mod:`mdsfair.lexrank`. ``lambda`` is 0.5 by default, the value the
    Multi-News authors' ``mmr_summarizer.py`` passes (github.com/Alex-Fabbri/Multi-News,
    ``code/extractive_code/mmr``, which takes the cluster's 8 highest tf-idf words as
    its query instead of the centroid).

    Returns:
        The chosen units in document order.
    """
    units = _units_to_rank(cluster, unit, num_sentences, max_words)
    if not units:
        return []
    vectors = tfidf_vectors(units)
    order = mmr_order(centroid_relevance(vectors), cosine_matrix(vectors), trade_off)
    return _take_in_order(units, order, num_sentences, max_words)


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
