"""LexRank (Erkan & Radev 2004), the one implementation of mdsfair: the
extractive baseline of ``mdsfair-baseline`` (:func:`mdsfair.evaluation.baselines.lexrank`)
and the synthetic data's baseline gap check (:func:`mdsfair.preprocess.synthetic.lexrank_summary`).

Sentences are bags of :func:`mdsfair.text.words`; similarity is the
idf-modified cosine (:func:`tfidf_cosine_matrix`, Erkan & Radev Eq. 3);
centrality is PageRank over the similarity graph (:func:`lexrank_scores`:
edges above a threshold, weighted by similarity for continuous LexRank).

Pure Python (networkx is imported when scores are computed).
"""

import math
from collections import Counter
from typing import List, Optional, Sequence

from mdsfair.text import words


def tfidf_cosine_matrix(sentences: Sequence[str]) -> List[List[float]]:
    """Pairwise idf-modified cosine similarity of the sentences (Erkan & Radev).

    Term frequency is the raw count in the sentence; idf treats each sentence
    of the cluster as a document, smoothed so that it stays positive:
    ``idf(w) = ln((1 + N) / (1 + df(w))) + 1``.
    """
    bags = [Counter(words(sentence)) for sentence in sentences]
    document_frequency = Counter(word for bag in bags for word in bag)
    count = len(sentences)
    idf = {word: math.log((1 + count) / (1 + df)) + 1 for word, df in document_frequency.items()}
    vectors = [{word: tf * idf[word] for word, tf in bag.items()} for bag in bags]
    norms = [math.sqrt(sum(value * value for value in vector.values())) for vector in vectors]
    matrix = [[0.0] * count for _ in range(count)]
    for i in range(count):
        matrix[i][i] = 1.0 if norms[i] > 0 else 0.0
        for j in range(i + 1, count):
            if norms[i] == 0 or norms[j] == 0:
                continue
            small, large = (vectors[i], vectors[j]) if len(vectors[i]) <= len(vectors[j]) else (vectors[j], vectors[i])
            dot = sum(value * large[word] for word, value in small.items() if word in large)
            matrix[i][j] = matrix[j][i] = dot / (norms[i] * norms[j])
    return matrix


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
