"""Semantic coherence by next-sentence prediction
(mdsfair/evaluation/nsp_coherence.py, PageSum Eq. 12): checked against the
softmax of a tiny random BertForNextSentencePrediction's IsNext logit worked
by hand pair by pair, the one-sentence rule of Bommasani & Cardie's code,
PageSum's model, and the column through mdsfair-rouge and mdsfair-compare."""

import json
import os

import pytest
import torch

from mdsfair.evaluation import compare, rouge
from mdsfair.evaluation.local_models import ModelMetricError
from mdsfair.evaluation.nsp_coherence import DEFAULT_MODEL, semantic_coherence, sentence_pairs
from tests.import_fixtures import import_transformers
from tests.utils import REPO_ROOT

WORDS = (
    "the council approved new budget on tuesday critics said it cuts too much from schools a storm hit coast "
    "overnight thousands of homes lost power and roads were closed prices for coffee tea cocoa climbed again "
    "this week traders"
).split()

SUMMARIES = [
    ["The council approved the new budget on Tuesday.", "Critics said it cuts too much from schools."],
    ["A storm hit the coast overnight.", "Thousands of homes lost power.", "Roads were closed."],
    ["Prices for coffee climbed again this week."],
    [],
]


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A random 2-layer BertForNextSentencePrediction with a WordPiece vocabulary of whole words;
    its weights drawn 10x wider than BERT's (std 0.2) so that the probabilities spread away from 1/2."""
    transformers = import_transformers()
    folder = str(tmp_path_factory.mktemp("tiny-bert-nsp"))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + sorted(set(WORDS))
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as handle:
        handle.write("".join(token + "\n" for token in vocab))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=40,
        max_position_embeddings=64,
        initializer_range=0.2,
    )
    transformers.BertForNextSentencePrediction(config).save_pretrained(folder)
    transformers.BertTokenizer(os.path.join(folder, "vocab.txt"), model_max_length=64).save_pretrained(folder)
    return folder


def next_sentence_probability_by_hand(folder, first, second):
    """softmax(logits)[IsNext] for [CLS] first [SEP] second [SEP], segments 0 then 1."""
    transformers = import_transformers()
    tokenizer = transformers.BertTokenizer.from_pretrained(folder)
    model = transformers.BertForNextSentencePrediction.from_pretrained(folder).eval()
    tokens_a, tokens_b = tokenizer.tokenize(first), tokenizer.tokenize(second)
    tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
    segments = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
    with torch.no_grad():
        logits = (
            model(torch.tensor([tokenizer.convert_tokens_to_ids(tokens)]), token_type_ids=torch.tensor([segments]))
            .logits[0]
            .double()
        )
    return (logits[0].exp() / logits.exp().sum()).item()


def test_coherence_is_the_mean_is_next_probability_of_consecutive_pairs(bert_folder):
    coherence, info = semantic_coherence(SUMMARIES, bert_folder)
    by_hand = [next_sentence_probability_by_hand(bert_folder, a, b) for a, b in sentence_pairs(SUMMARIES[1])]
    tolerance = 100 * torch.finfo(torch.float32).eps
    assert coherence[0] == pytest.approx(next_sentence_probability_by_hand(bert_folder, *SUMMARIES[0]), abs=tolerance)
    assert coherence[1] == pytest.approx((by_hand[0] + by_hand[1]) / 2, abs=tolerance)
    # the pairs are consecutive (1,2), (2,3), in order: not (1,3), not reversed
    assert sentence_pairs(SUMMARIES[1]) == [(SUMMARIES[1][0], SUMMARIES[1][1]), (SUMMARIES[1][1], SUMMARIES[1][2])]
    reversed_pair = next_sentence_probability_by_hand(bert_folder, SUMMARIES[0][1], SUMMARIES[0][0])
    assert abs(reversed_pair - coherence[0]) > 1e-3
    assert max(by_hand) - min(by_hand) > 1e-3  # the wide weights separate pairs
    assert info["fewer_than_two_sentences"] == 2 and info["model_folder"] == bert_folder


def test_fewer_than_two_sentences_score_one_as_bommasani_and_cardies_code(bert_folder):
    """rishibommasani/SummarizationEvaluation, process_eval.py, add_sc:
    ``if len(sentences) <= 1: ex["coherence"] = 1``."""
    coherence, _ = semantic_coherence([["Only one sentence here."], [], ["", "  "]], bert_folder)
    assert coherence == [1.0, 1.0, 1.0]


def test_batching_and_padding_change_no_probability(bert_folder):
    one_by_one, _ = semantic_coherence(SUMMARIES, bert_folder, batch_size=1)
    batched, _ = semantic_coherence(SUMMARIES, bert_folder, batch_size=8)
    assert batched == pytest.approx(one_by_one, abs=100 * torch.finfo(torch.float32).eps)


def test_default_model_is_pagesums():
    assert DEFAULT_MODEL == "bert-large-uncased"
    paper = os.path.join(os.path.dirname(REPO_ROOT), "shared", "papers", "pagesum-liu2022.txt")
    if not os.path.exists(paper):
        pytest.skip(f"{paper}: the paper's text is not in this checkout's shared folder")
    with open(paper, encoding="utf-8") as handle:
        text = handle.read()
    assert "¹⁰We use the checkpoint (‘bert-large-uncased’)" in text
    assert r"SC(S) = \frac{\sum_{i=2}^{N_S} p_{\text{BERT}}(S^{(i)}|S^{(i-1)})}{N_S - 1}" in text


def test_a_missing_model_is_one_line(tmp_path):
    with pytest.raises(ModelMetricError, match=r"^--nsp-model .*: no such folder, and no model of that id"):
        semantic_coherence(SUMMARIES, str(tmp_path / "missing" / "a" / "b"))


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_mdsfair_rouge_and_compare_add_the_column(bert_folder, tmp_path, capsys):
    hypotheses = [" ".join(summary) for summary in SUMMARIES[:3]] * 4
    expected, _ = semantic_coherence([s for s in SUMMARIES[:3]] * 4, bert_folder)
    hyp = write_lines(tmp_path / "hyp.txt", hypotheses)
    shuffled = write_lines(tmp_path / "shuffled.txt", [" ".join(reversed(s)) for s in SUMMARIES[:3]] * 4)
    ref = write_lines(tmp_path / "ref.txt", hypotheses)
    per_cluster = str(tmp_path / "clusters.csv")
    output = str(tmp_path / "rouge.json")
    assert (
        rouge.cli_main(
            [
                hyp,
                ref,
                "--fast",
                "--nsp-coherence",
                "--nsp-model",
                bert_folder,
                "--per-cluster",
                per_cluster,
                "--json",
                output,
                "--measure",
                "all",
            ]
        )
        == 0
    )
    with open(output, encoding="utf-8") as handle:
        result = json.load(handle)
    assert result["nsp-coherence"]["f"] == pytest.approx(sum(expected) / len(expected), rel=1e-12)
    assert result["nsp-coherence"]["r"] == result["nsp-coherence"]["p"] == result["nsp-coherence"]["f"]
    from mdsfair.evaluation.per_cluster import read_per_cluster

    assert [record["nsp-coherence"]["f"] for record in read_per_cluster(per_cluster)] == pytest.approx(
        expected, rel=1e-15
    )
    assert capsys.readouterr().out.splitlines()[0].split()[-1] == "SC"

    output = str(tmp_path / "compare.json")
    assert (
        compare.cli_main(
            [
                "--ref",
                ref,
                "--fast",
                "--nsp-coherence",
                "--nsp-model",
                bert_folder,
                "--ci",
                "--baseline",
                "ordered",
                "--samples",
                "200",
                "--json",
                output,
                f"ordered={hyp}",
                f"reversed={shuffled}",
            ]
        )
        == 0
    )
    with open(output, encoding="utf-8") as handle:
        result = json.load(handle)
    assert result["systems"]["ordered"]["per_cluster"]["nsp-coherence"]["f"] == expected
    reversed_scores = result["systems"]["reversed"]["per_cluster"]["nsp-coherence"]["f"]
    delta = sum(reversed_scores) / len(reversed_scores) - sum(expected) / len(expected)
    assert result["tests"]["reversed"]["nsp-coherence"]["delta"] == pytest.approx(delta, rel=1e-12)
    assert "nsp-coherence" in next(row for row in result["rows"] if row["name"] == "ordered")["ci"]
