"""LexRank (Erkan & Radev 2004), the one implementation of mdsfair: the
extractive baseline of ``mdsfair-baseline`` (:func:`mdsfair.evaluation.baselines.lexrank`)
and the synthetic data's baseline gap check (:func:`mdsfair.preprocess.synthetic_report.lexrank_summary`).

Sentences are bags of :func:`mdsfair.text.words`; similarity is the
idf-modified cosine (:func:`tfidf_cosine_matrix`, Erkan & Radev Eq. 3, of the
:func:`tfidf_vectors`; the MMR baseline's similarities are the same cosine);
centrality is PageRank over the similarity graph (:func:`lexrank_scores`:
edges above a threshold, weighted by similarity for continuous LexRank).

Pure Python (networkx is imported when scores are computed).
"""

import math
from collections import Counter
from typing import Dict, List, Mapping, Optional, Sequence

from mdsfair.text import words


def tfidf_vectors(sentences: Sequence[str]) -> List[Dict[str, float]]:
    """Each sentence's tf-idf vector over :func:`mdsfair.text.words` (Erkan & Radev).

    Term frequency is the raw count in the sentence; idf treats each sentence
    of the cluster as a document, smoothed so that it stays positive:
    ``idf(w) = ln((1 + N) / (1 + df(w))) + 1``.
    """
    bags = [Counter(words(sentence)) for sentence in sentences]
    document_frequency = Counter(word for bag in bags for word in bag)
    count = len(sentences)
    idf = {word: math.log((1 + count) / (1 + df)) + 1 for word, df in document_frequency.items()}
    return [{word: tf * idf[word] for word, tf in bag.items()} for bag in bags]


def vector_norm(vector: Mapping[str, float]) -> float:
    """Euclidean norm of a sparse vector."""
    return math.sqrt(sum(value * value for value in vector.values()))


def cosine_similarity(
    first: Mapping[str, float],
    second: Mapping[str, float],
    first_norm: Optional[float] = None,
    second_norm: Optional[float] = None,
) -> float:
    """Cosine of two sparse vectors (0 when either is zero); their norms may be
    passed when already computed."""
    first_norm = vector_norm(first) if first_norm is None else first_norm
    second_norm = vector_norm(second) if second_norm is None else second_norm
    if first_norm == 0 or second_norm == 0:
        return 0.0
    small, large = (first, second) if len(first) <= len(second) else (second, first)
    dot = sum(value * large[word] for word, value in small.items() if word in large)
    return dot / (first_norm * second_norm)


def cosine_matrix(vectors: Sequence[Mapping[str, float]]) -> List[List[float]]:
    """Pairwise :func:`cosine_similarity` of the vectors (1 on the diagonal, 0
    for a zero vector)."""
    norms = [vector_norm(vector) for vector in vectors]
    count = len(vectors)
    matrix = [[0.0] * count for _ in range(count)]
    for i in range(count):
        matrix[i][i] = 1.0 if norms[i] > 0 else 0.0
        for j in range(i + 1, count):
            matrix[i][j] = matrix[j][i] = cosine_similarity(vectors[i], vectors[j], norms[i], norms[j])
    return matrix


def tfidf_cosine_matrix(sentences: Sequence[str]) -> List[List[float]]:
    """Pairwise idf-modified cosine similarity of the sentences (Erkan & Radev
    Eq. 3): the :func:`cosine_matrix` of their :func:`tfidf_vectors`."""
    return cosine_matrix(tfidf_vectors(sentences))


def lexrank_scores(
    sentences: Sequence[str],
    threshold: float = 0.1,
    damping: float = 0.85,
    weighted: bool = False,
    similarity: Optional[List[List[float]]] = None,
) -> List[float]:
    """LexRank centrality of each sentence.

    Args:
        sentences: the cluster's sentences.
        threshold: keep an edge when the cosine similarity is above this.
        damping: PageRank damping factor (networkx ``alpha``).
        weighted: weight edges by their similarity (continuous LexRank)
            instead of 1 (LexRank with threshold).
        similarity: the :func:`tfidf_cosine_matrix` of ``sentences`` if
            already computed.
    """
    import networkx as nx

    if similarity is None:
        similarity = tfidf_cosine_matrix(sentences)
    graph = nx.Graph()
    graph.add_nodes_from(range(len(sentences)))
    for i in range(len(sentences)):
        for j in range(i + 1, len(sentences)):
            if similarity[i][j] > threshold:
                graph.add_edge(i, j, weight=similarity[i][j])
    ranks = nx.pagerank(graph, alpha=damping, weight="weight" if weighted else None)
    return [ranks[i] for i in range(len(sentences))]
