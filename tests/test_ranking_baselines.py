"""TextRank, MMR and the paragraph-level ranking baselines of mdsfair-baseline:
TextRank's weights and scores by hand and against networkx's PageRank, MMR's
selection order by hand, paragraph units, budgets and the command line."""

import json
import math
import os
import random

import networkx as nx
import pytest

from mdsfair.evaluation.baselines import cli_main
from mdsfair.evaluation.extractive_baselines import (
    centroid_relevance,
    lexrank,
    mmr,
    mmr_order,
    text_units,
    textrank,
    textrank_scores,
    textrank_similarity,
    weighted_pagerank,
)
from mdsfair.lexrank import lexrank_scores, tfidf_vectors
from mdsfair.text import words
from tests.utils import SHARED_DATA

DAMPING = 0.85


def convergence_bound(count: int, tolerance: float, damping: float = DAMPING) -> float:
    """How far (L1, hence per score) power iteration stopped at ``tolerance`` may lie
    from the fixed point: N * tolerance * d / (1 - d) (see weighted_pagerank)."""
    return count * tolerance * damping / (1 - damping)


# Three four-word sentences: 1 and 2 share "storm" and "floods", 3 shares only "storm".
STORM = ["Storm floods coast towns.", "Storm floods river valleys.", "Storm damages power lines."]


def test_textrank_similarity_is_overlap_over_log_lengths():
    first, second, third = (words(sentence) for sentence in STORM)
    assert textrank_similarity(first, second) == pytest.approx(2 / (2 * math.log(4)), rel=1e-15)
    assert textrank_similarity(first, third) == pytest.approx(1 / (2 * math.log(4)), rel=1e-15)
    # Distinct shared words count once; lengths count every word.
    assert textrank_similarity(["a", "a", "b"], ["a", "c"]) == pytest.approx(1 / (math.log(3) + math.log(2)))
    # Two one-word sentences: the denominator log 1 + log 1 is 0, no edge.
    assert textrank_similarity(["a"], ["a"]) == 0.0
    assert textrank_similarity([], ["a", "b"]) == 0.0


def test_textrank_scores_of_a_hand_worked_graph():
    """Weights 2c (1-2) and c (1-3, 2-3). Vertex shares: 1 and 2 give 2/3 of their
    score to each other and 1/3 to vertex 3, which gives 1/2 to each. With
    WS1 = WS2 = x, WS3 = y: y = 0.15 + 0.85 * (2/3) x and, the scores summing to
    N = 3 (no vertex without edges), 2x + y = 3, so x = 171/154 and y = 60/77."""
    tolerance = 1e-12
    scores = textrank_scores(STORM, damping=DAMPING, tolerance=tolerance)
    bound = convergence_bound(3, tolerance)
    assert scores[0] == pytest.approx(171 / 154, abs=bound)
    assert scores[1] == pytest.approx(171 / 154, abs=bound)
    assert scores[2] == pytest.approx(60 / 77, abs=bound)
    # The default tolerance (1e-4) stays within its own bound.
    for score, exact in zip(textrank_scores(STORM), (171 / 154, 171 / 154, 60 / 77)):
        assert abs(score - exact) <= convergence_bound(3, 1e-4)


def test_a_vertex_without_edges_scores_one_minus_d():
    scores = textrank_scores(STORM + ["Cats sleep."])
    assert scores[3] == pytest.approx(1 - DAMPING, rel=1e-15)
    assert sorted(range(4), key=lambda i: -scores[i])[-1] == 3


def _networkx_textrank(weights, tolerance):
    graph = nx.Graph()
    graph.add_nodes_from(range(len(weights)))
    for i in range(len(weights)):
        for j in range(i + 1, len(weights)):
            if weights[i][j] > 0:
                graph.add_edge(i, j, weight=weights[i][j])
    ranks = nx.pagerank(graph, alpha=DAMPING, weight="weight", tol=tolerance, max_iter=100_000)
    # networkx's scores sum to 1; TextRank's (1 - d) + d * ... form sums to N.
    return [len(weights) * ranks[i] for i in range(len(weights))]


def _sentence_weights(sentences):
    tokens = [words(sentence) for sentence in sentences]
    return [[textrank_similarity(a, b) if i != j else 0.0 for j, b in enumerate(tokens)] for i, a in enumerate(tokens)]


NEWS = [
    "The earthquake struck the city at night.",
    "Local bakeries sold bread to the city.",
    "The football club signed a new striker.",
    "The earthquake damaged buildings, roads and bridges across the city.",
    "Many buildings collapsed.",
    "Roads and bridges were closed.",
    "A new museum exhibition opened on Friday.",
    "The city asked for help after the night of the earthquake.",
]


def test_textrank_follows_mihalcea_and_tarau_2004():
    """The settings of Mihalcea & Tarau (2004), which docs/evaluation.md states.

    * Sec. 4.1, sentence similarity: the number of words in both sentences over
      ``log(|S_i|) + log(|S_j|)``, a hand case below;
    * Sec. 2, the damping factor ``d`` "usually set to 0.85": the default of every
      function and of ``mdsfair-baseline --damping``;
    * Sec. 2, convergence: "the computation iterates until convergence below a given
      threshold is achieved", "when the error rate for any vertex in the graph falls
      below a given threshold", 0.0001 in their experiments: the default tolerance,
      and the power iteration stops at the first iteration where no score moves by
      0.0001 (checked against the iterates computed here by hand)."""
    import inspect

    from mdsfair.evaluation.baselines import build_parser
    from mdsfair.evaluation.extractive_baselines import TEXTRANK_TOLERANCE

    # "the cat sat on the mat" (6 words) and "the dog sat" (3): {the, sat} in both.
    first, second = "the cat sat on the mat".split(), "the dog sat".split()
    assert textrank_similarity(first, second) == pytest.approx(2 / (math.log(6) + math.log(3)), rel=1e-15)
    assert TEXTRANK_TOLERANCE == 0.0001
    for function in (textrank, textrank_scores, weighted_pagerank):
        parameters = inspect.signature(function).parameters
        assert parameters["damping"].default == 0.85
        assert parameters["tolerance"].default == 0.0001
    args = build_parser().parse_args(["--method", "textrank", "in.jsonl", "-o", "out.txt"])
    assert (args.damping, args.textrank_tolerance) == (0.85, 0.0001)

    weights = _sentence_weights(NEWS)
    count = len(weights)
    out_weight = [sum(weights[j][k] for k in range(count) if k != j) for j in range(count)]

    def iterate(previous):
        return [
            0.15 + 0.85 * sum(weights[j][i] / out_weight[j] * previous[j] for j in range(count) if weights[j][i] > 0)
            for i in range(count)
        ]

    iterates = [[1.0] * count]
    while len(iterates) < 2 or max(abs(new - old) for new, old in zip(iterates[-1], iterates[-2])) >= 0.0001:
        iterates.append(iterate(iterates[-1]))
    assert len(iterates) > 3  # several iterations
    got = weighted_pagerank(weights)
    assert got == pytest.approx(iterates[-1], abs=1e-12)
    # One iteration earlier or later would differ by far more than 1e-12.
    for other in (iterates[-2], iterate(iterates[-1])):
        assert max(abs(a - b) for a, b in zip(got, other)) > 1e-9


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_textrank_scores_equal_networkx_pagerank(seed):
    """On a graph where every vertex has an edge, TextRank's fixed point is N
    times networkx's pagerank on the same weighted graph."""
    tolerance = 1e-13
    if seed is None:
        sentences = NEWS
        weights = _sentence_weights(sentences)
        scores = textrank_scores(sentences, damping=DAMPING, tolerance=tolerance)
    else:
        generator = random.Random(seed)
        count = 12
        weights = [[0.0] * count for _ in range(count)]
        for i in range(count):
            for j in range(i + 1, count):
                if generator.random() < 0.4 or j == i + 1:  # a path keeps every vertex connected
                    weights[i][j] = weights[j][i] = generator.uniform(0.05, 2.0)
        scores = weighted_pagerank(weights, damping=DAMPING, tolerance=tolerance)
    assert all(any(row) for row in weights)
    reference = _networkx_textrank(weights, tolerance)
    # Both iterations stop within N * tol * d / (1 - d) of the fixed point
    # (networkx's in its normalised scale, times N here).
    bound = convergence_bound(len(weights), tolerance) * (1 + len(weights))
    for ours, theirs in zip(scores, reference):
        assert ours == pytest.approx(theirs, abs=bound)
    assert sum(scores) == pytest.approx(len(weights), abs=bound)


def test_textrank_selects_by_score_and_returns_document_order():
    cluster = {"id": "quake", "documents": [" ".join(NEWS[:3]), " ".join(NEWS[3:5]), " ".join(NEWS[5:])]}
    scores = textrank_scores(NEWS)
    ranked = sorted(range(len(NEWS)), key=lambda i: (-scores[i], i))
    assert textrank(cluster, num_sentences=1) == [NEWS[ranked[0]]]
    assert textrank(cluster, num_sentences=3) == [NEWS[i] for i in sorted(ranked[:3])]
    # A word budget: whole sentences by rank, the one crossing the budget cut at the word.
    first_length = len(NEWS[ranked[0]].split())
    budgeted = textrank(cluster, max_words=first_length + 2)
    assert sum(len(sentence.split()) for sentence in budgeted) == first_length + 2
    assert NEWS[ranked[0]] in budgeted and " ".join(NEWS[ranked[1]].split()[:2]) in budgeted
    for budget in (1, 7, 20, 200):
        total = sum(len(sentence.split()) for sentence in NEWS)
        assert sum(len(s.split()) for s in textrank(cluster, max_words=budget)) == min(budget, total)
    with pytest.raises(ValueError, match="must be at least 1"):
        textrank(cluster, num_sentences=0)


def test_textrank_tolerance_below_rounding_is_an_error():
    with pytest.raises(ValueError, match="did not reach the tolerance"):
        textrank_scores(NEWS, tolerance=1e-300)


# ---------------------------------------------------------------------------
# MMR


def test_mmr_order_of_a_hand_worked_example():
    """relevance 0.9, 0.8, 0.5, 0.3; unit 1 nearly repeats unit 0 (0.9).
    lambda 0.5: unit 0 first (0.45); then 1: 0.40 - 0.45 = -0.05, 2: 0.25 - 0.05 = 0.20,
    3: 0.15 - 0 = 0.15, so 2; then 1: -0.05, 3: 0.15 - 0.025 = 0.125, so 3; then 1."""
    relevance = [0.9, 0.8, 0.5, 0.3]
    similarity = [
        [1.0, 0.9, 0.1, 0.0],
        [0.9, 1.0, 0.2, 0.1],
        [0.1, 0.2, 1.0, 0.05],
        [0.0, 0.1, 0.05, 1.0],
    ]
    assert list(mmr_order(relevance, similarity, 0.5)) == [0, 2, 3, 1]
    # lambda 1: relevance alone.
    assert list(mmr_order(relevance, similarity, 1.0)) == [0, 1, 2, 3]
    # lambda 0: novelty alone; the first pick is a tie at 0, which goes to the earlier unit.
    assert list(mmr_order(relevance, similarity, 0.0)) == [0, 3, 2, 1]
    with pytest.raises(ValueError, match="lambda"):
        list(mmr_order(relevance, similarity, 1.5))


def test_mmr_query_is_the_cluster_centroid():
    """Sentences "a b", "a b", "c" (N = 3): idf(a) = idf(b) = ln(4/3) + 1 = p and
    idf(c) = ln(2) + 1 = q; the centroid is (a: 2p, b: 2p, c: q), so
    cos("a b", centroid) = 4p^2 / (sqrt(2) p * sqrt(8p^2 + q^2)) and
    cos("c", centroid) = q / sqrt(8p^2 + q^2)."""
    sentences = ["Storm hits.", "Storm hits.", "Cats."]
    p, q = math.log(4 / 3) + 1, math.log(2) + 1
    norm = math.sqrt(8 * p * p + q * q)
    relevance = centroid_relevance(tfidf_vectors(sentences))
    assert relevance == pytest.approx([4 * p / (math.sqrt(2) * norm)] * 2 + [q / norm], rel=1e-14)
    cluster = {"id": "dup", "documents": ["Storm hits.", "Storm hits.", "Cats."]}
    # lambda 0.5: the repeat scores 0.5 * 0.907 - 0.5 * 1 < 0 against 0.5 * 0.422 for "Cats.".
    assert mmr(cluster, num_sentences=2) == ["Storm hits.", "Cats."]
    assert mmr(cluster, num_sentences=2, trade_off=1.0) == ["Storm hits.", "Storm hits."]
    assert mmr(cluster, max_words=3) == ["Storm hits.", "Cats."]
    assert mmr(cluster, max_words=1) == ["Storm"]


def test_mmr_word_budget_is_exact():
    cluster = {"id": "quake", "documents": [" ".join(NEWS[:4]), " ".join(NEWS[4:])]}
    total = sum(len(sentence.split()) for sentence in NEWS)
    for budget in (1, 5, 12, 30, total, total + 5):
        assert sum(len(s.split()) for s in mmr(cluster, max_words=budget)) == min(budget, total), budget
    chosen = mmr(cluster, num_sentences=3)
    assert len(chosen) == 3 and chosen == sorted(chosen, key=NEWS.index)


# ---------------------------------------------------------------------------
# Paragraph units

PARAGRAPHS = {
    "id": "wiki",
    "documents": [
        "The storm reached the coast on Monday. Winds hit 150 km/h.\n\nThe storm flooded the coast road.",
        "A local bakery opened.\n\nThe coast road stayed closed after the storm.",
    ],
    "summary": "The storm flooded the coast road, which stayed closed.",
}


def test_paragraph_units_are_whole_paragraphs():
    assert text_units(PARAGRAPHS, "paragraph") == [
        "The storm reached the coast on Monday. Winds hit 150 km/h.",
        "The storm flooded the coast road.",
        "A local bakery opened.",
        "The coast road stayed closed after the storm.",
    ]
    assert len(text_units(PARAGRAPHS)) == 5
    with pytest.raises(ValueError, match="unit must be one of"):
        text_units(PARAGRAPHS, "word")
    for method in (lexrank, textrank, mmr):
        chosen = method(PARAGRAPHS, num_sentences=2, unit="paragraph")
        assert len(chosen) == 2 and all(text in text_units(PARAGRAPHS, "paragraph") for text in chosen)
        assert "A local bakery opened." not in chosen
        assert sum(len(s.split()) for s in method(PARAGRAPHS, max_words=9, unit="paragraph")) == 9
    # Liu & Lapata's WikiSum LexRank: paragraphs, edges weighted by tf-idf cosine, no threshold.
    assert lexrank(PARAGRAPHS, num_sentences=1, unit="paragraph", weighted=True, threshold=0.0) == [
        "The storm flooded the coast road."
    ]


def test_paragraph_lexrank_scores_of_a_hand_worked_graph():
    """Paragraphs 1 and 2 share "storm", paragraph 3 shares nothing: one edge, one
    vertex without edges. networkx's PageRank (alpha 0.85) spreads a dangling vertex's
    score evenly: y = 0.05 + 0.85 y / 3, so y = 3/43, and x = (1 - y) / 2 = 20/43."""
    cluster = {"id": "p", "documents": ["Storm hit. Rain fell.\n\nStorm passed. Sun rose.", "Cats sleep. Dogs bark."]}
    paragraphs = text_units(cluster, "paragraph")
    assert paragraphs == ["Storm hit. Rain fell.", "Storm passed. Sun rose.", "Cats sleep. Dogs bark."]
    # networkx's default tolerance 1e-6 leaves its scores within N * tol * d / (1 - d).
    bound = convergence_bound(3, 1e-6)
    for weighted in (False, True):
        scores = lexrank_scores(paragraphs, threshold=0.0, weighted=weighted)
        assert scores == pytest.approx([20 / 43, 20 / 43, 3 / 43], abs=bound)
    assert lexrank(cluster, num_sentences=1, unit="paragraph", weighted=True, threshold=0.0) == [paragraphs[0]]


# ---------------------------------------------------------------------------
# The command line


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def test_cli_runs_textrank_and_mmr(tmp_path, capsys):
    cluster = {"id": "quake", "documents": [" ".join(NEWS[:4]), " ".join(NEWS[4:])], "summary": NEWS[3]}
    source = _write_jsonl(tmp_path / "clusters.jsonl", [cluster, PARAGRAPHS])
    for method, function in (("textrank", textrank), ("mmr", mmr)):
        output = tmp_path / f"{method}.txt"
        assert cli_main(["--method", method, source, "-o", str(output), "--num-sentences", "2"]) == 0
        assert output.read_text().splitlines() == [
            " ".join(function(c, num_sentences=2)) for c in (cluster, PARAGRAPHS)
        ]
        assert f"wrote 2 {method} summaries (2 sentences)" in capsys.readouterr().err
        output = tmp_path / f"{method}_paragraphs.txt"
        flags = ["--unit", "paragraph", "--num-sentences", "1"]
        assert cli_main(["--method", method, source, "-o", str(output)] + flags) == 0
        assert output.read_text().splitlines()[1] == " ".join(function(PARAGRAPHS, num_sentences=1, unit="paragraph"))
        assert "(1 paragraphs)" in capsys.readouterr().err
        output = tmp_path / f"{method}_oracle_length.txt"
        assert cli_main(["--method", method, source, "-o", str(output), "--budget-from-reference"]) == 0
        assert [len(line.split()) for line in output.read_text().splitlines()] == [
            len(NEWS[3].split()),
            len(PARAGRAPHS["summary"].split()),
        ]
        assert "ORACLE LENGTH" in capsys.readouterr().err
    output = tmp_path / "mmr_relevance.txt"
    assert cli_main(["--method", "mmr", source, "-o", str(output), "--mmr-lambda", "1", "--max-words", "12"]) == 0
    assert output.read_text().splitlines()[0] == " ".join(mmr(cluster, max_words=12, trade_off=1.0))
    output = tmp_path / "lexrank_paragraphs.txt"
    flags = ["--unit", "paragraph", "--weighted", "--threshold", "0", "--budget-from-reference"]
    assert cli_main(["--method", "lexrank", source, "-o", str(output)] + flags) == 0
    assert output.read_text().splitlines()[1] == " ".join(
        lexrank(PARAGRAPHS, max_words=9, unit="paragraph", weighted=True, threshold=0.0)
    )


@pytest.mark.parametrize(
    "flags",
    [
        ["--method", "textrank", "--budget-preset", "wcep", "--max-words", "5"],
        ["--method", "mmr", "--budget-from-reference", "--num-sentences", "2"],
        ["--method", "mmr", "--mmr-lambda", "1.5"],
        ["--method", "textrank", "--textrank-tolerance", "0"],
        ["--method", "textrank", "--unit", "word"],
    ],
)
def test_cli_refuses_bad_ranking_flags(tmp_path, flags):
    source = _write_jsonl(tmp_path / "clusters.jsonl", [PARAGRAPHS])
    with pytest.raises(SystemExit) as exit_info:
        cli_main(flags + [source, "-o", str(tmp_path / "o.txt")])
    assert exit_info.value.code == 2
    assert not (tmp_path / "o.txt").exists()


PAPERS = os.path.join(os.path.dirname(SHARED_DATA), "papers")


@pytest.mark.skipif(not os.path.isdir(PAPERS), reason="../shared/papers not available")
def test_the_settings_quoted_from_the_papers():
    with open(os.path.join(PAPERS, "hiertransformer-liu-lapata2019.txt"), encoding="utf-8") as handle:
        liu_lapata = " ".join(handle.read().split())
    # HT's LexRank ranks paragraphs on a tf-idf cosine graph until the reference length.
    assert "build a graph with paragraphs as nodes and edges weighted by tf-idf cosine similarity" in liu_lapata
    assert "select paragraphs until the length of the ground-truth summary is reached" in liu_lapata
    with open(os.path.join(PAPERS, "dape-linguistic-ma2022.txt"), encoding="utf-8") as handle:
        dape = handle.read()
    # DAPE reruns LexRank, TextRank and MMR on Multi-News and Multi-XScience (Tables I-II).
    for row in ("TextRank\t39.02\t14.54\t13.08", "MMR\t42.12\t13.19\t15.63", "TextRank\t31.15\t5.71\t9.07"):
        assert row in dape
    assert "WE RERUN ALL THE BASELINE MODELS UNDER THE SAME SETTINGS" in dape
