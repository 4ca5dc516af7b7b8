"""Paragraph graphs for graph-informed attention (Liu & Lapata 2019,
Appendix A): Eq. 25 similarity, Eq. 26 discourse, networkx/GraphML output,
and the side data the task serves (sliced by --max-paragraphs)."""

import math
import os
from argparse import Namespace

import networkx as nx
import numpy as np
import pytest
from fairseq import options, tasks

from mdsfair.preprocess.producers.paragraph_graphs import (
    DISCOURSE_MARKERS,
    DiscourseGraphProducer,
    EntityExtractor,
    SimilarityGraphProducer,
    discourse_matrix,
    starts_with_discourse_marker,
    tfidf_similarity_matrix,
    write_graph,
)
from mdsfair.preprocess.structure import ClusterStructure, SentenceSplitter, read_clusters
from tests.utils import USER_DIR, make_tiny_data_bin


def test_similarity_graph_follows_eq_25_and_threshold():
    paragraphs = ["apple apple banana", "apple cherry", "durian elder fig", "banana apple"]
    graph = tfidf_similarity_matrix(paragraphs)
    # Eq. 25 by hand: v_ik = N_w(t) log(N_d / N_dw(t)), N_d = 4.
    idf = {
        "apple": math.log(4 / 3),
        "banana": math.log(4 / 2),
        "cherry": math.log(4),
        "durian": math.log(4),
        "elder": math.log(4),
        "fig": math.log(4),
    }
    vocabulary = sorted(idf)

    def vector(counts):
        return np.array([counts.get(w, 0) * idf[w] for w in vocabulary])

    vectors = [
        vector({"apple": 2, "banana": 1}),
        vector({"apple": 1, "cherry": 1}),
        vector({"durian": 1, "elder": 1, "fig": 1}),
        vector({"banana": 1, "apple": 1}),
    ]
    for i in range(4):
        for j in range(4):
            cosine = vectors[i] @ vectors[j] / (np.linalg.norm(vectors[i]) * np.linalg.norm(vectors[j]))
            expected = 0.0 if i == j or cosine < 0.2 else cosine
            assert graph[i, j] == pytest.approx(expected)
    assert graph[0, 3] > 0.2 and graph[0, 1] == 0.0  # 0-1 share only the common "apple": cosine < 0.2
    assert np.allclose(graph, graph.T)


def test_discourse_graph_follows_eq_26():
    assert len(DISCOURSE_MARKERS) == 36
    assert starts_with_discourse_marker("However, the council disagreed.")
    assert starts_with_discourse_marker("It was, as a result, closed.")
    assert not starts_with_discourse_marker("The councillor said no.")
    entities = [{"Felix Lund", "Venden"}, {"Venden"}, {"Felix Lund", "Venden", "Ostdo"}, set()]
    first_sentences = ["Felix Lund built Venden.", "Moreover, Venden is tall.", "Then Ostdo came.", "However, no."]
    documents = [0, 0, 1, 1]
    graph = discourse_matrix(entities, first_sentences, documents)
    expected = np.array(
        [
            [0.0, 0.2 * 1 + 1, 0.2 * 2, 0.0],
            [1.2, 0.0, 0.2 * 1, 0.0],  # 1 -> 2 has a marker but crosses documents: no m
            [0.4, 0.2, 0.0, 1.0],  # 2 -> 3: same document, "However" opens 3
            [0.0, 0.0, 1.0, 0.0],
        ]
    )
    np.testing.assert_allclose(graph, expected)


def test_entity_extractor_keeps_the_nine_types():
    entity_sets = EntityExtractor()(["Barack Obama visited Paris in 2010 with 300 people."])
    assert "Barack Obama" in entity_sets[0] and "Paris" in entity_sets[0]
    assert "2010" not in entity_sets[0] and "300" not in entity_sets[0]  # DATE, CARDINAL are not kept


def test_graphml_output_round_trips(tmp_path):
    matrix = np.array([[0.0, 0.5, 0.0], [0.5, 0.0, 1.2], [0.0, 1.2, 0.0]])
    path = tmp_path / "g.graphml"
    write_graph(matrix, str(path), ["a", "b", "c"])
    graph = nx.read_graphml(str(path), node_type=int)
    np.testing.assert_allclose(nx.to_numpy_array(graph, nodelist=[0, 1, 2]), matrix)
    assert graph.nodes[2]["text"] == "c"


@pytest.fixture(scope="module")
def similarity_data_bin(tmp_path_factory):
    return make_tiny_data_bin(
        str(tmp_path_factory.mktemp("graphs")),
        train=4,
        valid=2,
        test=2,
        vocab_size=250,
        extra_args=["--side-data", "graph_similarity"],
    )


def test_task_serves_the_producer_graph_sliced_by_max_paragraphs(similarity_data_bin, tmp_path):
    raw = os.path.join(os.path.dirname(similarity_data_bin), "raw", "train.jsonl")
    clusters = list(read_clusters(raw, SentenceSplitter("rule")))
    producer = SimilarityGraphProducer(Namespace(graph_dump_dir=str(tmp_path)))

    class Encoded:
        num_paragraphs = clusters[0].num_paragraphs

    expected = producer(clusters[0], Encoded()).reshape(Encoded.num_paragraphs, Encoded.num_paragraphs)
    assert (tmp_path / f"{clusters[0].id}.similarity.graphml").exists()
    for max_paragraphs in (None, 3):
        extra = [] if max_paragraphs is None else ["--max-paragraphs", str(max_paragraphs)]
        args = options.parse_args_and_arch(
            options.get_training_parser(),
            [
                similarity_data_bin,
                "--user-dir",
                USER_DIR,
                "--task",
                "multidoc_summarization",
                "--arch",
                "hiertransformer_tiny",
                "--max-source-positions",
                "4096",
                *extra,
            ],
        )
        task = tasks.setup_task(args)
        task.load_dataset("train")
        batch = task.datasets["train"].collater([task.datasets["train"][0], task.datasets["train"][1]])
        graph = batch["net_input"]["src_graph_similarity"]
        count = int(batch["net_input"]["src_para_ids"][0].max()) + 1
        assert count == (max_paragraphs or Encoded.num_paragraphs)
        np.testing.assert_allclose(graph[0, :count, :count].numpy(), expected[:count, :count], rtol=1e-6)


def test_producer_rejects_misaligned_paragraphs():
    cluster = ClusterStructure(id="c", documents=[[["One."], ["Two."]]], summary="x", summary_sentences=["x"])

    class Encoded:
        num_paragraphs = 3

    with pytest.raises(ValueError, match="paragraphs"):
        SimilarityGraphProducer(Namespace())(cluster, Encoded())
    assert DiscourseGraphProducer.spec.kind == "paragraph_matrix"
