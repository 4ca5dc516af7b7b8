"""Paragraph ranker (Liu & Lapata 2019, Section 3.1): Eq. 1-6 against a
one-paragraph-at-a-time reference, ROUGE targets, the loss falling, and
``mdsfair-rank`` (ranker, tf-idf title baseline, Table 1 metric)."""

import json
import os
import random
from argparse import Namespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils, options, tasks
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from mdsfair.models.paragraph_ranker import ParagraphRankerModel, masked_max_pool
from mdsfair.preprocess.rank import ranked_documents, tfidf_title_scores
from mdsfair.preprocess.rank import run as rank_main
from mdsfair.preprocess.structure import ClusterStructure
from mdsfair.tasks.paragraph_ranking import words
from mdsfair.text import lcs_length, rouge_l_recall, rouge_n_recall
from tests.utils import USER_DIR, make_synthetic_jsonl


def tiny_ranker(seed=0):
    dictionary = Dictionary()
    for i in range(30):
        dictionary.add_symbol(f"w{i}")
    torch.manual_seed(seed)
    args = Namespace(ranker_embed_dim=8, ranker_hidden_dim=6, dropout=0.0)
    return ParagraphRankerModel(args, dictionary).eval(), dictionary


def test_ranker_matches_equations_and_ignores_padding():
    model, dictionary = tiny_ranker()
    pad = dictionary.pad()
    titles = torch.tensor([[5, 6, 7], [8, 9, pad]])
    paragraphs = torch.tensor([[10, 11, 12, 13], [14, 15, pad, pad], [16, pad, pad, pad]])
    cluster = torch.tensor([0, 0, 1])
    logits = model(titles, paragraphs, cluster)
    for n in range(3):
        title = titles[cluster[n]][titles[cluster[n]] != pad].unsqueeze(0)
        paragraph = paragraphs[n][paragraphs[n] != pad].unsqueeze(0)
        u_title = model.title_lstm(model.embed_tokens(title))[0][0]  # Eq. 1
        title_vector = u_title.max(dim=0).values  # Eq. 3
        u_paragraph = model.paragraph_lstm(model.embed_tokens(paragraph))[0][0]  # Eq. 2
        p = torch.tanh(model.match_proj(torch.cat([u_paragraph, title_vector.expand_as(u_paragraph)], -1)))  # Eq. 4
        expected = model.score_proj(p.max(dim=0).values)  # Eq. 5-6 (logit)
        assert torch.allclose(logits[n], expected.squeeze(), atol=1e-6)
    assert torch.allclose(model.score(titles, paragraphs, cluster), torch.sigmoid(logits))


@pytest.mark.parametrize("flag", ["checkpoint_activations", "offload_activations"])
def test_checkpoint_activations_recompute_both_lstms_with_identical_loss_and_gradients(flag, monkeypatch):
    """--checkpoint-activations (--offload-activations implies it): the title
    and the paragraph LSTM (Eq. 1-2) each run without gradients in the
    forward pass and again, recomputed, in the backward pass; loss and
    gradients are those of the plain model."""
    calls = []
    lstm_forward = torch.nn.LSTM.forward

    def recording_forward(self, *args, **kwargs):
        calls.append((self, torch.is_grad_enabled()))
        return lstm_forward(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.LSTM, "forward", recording_forward)  # before the layers are wrapped
    dictionary = tiny_ranker()[1]
    pad = dictionary.pad()
    titles = torch.tensor([[5, 6, 7], [8, 9, pad]])
    paragraphs = torch.tensor([[10, 11, 12, 13], [14, 15, pad, pad], [16, pad, pad, pad], [17, 18, 19, pad]])
    cluster = torch.tensor([0, 0, 1, 1])
    targets = torch.tensor([0.9, 0.1, 0.4, 0.7])
    results = []
    for flags in ({}, {flag: True}):
        torch.manual_seed(0)
        model = ParagraphRankerModel(
            Namespace(ranker_embed_dim=8, ranker_hidden_dim=6, dropout=0.0, **flags), dictionary
        ).train()
        calls.clear()
        loss = F.binary_cross_entropy_with_logits(model(titles, paragraphs, cluster), targets)
        forward_calls = list(calls)
        loss.backward()
        modes = {
            name: [mode for layer, mode in calls if layer is getattr(model, name)]
            for name in ("title_lstm", "paragraph_lstm")
        }
        assert all(layer in (model.title_lstm, model.paragraph_lstm) for layer, _ in forward_calls)
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, modes))
    (loss, gradients, plain_modes), (checkpointed_loss, checkpointed_gradients, modes) = results
    assert plain_modes == {"title_lstm": [True], "paragraph_lstm": [True]}
    assert modes == {"title_lstm": [False, True], "paragraph_lstm": [False, True]}  # forward, recomputation
    assert torch.equal(checkpointed_loss, loss)
    for name, gradient in gradients.items():
        assert gradient.abs().sum() > 0, name
        torch.testing.assert_close(checkpointed_gradients[name], gradient, atol=1e-6, rtol=1e-5, msg=name)


def test_masked_max_pool():
    states = torch.tensor([[[1.0], [5.0], [9.0]], [[-3.0], [-1.0], [7.0]]])
    padding = torch.tensor([[False, False, True], [True, True, True]])
    assert masked_max_pool(states, padding).tolist() == [[5.0], [0.0]]


def test_rouge_helpers_match_definitions():
    rng = random.Random(0)

    def lcs_reference(a, b):
        table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(len(a)):
            for j in range(len(b)):
                table[i + 1][j + 1] = table[i][j] + 1 if a[i] == b[j] else max(table[i][j + 1], table[i + 1][j])
        return table[-1][-1]

    for _ in range(50):
        a = [rng.choice("abcde") for _ in range(rng.randint(0, 70))]
        b = [rng.choice("abcde") for _ in range(rng.randint(0, 30))]
        assert lcs_length(a, b) == lcs_reference(a, b)
    summary = words("The cat sat on the mat.")
    assert rouge_n_recall(words("the cat sat"), summary, 2) == pytest.approx(2 / 5)
    assert rouge_n_recall(words("on the mat the cat"), summary, 2) == pytest.approx(3 / 5)
    assert rouge_l_recall(words("cat on mat"), summary) == pytest.approx(3 / 6)


def test_tfidf_title_baseline_and_ranked_documents():
    cluster = ClusterStructure(
        id="c",
        title="Venden tower",
        documents=[
            [["Rain fell all day."], ["The Venden tower is old."]],
            [["Venden has a tower and a bell."], ["Bread is cheap."]],
        ],
        summary="The Venden tower is old.",
        summary_sentences=["The Venden tower is old."],
    )
    scores = tfidf_title_scores(cluster.title, cluster.paragraphs())
    assert scores[0] == 0.0 and scores[3] == 0.0 and scores[1] > 0 and scores[2] > 0
    # Runs of ranked paragraphs that were consecutive in one source document form one document.
    assert ranked_documents(cluster, [2, 3, 1, 0]) == [
        "Venden has a tower and a bell.\n\nBread is cheap.",
        "The Venden tower is old.",
        "Rain fell all day.",
    ]


@pytest.fixture(scope="module")
def ranking_data(tmp_path_factory):
    return make_synthetic_jsonl(str(tmp_path_factory.mktemp("ranking")), train=12, valid=4, test=4)


def ranking_args(data, *extra):
    return options.parse_args_and_arch(
        options.get_training_parser(),
        [
            data,
            "--user-dir",
            USER_DIR,
            "--task",
            "paragraph_ranking",
            "--arch",
            "paragraph_ranker_tiny",
            "--criterion",
            "paragraph_ranking",
            "--dropout",
            "0",
            *extra,
        ],
    )


def test_ranking_task_targets_and_loss_falls(ranking_data):
    args = ranking_args(ranking_data)
    task = tasks.setup_task(args)
    assert os.path.exists(os.path.join(ranking_data, "dict.ranker.txt"))
    task.load_dataset("train")
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    assert sample["target"].shape == sample["net_input"]["paragraph_cluster"].shape
    assert 0 < sample["target"].max() <= 1
    torch.manual_seed(0)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.15)  # the paper's optimizer
    losses = []
    for _ in range(15):
        optimizer.zero_grad()
        loss, sample_size, logging_output = criterion(model, sample)
        (loss / sample_size).backward()
        optimizer.step()
        losses.append(logging_output["excess_loss"].item() / sample_size)
    assert losses[-1] < 0.5 * losses[0], losses


def save_ranker_checkpoint(data, path):
    """A real fairseq checkpoint of a (briefly trained) ranker, written the way
    fairseq-train writes one (config + model state), without a subprocess."""
    args = ranking_args(data)
    task = tasks.setup_task(args)
    task.load_dataset("train")
    torch.manual_seed(0)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[i] for i in range(4)])
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.15)
    for _ in range(2):
        optimizer.zero_grad()
        loss, sample_size, _ = criterion(model, sample)
        (loss / sample_size).backward()
        optimizer.step()
    state = {
        "cfg": convert_namespace_to_omegaconf(args),
        "model": model.state_dict(),
        "args": None,
        "optimizer_history": [
            {
                "criterion_name": "ParagraphRankingCriterion",
                "optimizer_name": "Adagrad",
                "lr_scheduler_state": {},
                "num_updates": 2,
            }
        ],
        "extra_state": {},
    }
    checkpoint_utils.torch_persistent_save(state, path)
    return path


def test_mdsfair_rank_with_trained_ranker(ranking_data, tmp_path):
    checkpoint = save_ranker_checkpoint(ranking_data, str(tmp_path / "ranker.pt"))
    test_path = os.path.join(ranking_data, "test.jsonl")
    output = str(tmp_path / "ranked.jsonl")
    results = rank_main(
        [
            "--input",
            test_path,
            "--output",
            output,
            "--method",
            "ranker",
            "tfidf",
            "original",
            "--checkpoint",
            checkpoint,
            "--evaluate",
            "--top",
            "1",
            "3",
            "1000",
            "--max-paragraphs",
            "3",
        ]
    )
    assert set(results) == {"ranker", "tfidf", "original"}
    for method in results:
        assert results[method][1] <= results[method][1000] + 1e-9
    # With every paragraph kept, ROUGE-L recall depends only on the order; all methods keep everything.
    with open(test_path) as f:
        originals = [json.loads(line) for line in f]
    with open(output) as f:
        ranked = [json.loads(line) for line in f]
    assert [r["id"] for r in ranked] == [o["id"] for o in originals]
    for record in ranked:
        assert len(record["ranked_paragraphs"]) == 3
        assert record["paragraph_scores"] == sorted(record["paragraph_scores"], reverse=True)
        assert sum(d.count("\n\n") + 1 for d in record["documents"]) == 3
    with pytest.raises(SystemExit):
        rank_main(["--input", test_path, "--method", "ranker", "--evaluate"])


def test_tfidf_needs_titles(tmp_path):
    path = tmp_path / "untitled.jsonl"
    path.write_text(json.dumps({"id": "x", "documents": ["One paragraph here."], "summary": "One."}) + "\n")
    with pytest.raises(SystemExit, match="title"):
        rank_main(["--input", str(path), "--method", "tfidf", "--evaluate"])
    np.testing.assert_allclose(
        rank_main(["--input", str(path), "--method", "original", "--evaluate", "--top", "1"])["original"][1], 100.0
    )


def test_rank_output_directory_is_created(tmp_path):
    """The recipe's ``mdsfair-rank --output ranked/train.jsonl`` into a folder that does not exist yet."""
    path = tmp_path / "raw.jsonl"
    clusters = [
        {
            "id": "a",
            "title": "Budget",
            "documents": ["The budget passed.\n\nRain fell."],
            "summary": "The budget passed.",
        },
        {"id": "b", "title": "Storm", "documents": ["Traffic was light.\n\nA storm hit."], "summary": "A storm hit."},
    ]
    path.write_text("".join(json.dumps(c) + "\n" for c in clusters))
    output = tmp_path / "ranked" / "deeper" / "test.jsonl"
    rank_main(["--input", str(path), "--output", str(output), "--method", "tfidf"])
    ranked = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in ranked] == ["a", "b"]
    assert [r["ranked_paragraphs"] for r in ranked] == [[[0, 0], [0, 1]], [[0, 1], [0, 0]]]
