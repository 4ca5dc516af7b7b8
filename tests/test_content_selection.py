"""LoBART's multitask content selection (Manakul & Gales 2021, Sec. 4):
the oracle labels, the MCS score and the budgeted selection on hand cases,
the hierarchical model against a sentence-by-sentence reference in float64,
the two losses falling, fairseq-train and ``mdsfair-rank --method mcs|oracle``,
and the settings taken from the authors' code (potsawee/longsum0)."""

import json
import os
from argparse import Namespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq import options, tasks
from fairseq.data import Dictionary

from mdsfair.criterions.content_selection import ContentSelectionCriterion
from mdsfair.models.content_selector import DEFAULTS, ContentSelectorModel
from mdsfair.preprocess.content_selection import (
    extractive_labels,
    mcs_scores,
    oracle_order,
    rank_normalised,
    select_within_budget,
    sentence_recalls,
)
from mdsfair.preprocess.rank import get_parser as rank_parser
from mdsfair.preprocess.rank import run as rank_main
from mdsfair.text import rouge_tokens
from tests.utils import REPO_ROOT, USER_DIR, make_synthetic_jsonl, paper_text, short_training

REFERENCE = rouge_tokens("The cat sat on the mat.")


# ------------------------------------------------------------ hand cases


def test_extractive_labels_are_the_sentences_sharing_a_bigram_with_the_reference():
    # reference bigrams: the cat, cat sat, sat on, on the, the mat
    sentences = ["A dog ran.", "The cat slept.", "On the mat it lay.", "Sat on."]
    words = [rouge_tokens(s) for s in sentences]
    np.testing.assert_allclose(sentence_recalls(words, REFERENCE), [0.0, 1 / 5, 2 / 5, 1 / 5])
    assert extractive_labels(words, REFERENCE).tolist() == [0.0, 1.0, 1.0, 1.0]


def test_without_a_shared_bigram_the_three_longest_sentences_are_labelled():
    words = [rouge_tokens(s) for s in ["a b", "c d e f", "g", "h i j k"]]
    assert extractive_labels(words, rouge_tokens("x y z")).tolist() == [1.0, 1.0, 0.0, 1.0]


def test_rank_normalisation_and_the_mcs_score_on_a_hand_case():
    attention, extraction = [0.5, 0.1, 0.4], [0.2, 0.9, 0.6]
    assert rank_normalised(attention).tolist() == [1.0, 0.0, 0.5]
    assert rank_normalised(extraction).tolist() == [0.0, 1.0, 0.5]
    # f_MCS = sqrt(rank(f_attn) rank(f_ext))
    np.testing.assert_allclose(mcs_scores(attention, extraction), [0.0, 0.0, 0.5])
    assert rank_normalised([0.3]).tolist() == [1.0]
    np.testing.assert_allclose(rank_normalised([3.0, 1.0, 2.0, 0.0, 5.0]), [0.75, 0.25, 0.5, 0.0, 1.0])
    with pytest.raises(ValueError, match="one of each per sentence"):
        mcs_scores([0.1, 0.2], [0.3])


def test_oracle_orders_by_recall_and_pads_as_asked():
    recalls = [0.0, 0.4, 0.0, 0.2, 0.4]
    assert oracle_order(recalls, "lead").tolist() == [1, 4, 3, 0, 2]
    assert oracle_order(recalls, "none").tolist() == [1, 4, 3]
    shuffled = oracle_order(recalls, "random", np.random.default_rng(0)).tolist()
    assert set(shuffled[:2]) == {1, 4} and shuffled[2] == 3 and set(shuffled[3:]) == {0, 2}
    with pytest.raises(ValueError, match="oracle padding"):
        oracle_order(recalls, "sideways")
    # without padding and without a shared bigram: the 3 longest sentences (oracle_select_nopad.py)
    assert oracle_order([0.0] * 4, "none", word_counts=[2, 4, 1, 4]).tolist() == [1, 3, 0]


def test_selection_keeps_the_original_order_and_never_exceeds_the_budget():
    lengths = [4, 6, 1, 5]
    # 1 (6) fits, 0 (4) would overrun 8 and is skipped, 2 (1) still fits, 3 (5) does not
    selection = select_within_budget([1, 0, 2, 3], lengths, 8)
    assert selection.kept == [1, 2] and selection.kept_tokens == 7
    assert (selection.dropped_sentences, selection.dropped_tokens) == (2, 9)
    exact = select_within_budget([3, 0, 2, 1], lengths, 10)  # 5 + 4 + 1 = 10 exactly
    assert exact.kept == [0, 2, 3] and exact.kept_tokens == 10 and exact.dropped_tokens == 6
    whole = select_within_budget([2, 0, 1, 3], lengths, 16)
    assert whole.kept == [0, 1, 2, 3] and (whole.dropped_sentences, whole.dropped_tokens) == (0, 0)
    # a sentence the ranking does not hold (beyond the selector's limit) is dropped and counted
    unranked = select_within_budget([0, 1], lengths, 100)
    assert unranked.kept == [0, 1] and (unranked.dropped_sentences, unranked.dropped_tokens) == (2, 6)
    with pytest.raises(ValueError, match="budget"):
        select_within_budget([0], [1], 0)


def test_sentence_lengths_in_the_summarizers_gpt2_bpe_tokens(tmp_path):
    """``--gpt2-encoder-json``/``--gpt2-vocab-bpe``: a sentence's length is
    the number of BPE ids the checkpoint's own tokenizer gives it in running
    text (after a space); without the files, its white-space words."""
    from tokenizers import ByteLevelBPETokenizer

    from mdsfair.preprocess.rank import sentence_token_counter
    from tests.import_fixtures import TEXTS, write_tokenizer

    write_tokenizer(str(tmp_path))
    files = {"gpt2_encoder_json": str(tmp_path / "vocab.json"), "gpt2_vocab_bpe": str(tmp_path / "merges.txt")}
    count = sentence_token_counter(Namespace(sentencepiece_model=None, **files))
    tokenizer = ByteLevelBPETokenizer(files["gpt2_encoder_json"], files["gpt2_vocab_bpe"])
    for sentence in TEXTS:
        assert count(sentence) == len(tokenizer.encode(" " + sentence).ids), sentence
    words = sentence_token_counter(Namespace(sentencepiece_model=None, gpt2_encoder_json=None, gpt2_vocab_bpe=None))
    assert words("Rain  fell all day.") == 4
    with pytest.raises(SystemExit, match="go together"):
        sentence_token_counter(
            Namespace(sentencepiece_model=None, gpt2_encoder_json=files["gpt2_encoder_json"], gpt2_vocab_bpe=None)
        )


# -------------------------------------------------- the authors' settings


def test_defaults_are_the_authors_configuration():
    """potsawee/longsum0 ``conf/hiermodel_v1.txt`` (embedding_dim 256,
    rnn_hidden_size 512, num_layers_enc 2, num_layers_dec 1, dropout 0.1,
    gamma 0.2, num_utterances 1000, num_words 50, summary_length 144) and
    ``decode/inference_hiermodel.py``'s defaults (beam_width 4, time_step
    144, alpha 1.25)."""
    assert (DEFAULTS["selector_embed_dim"], DEFAULTS["selector_hidden_dim"]) == (256, 512)
    assert (DEFAULTS["selector_encoder_layers"], DEFAULTS["selector_decoder_layers"], DEFAULTS["dropout"]) == (
        2,
        1,
        0.1,
    )
    from mdsfair.criterions.content_selection import ContentSelectionCriterionConfig
    from mdsfair.tasks.content_selection import ContentSelectionConfig

    assert ContentSelectionCriterionConfig().extraction_weight == 0.2
    config = ContentSelectionConfig()
    assert (config.max_sentences, config.max_sentence_words, config.max_summary_words + 1) == (1000, 50, 144)
    parsed = rank_parser().parse_args(["--input", "x"])
    assert (parsed.mcs_beam, parsed.mcs_decode_steps, parsed.mcs_length_penalty) == (4, 144, 1.25)


def test_the_recipe_quotes_the_sparse_decoder_paper_on_mcs():
    """examples/lobart/README.md quotes App. A.1 of the sparse decoder paper."""
    quote = (
        "MCS is the multitask content selection system for handling the Podcast/arXiv input documents that "
        "exceed 4096 words"
    )
    with open(os.path.join(REPO_ROOT, "examples", "lobart", "README.md"), encoding="utf-8") as handle:
        assert quote in " ".join(handle.read().split())
    assert quote in paper_text("sparse-encdec-attention-manakul2021.txt").replace("selec- tion", "selection")


def test_the_recipe_trains_the_selector_at_the_authors_learning_rate():
    """The recipe's fairseq-train command: fairseq's inverse_sqrt schedule at
    update s equals the authors' ``adjust_lr`` with lr0 0.002 and 10,000
    warm-up steps (``conf/hiermodel_v1.txt``), whose steps count examples,
    two per update (``gradient_accum = 2``): 0.002 * min((2s)^-0.5, 2s * 10000^-1.5)."""
    import re
    import shlex

    from tests.utils import scheduler_from

    with open(os.path.join(REPO_ROOT, "examples", "lobart", "README.md"), encoding="utf-8") as handle:
        blocks = re.findall(r"```bash\n(fairseq-train [^`]*?--task content_selection[^`]*?)```", handle.read())
    assert len(blocks) == 1
    argv = shlex.split(blocks[0].replace("\\\n", " "))[1:]
    assert argv[argv.index("--update-freq") + 1] == "2" and argv[argv.index("--batch-size") + 1] == "1"
    scheduler = scheduler_from(argv)
    for s in [1, 10, 2500, 4999, 5000, 5001, 50000, 10**6]:
        expected = 0.002 * min((2 * s) ** -0.5, 2 * s * 10000**-1.5)
        assert scheduler.step_update(s) == pytest.approx(expected, rel=1e-12, abs=0)


# ----------------------------------------------------------------- model


def tiny_selector(dtype=torch.float64, seed=0):
    dictionary = Dictionary()
    for i in range(30):
        dictionary.add_symbol(f"w{i}")
    torch.manual_seed(seed)
    args = Namespace(
        selector_embed_dim=6, selector_hidden_dim=8, selector_encoder_layers=2, selector_decoder_layers=1, dropout=0.0
    )
    return ContentSelectorModel(args, dictionary).to(dtype).eval(), dictionary


def reference_outputs(model, sentences, prev_tokens):
    """One cluster without padding, a sentence and a step at a time:
    ``u_i`` the word GRU's state at the last word, ``h_i`` the sentence
    GRU's, then beta, gamma, the context and the logits of every step."""
    word_states = [model.word_rnn.gru(model.embed_tokens(s.unsqueeze(0)))[0][0] for s in sentences]
    vectors = torch.stack([states[-1] for states in word_states]).unsqueeze(0)
    sentence_states = model.sentence_rnn.gru(vectors)[0][0]  # [S, h]
    state = sentence_states[-1].view(1, 1, -1)
    logits, betas = [], []
    for token in prev_tokens:
        output, state = model.decoder_rnn.gru(model.decoder_embed_tokens(token.view(1, 1)), state)
        s_t = output[0, 0]
        beta = torch.softmax(model.sentence_attention_proj(sentence_states) @ s_t, dim=0)
        context = torch.zeros_like(s_t)
        for i, states in enumerate(word_states):
            gamma = torch.softmax(model.word_attention_proj(states) @ s_t, dim=0)
            context = context + beta[i] * (gamma.unsqueeze(-1) * states).sum(0)
        logits.append(model.output_proj(torch.cat([context, s_t])))
        betas.append(beta)
    extraction = model.extraction_proj(sentence_states).squeeze(-1)
    return torch.stack(logits), torch.stack(betas), extraction


def test_the_hierarchical_model_matches_its_equations_and_ignores_padding():
    model, dictionary = tiny_selector()
    pad = dictionary.pad()
    clusters = [
        [torch.tensor([5, 6, 7]), torch.tensor([8]), torch.tensor([9, 10])],
        [torch.tensor([11, 12]), torch.tensor([13, 14, 15, 16])],
    ]
    prev = [torch.tensor([2, 20, 21, 22]), torch.tensor([2, 23, pad, pad])]
    tokens = torch.full((2, 3, 4), pad)
    for row, sentences in enumerate(clusters):
        for index, sentence in enumerate(sentences):
            tokens[row, index, : len(sentence)] = sentence
    with torch.no_grad():
        logits, extra = model(tokens, torch.stack(prev))
        for row, sentences in enumerate(clusters):
            steps = int(prev[row].ne(pad).sum())
            expected_logits, expected_beta, expected_extraction = reference_outputs(model, sentences, prev[row][:steps])
            torch.testing.assert_close(logits[row, :steps], expected_logits, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(
                extra["sentence_attention"][row, :steps, : len(sentences)], expected_beta, rtol=1e-10, atol=1e-10
            )
            assert not extra["sentence_attention"][row, :, len(sentences) :].any()  # the padding sentence
            torch.testing.assert_close(
                extra["extraction_logits"][row, : len(sentences)], expected_extraction, rtol=1e-10, atol=1e-10
            )


def test_decoded_attention_is_the_greedy_paths_normalised_sentence_attention_at_beam_1():
    model, dictionary = tiny_selector(seed=3)
    tokens = torch.tensor([[[5, 6, 7], [8, 1, 1], [9, 10, 11]]])
    eos = dictionary.eos()
    with torch.no_grad():
        encoder_out = model.encode(tokens)
        attention = model.decoded_attention(encoder_out, eos, eos, beam=1, max_steps=6, length_penalty=1.0)
        state, word, total = model.initial_state(encoder_out), torch.tensor([[eos]]), torch.zeros(3)
        for _ in range(6):
            logits, beta, state = model.decode(word, encoder_out, state)
            total += beta[0, 0].float()
            lprobs = F.log_softmax(logits[0, 0].float(), -1)
            lprobs[dictionary.pad()] = float("-inf")
            word = lprobs.argmax().view(1, 1)
            if word.item() == eos:
                break
    torch.testing.assert_close(attention, total / total.sum())
    beams = model.decoded_attention(encoder_out, eos, eos, beam=4, max_steps=6, length_penalty=1.25)
    assert beams.shape == (3,) and (beams >= 0).all() and abs(beams.sum().item() - 1) < 1e-6


# ------------------------------------------------------ task and training


@pytest.fixture(scope="module")
def selection_data(tmp_path_factory):
    return make_synthetic_jsonl(str(tmp_path_factory.mktemp("selection")), train=8, valid=4, test=4)


#: The tiny selector on its task and loss.
SELECTOR = ["--task", "content_selection", "--arch", "lobart_mcs_tiny", "--criterion", "content_selection"]


def selection_args(data, *extra):
    return options.parse_args_and_arch(
        options.get_training_parser(), [data, "--user-dir", USER_DIR, *SELECTOR, "--dropout", "0", *extra]
    )


def test_task_targets_and_both_losses_fall(selection_data):
    args = selection_args(selection_data)
    task = tasks.setup_task(args)
    assert os.path.exists(os.path.join(selection_data, "dict.selector.txt"))
    task.load_dataset("train")
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[i] for i in range(4)])
    sentences = sample["net_input"]["sentence_tokens"].ne(task.dictionary.pad()).any(-1)
    assert sample["extractive_target"].shape == sentences.shape
    assert sample["extractive_target"][~sentences].abs().sum() == 0 and sample["extractive_target"].sum() > 0
    eos = task.dictionary.eos()
    assert (sample["net_input"]["prev_output_tokens"][:, 0] == eos).all()
    torch.manual_seed(0)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    summary_losses, extraction_losses = [], []
    for _ in range(25):
        optimizer.zero_grad()
        loss, sample_size, logging_output = criterion(model, sample)
        (loss / sample_size).backward()
        optimizer.step()
        summary_losses.append(logging_output["summary_loss"].item() / sample_size)
        extraction_losses.append(logging_output["extraction_loss"].item() / sample_size)
    assert summary_losses[-1] < 0.8 * summary_losses[0], summary_losses
    assert extraction_losses[-1] < 0.8 * extraction_losses[0], extraction_losses


def test_the_loss_weights_the_two_tasks_by_gamma(selection_data):
    args = selection_args(selection_data)
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    sample = dataset.collater([dataset[i] for i in range(3)])
    torch.manual_seed(0)
    model = task.build_model(args).double().eval()
    with torch.no_grad():
        loss_at = {gamma: ContentSelectionCriterion(task, gamma)(model, sample)[0] for gamma in (0.0, 0.2, 1.0)}
    torch.testing.assert_close(loss_at[0.2], 0.8 * loss_at[0.0] + 0.2 * loss_at[1.0], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="--extraction-weight"):
        ContentSelectionCriterion(task, 1.5)


# ----------------------------------------- fairseq-train and mdsfair-rank


@pytest.fixture(scope="module")
def trained_selector(selection_data, tmp_path_factory):
    """mdsfair-train (fairseq-train) for 3 updates of the tiny selector."""
    from mdsfair import cli

    save_dir = str(tmp_path_factory.mktemp("selector"))
    cli.train_main([selection_data, *SELECTOR, *short_training(save_dir, updates=3)])
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    return checkpoint


def check_selected(input_path, output_path, budget):
    """Every output line: sentences in their original order, within the
    budget (words), and every sentence and word of the input kept or counted."""
    from mdsfair.preprocess.content_selection import cluster_sentences
    from mdsfair.preprocess.structure import SentenceSplitter, read_clusters

    clusters = list(read_clusters(input_path, SentenceSplitter("rule"), require_summary=False))
    records = [json.loads(line) for line in open(output_path, encoding="utf-8")]
    assert [r["id"] for r in records] == [c.id for c in clusters]
    for cluster, record in zip(clusters, records):
        sentences = cluster_sentences(cluster)
        sources = [
            [d, p, s] for d, doc in enumerate(cluster.documents) for p, par in enumerate(doc) for s in range(len(par))
        ]
        positions = [sources.index(source) for source in record["selected_sentences"]]
        assert positions == sorted(positions)
        kept_words = sum(len(sentences[i].split()) for i in positions)
        selection = record["selection"]
        assert selection["kept_tokens"] == kept_words <= budget
        assert selection["dropped_tokens"] == sum(len(s.split()) for s in sentences) - kept_words
        assert selection["dropped_sentences"] == len(sentences) - len(positions)
        assert " ".join(" ".join(record["documents"]).split()) == " ".join(sentences[i] for i in positions)
    return records


def test_mdsfair_rank_selects_with_the_trained_selector_and_with_the_oracle(
    selection_data, trained_selector, tmp_path, capsys
):
    test_path = os.path.join(selection_data, "test.jsonl")
    budget = 40
    for method, extra in (("mcs", ["--checkpoint", trained_selector, "--mcs-decode-steps", "5"]), ("oracle", [])):
        output = str(tmp_path / f"{method}.jsonl")
        rank_main(
            ["--input", test_path, "--output", output, "--method", method, "--max-source-tokens", str(budget), *extra]
        )
        records = check_selected(test_path, output, budget)
        assert any(r["selection"]["dropped_sentences"] for r in records), "the budget must cut some cluster"
        report = capsys.readouterr().err
        dropped = sum(r["selection"]["dropped_tokens"] for r in records)
        assert f"({dropped} tokens" in report and method in report
    with pytest.raises(SystemExit, match="runs alone"):
        rank_main(["--input", test_path, "--output", output, "--method", "mcs", "tfidf", "--max-source-tokens", "9"])
    with pytest.raises(SystemExit, match="needs --max-source-tokens"):
        rank_main(["--input", test_path, "--output", output, "--method", "oracle"])
    with pytest.raises(SystemExit, match="Table 1"):
        rank_main(["--input", test_path, "--evaluate", "--method", "oracle", "--max-source-tokens", "9"])
    with pytest.raises(SystemExit, match="applies to --method mcs or oracle"):
        rank_main(["--input", test_path, "--output", output, "--method", "tfidf", "--max-source-tokens", "9"])
    with pytest.raises(SystemExit, match="needs --checkpoint"):
        rank_main(["--input", test_path, "--output", output, "--method", "mcs", "--max-source-tokens", "9"])
