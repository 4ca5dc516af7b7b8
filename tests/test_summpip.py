"""Tests of SummPip (mdsfair.evaluation.summpip) and its multi-sentence
compressor (mdsfair.evaluation.word_graph_compression)."""

import dataclasses
import json

import numpy as np
import pytest

from mdsfair.evaluation.baselines import cli_main
from mdsfair.evaluation.summpip import (
    DEFAULTS,
    DISCOURSE_MARKERS,
    LIGHT_VERBS,
    SPACY_MODEL,
    SummPipResourceError,
    cluster_graph,
    load_word_vectors,
    load_wordnet,
    sentence_graph,
)
from mdsfair.evaluation.word_graph_compression import (
    TAKAHE_STOPWORDS,
    KeyphraseReranker,
    WordGraph,
    compress_sentences,
)


def tagged(text):
    """``word/TAG word/TAG ...`` as (word, tag) pairs."""
    return [tuple(item.rsplit("/", 1)) for item in text.split()]


# The example of takahe's documentation: Filippova (2010)'s Figure 1 sentences.
CLINTON = [
    tagged(
        "The/DT wife/NN of/IN a/DT former/JJ U.S./NNP president/NN Bill/NNP Clinton/NNP Hillary/NNP Clinton/NNP "
        "visited/VBD China/NNP last/JJ Monday/NNP ./PUNCT"
    ),
    tagged(
        "Hillary/NNP Clinton/NNP wanted/VBD to/stop visit/VB China/NNP last/JJ week/NN but/CC postponed/VBD "
        "her/PRP$ plans/NNS till/IN Monday/NNP last/JJ week/NN ./PUNCT"
    ),
    tagged(
        "Hillary/NNP Clinton/NNP paid/VBD a/DT visit/NN to/TO the/DT People/NNP Republic/NNP of/IN China/NNP "
        "on/IN Monday/NNP ./PUNCT"
    ),
    tagged(
        "Last/JJ week/NN the/DT Secretary/NNP of/IN State/NNP Ms./NNP Clinton/NNP visited/VBD Chinese/JJ "
        "officials/NNS ./PUNCT"
    ),
]


def words(path):
    return " ".join(word for word, _ in path)


def test_word_graph_weights_and_punctuation_mapping_by_hand():
    # "john runs fast ." and "john runs .": john, runs and the start/end nodes
    # are shared (freq 2); the second "." has left context "runs" where the
    # first one's is "fast", an overlap of 1 (its right context), not above 1,
    # so it gets a node of its own. Filippova's w'' = (f_i + f_j) / sum_s 1/diff / (f_i f_j):
    #   start-john, john-runs: 4 / 2 / 4 = 0.5;  runs-fast: 3 / 1 / 2 = 1.5;
    #   fast-.(0): 2 / 1 / 1 = 2;  .(0)-end: 3 / 1 / 2 = 1.5;  runs-.(1): 1.5;  .(1)-end: 1.5.
    graph = WordGraph([tagged("John/NNP runs/VBZ fast/RB ./."), tagged("John/NNP runs/VBZ ./.")], min_words=2)
    assert len(graph.occurrences[("john", "NNP", 0)]) == 2
    assert (".", ".", 1) in graph.occurrences
    assert graph.successors[("runs", "VBZ", 0)][("fast", "RB", 0)] == pytest.approx(1.5, rel=1e-12)
    assert graph.successors[("fast", "RB", 0)][(".", ".", 0)] == pytest.approx(2.0, rel=1e-12)
    paths = graph.best_paths(5)
    assert [(round(weight, 12), words(path)) for weight, path in paths] == [
        (4.0, "john runs ."),
        (6.0, "john runs fast ."),
    ]


def test_word_graph_constraints_verb_and_length():
    sentences = [tagged("John/NNP runs/VBZ fast/RB ./."), tagged("John/NNP runs/VBZ ./.")]
    assert [words(path) for _, path in WordGraph(sentences, min_words=3).best_paths(5)] == ["john runs fast ."]
    no_verb = [tagged("John/NNP running/VBG fast/RB ./.")]  # VBG is not one of takahe's verb tags
    assert WordGraph(no_verb, min_words=1).best_paths(5) == []
    assert compress_sentences(no_verb, min_words=1) is None


def test_filippova_example_candidates_and_keyphrase_reranking():
    # takahe 0.4 (the copy in the SummPip authors' repository) gives these
    # candidates, weights and reranked scores on this input (checked when
    # this module was written, by running it beside this implementation).
    graph = WordGraph(CLINTON, min_words=5)
    candidates = graph.best_paths(3)
    assert [words(path) for _, path in candidates] == [
        "hillary clinton visited china last monday .",
        "hillary clinton visited china on monday .",
        "hillary clinton visited chinese officials .",
    ]
    reranked = KeyphraseReranker(CLINTON).rerank(candidates)
    assert [round(score, 6) for score, _ in reranked] == [0.104601, 0.163178, 0.317354]
    best = compress_sentences(CLINTON, min_words=5)
    assert best.text == "hillary clinton visited china last monday ."
    assert best.score == pytest.approx(0.104601, abs=1e-6)


def test_keyphrases_keep_the_best_of_overlapping_phrases():
    reranker = KeyphraseReranker(CLINTON)
    # "hillary clinton" is inside the longer "bill clinton hillary clinton" run, so only one of them stays
    assert not {"hillary clinton", "bill clinton hillary clinton"} <= set(reranker.keyphrase_scores)
    assert all(score > 0 for score in reranker.keyphrase_scores.values())
    assert len(TAKAHE_STOPWORDS) == 119


def test_the_authors_word_lists():
    # sentence_graph.py of github.com/mingzi151/SummPip: 16 light verbs, 39 markers ("stil" read as "still")
    assert len(LIGHT_VERBS) == 16 and {"be", "have", "get", "gotten"} <= LIGHT_VERBS
    assert len(DISCOURSE_MARKERS) == 39 and {"however", "moreover", "still", "simultaneously"} <= DISCOURSE_MARKERS
    assert (DEFAULTS.clusters, DEFAULTS.min_words, DEFAULTS.similarity_threshold, DEFAULTS.seed) == (9, 5, 0.98, 88)


@pytest.fixture(scope="module")
def wordnet():
    try:
        return load_wordnet()
    except SummPipResourceError as error:
        pytest.skip(f"WordNet's database is not installed here: {error}")


@pytest.fixture(scope="module")
def nlp():
    from mdsfair.preprocess.spacy_pipeline import load_spacy_pipeline

    return load_spacy_pipeline(SPACY_MODEL)


def test_wordnet_derived_forms_as_nltk(wordnet):
    assert wordnet.base_form("acquired") == "acquire"
    assert "acquisition" in wordnet.derived_forms("acquired")
    assert wordnet.base_form("went") == "go"  # verb.exc
    assert set(wordnet.derived_forms("announced")) == {"annunciatory", "announcer", "announcement"}
    assert wordnet.derived_forms("Said") == ()  # morphy does not lower-case, nor did the authors


SENTENCES = [
    "The company acquired a startup in London on Monday.",
    "The acquisition cost 40 million dollars.",
    "However, analysts doubted the deal.",
    "Apple bought the London startup this week.",
    "The purchase was announced by Apple on Monday.",
    "Shares of Apple rose after the announcement.",
    "Analysts said the deal was expensive.",
    "The startup makes software for banks.",
    "Its founders will join Apple in London.",
]


def write_vectors(path, vectors):
    path.write_text("".join(f"{word} {' '.join(f'{x:.6f}' for x in row)}\n" for word, row in vectors.items()))
    return str(path)


def edges(adjacency):
    assert np.array_equal(adjacency, adjacency.T)
    return sorted((int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(adjacency))))


def test_sentence_graph_edges_on_a_tiny_cluster(tmp_path, wordnet, nlp):
    rng = np.random.default_rng(0)
    vocabulary = {word.strip(".,").lower() for sentence in SENTENCES for word in sentence.split()}
    vectors = {word: rng.normal(size=8) for word in sorted(vocabulary | {"buyer", "buying", "buy"})}
    path = write_vectors(tmp_path / "vectors.txt", vectors)
    no_similarity = dataclasses.replace(DEFAULTS, similarity_threshold=1.0)
    adjacency = sentence_graph(SENTENCES, nlp, wordnet, load_word_vectors(path), load_word_vectors(path), no_similarity)
    assert edges(adjacency) == [
        (0, 1),  # deverbal noun: acquired -> acquisition (WordNet)
        (0, 3),  # entity London, GPE (not consecutive)
        (0, 4),  # entity Monday, DATE
        (0, 8),  # London
        (1, 2),  # discourse marker "However"
        (3, 5),  # Apple, ORG
        (3, 8),  # Apple, London
        (4, 5),  # deverbal noun: announced -> announcement
        (4, 8),  # Apple
        (5, 8),  # Apple
    ]  # 3 and 4 share Apple but are consecutive: only the deverbal and marker tests apply there

    # "bought" -> buy, buyer, buying (WordNet); "purchase" within cosine 0.65 of "buyer" links 3 and 4
    vectors["purchase"] = vectors["buyer"] + 0.01
    near = write_vectors(tmp_path / "near.txt", vectors)
    adjacency = sentence_graph(SENTENCES, nlp, wordnet, load_word_vectors(path), load_word_vectors(near), no_similarity)
    assert (3, 4) in edges(adjacency)

    # similarity: sentences 2 and 6 get the same mean vector when every word has one vector
    same = write_vectors(tmp_path / "same.txt", {word: np.ones(8) for word in vocabulary})
    adjacency = sentence_graph(SENTENCES, nlp, wordnet, load_word_vectors(same), load_word_vectors(path), DEFAULTS)
    assert len(edges(adjacency)) == len(SENTENCES) * (len(SENTENCES) - 1) // 2


def two_communities():
    adjacency = np.zeros((8, 8))
    for group in (range(0, 4), range(4, 8)):
        for i in group:
            for j in group:
                if i != j:
                    adjacency[i, j] = 1.0
    adjacency[3, 4] = adjacency[4, 3] = 1.0  # one bridge
    return adjacency


@pytest.mark.parametrize("affinity", ["graph", "rbf-rows"])
def test_spectral_clustering_is_seeded_and_finds_the_communities(affinity):
    labels = cluster_graph(two_communities(), clusters=2, seed=88, affinity=affinity)
    assert labels == cluster_graph(two_communities(), clusters=2, seed=88, affinity=affinity)
    assert len(set(labels[:4])) == 1 and len(set(labels[4:])) == 1 and labels[0] != labels[4]
    with pytest.raises(ValueError, match="affinity"):
        cluster_graph(two_communities(), clusters=2, seed=88, affinity="cosine")


def write_split(path):
    clusters = [
        {
            "id": "deal",
            "documents": [" ".join(SENTENCES[:3]), " ".join(SENTENCES[3:6]), " ".join(SENTENCES[6:])],
            "summary": "Apple acquired a London startup for 40 million dollars on Monday.",
        },
        {"id": "short", "documents": ["Apple bought a startup.", "The startup is in London."], "summary": "A deal."},
    ]
    path.write_text("".join(json.dumps(cluster) + "\n" for cluster in clusters))
    return str(path)


def test_mdsfair_baseline_summpip_end_to_end(tmp_path, wordnet, capsys):
    split = write_split(tmp_path / "test.jsonl")
    rng = np.random.default_rng(1)
    vocabulary = {word.strip(".,").lower() for sentence in SENTENCES for word in sentence.split()}
    vectors = write_vectors(tmp_path / "vectors.txt", {word: rng.normal(size=8) for word in sorted(vocabulary)})
    command = [split, "--method", "summpip", "--summpip-word-vectors", vectors, "--summpip-clusters", "3"]
    assert cli_main(command + ["-o", str(tmp_path / "a.txt")]) == 0
    assert cli_main(command + ["-o", str(tmp_path / "b.txt")]) == 0
    first = (tmp_path / "a.txt").read_text().splitlines()
    assert first == (tmp_path / "b.txt").read_text().splitlines()  # seeded
    assert len(first) == 2
    # a cluster with no more sentences than clusters is its own summary
    assert first[1] == "Apple bought a startup. The startup is in London."
    # three compressions of the nine sentences, lower-cased tokens, each ending with its "."
    assert first[0] == first[0].lower() and first[0].endswith(" .") and first[0].count(" .") == 3
    assert "3 compressed sentences of at least 5 words" in capsys.readouterr().err


def test_mdsfair_baseline_summpip_argument_errors(tmp_path, capsys):
    split = write_split(tmp_path / "test.jsonl")
    with pytest.raises(SystemExit):
        cli_main([split, "-o", str(tmp_path / "out.txt"), "--method", "summpip"])
    assert "--method summpip needs --summpip-word-vectors FILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(
            [split, "-o", str(tmp_path / "out.txt"), "--method", "summpip", "--summpip-word-vectors", split]
            + ["--budget-preset", "multinews"]
        )
    assert "--budget-preset does not apply to summpip" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("apple 0.1 0.2\nstartup 0.3\n")
    with pytest.raises(SystemExit):
        cli_main([split, "-o", str(tmp_path / "out.txt"), "--method", "summpip", "--summpip-word-vectors", str(bad)])
    assert f"{bad}, line 2: 1 numbers where line 1 has 2" in capsys.readouterr().err
