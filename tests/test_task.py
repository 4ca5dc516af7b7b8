"""The multidoc dataset (truncation, special tokens, side data, batching) and
the task with stock fairseq models as flat baselines."""

import os
import re
from collections import Counter

import numpy as np
import pytest
import torch

from mdsfair.data.batching import batch_indices_by_size
from mdsfair.data.side_data import SideDataSpec
from mdsfair.data.source_truncation import TruncationConfig
from tests.utils import USER_DIR, fairseq_cli, make_dataset, make_tiny_data_bin, toy_example


def test_document_start_tokens_and_eos_take_neighbouring_structure():
    ds = make_dataset(TruncationConfig(max_source_positions=100))
    item = ds[0]
    bos, eos = ds.dictionary.bos(), ds.dictionary.eos()
    assert item["source"].tolist() == [bos, 10, 11, 12, 13, 14, 15, bos, 16, 17, 18, bos, 19, 20, 21, 22, 23, eos]
    assert item["structure"]["doc"].tolist() == [0] * 7 + [1] * 4 + [2] * 7
    assert item["structure"]["para"].tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4]
    assert item["structure"]["sent"][-1] == 7
    assert ds.truncation_counts == Counter()
    ds = make_dataset(TruncationConfig(max_source_positions=100, document_start_token=False))
    assert ds[0]["source"].tolist() == list(range(10, 24)) + [eos]


def test_total_budget_counts_cut_tokens_and_documents():
    ds = make_dataset(TruncationConfig(max_source_positions=9))
    item = ds[0]
    bos, eos = ds.dictionary.bos(), ds.dictionary.eos()
    # Position 7 would hold document 1's <s> and position 8 is </s>: a <s>
    # with no token after it is useless, so document 1 goes whole.
    assert item["source"].tolist() == [bos, 10, 11, 12, 13, 14, 15, eos]
    counts = ds.truncation_counts
    assert counts["max_source_positions_tokens"] == 8
    assert counts["max_source_positions_documents"] == 2
    assert counts["max_source_positions_examples"] == 1
    assert counts["examples_truncated"] == 1
    assert ds.src_sizes[0] == 8
    ds = make_dataset(TruncationConfig(max_source_positions=10))
    assert ds[0]["source"].tolist() == [bos, 10, 11, 12, 13, 14, 15, bos, 16, eos]
    assert ds.truncation_counts["max_source_positions_documents"] == 1


def test_max_documents_paragraphs_and_paragraph_tokens():
    ds = make_dataset(TruncationConfig(max_source_positions=100, max_documents=2, document_start_token=False))
    assert ds[0]["source"].tolist()[:-1] == list(range(10, 19))
    assert ds.truncation_counts["max_documents_documents"] == 1
    assert ds.truncation_counts["max_documents_tokens"] == 5
    ds = make_dataset(TruncationConfig(max_source_positions=100, max_paragraphs=2, document_start_token=False))
    assert ds[0]["source"].tolist()[:-1] == list(range(10, 16))
    assert ds.truncation_counts["max_paragraphs_paragraphs"] == 3
    ds = make_dataset(TruncationConfig(max_source_positions=100, max_paragraph_tokens=2, document_start_token=False))
    assert ds[0]["source"].tolist()[:-1] == [10, 11, 13, 14, 16, 17, 19, 20, 21, 22]
    assert ds.truncation_counts["max_paragraph_tokens_tokens"] == 4


def test_per_document_budget_gives_each_document_an_even_share():
    # budget 13 = 3 <s> + 1 </s> + 3 * 3 tokens
    ds = make_dataset(TruncationConfig(max_source_positions=13, per_document_budget=True))
    item = ds[0]
    bos, eos = ds.dictionary.bos(), ds.dictionary.eos()
    assert item["source"].tolist() == [bos, 10, 11, 12, bos, 16, 17, 18, bos, 19, 20, 21, eos]
    # paragraph ids renumbered densely after the cut: doc0 keeps para 0 only
    assert item["structure"]["para"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3]
    assert ds.truncation_counts["per_document_budget_tokens"] == 5
    assert ds.truncation_counts.get("max_source_positions_tokens", 0) == 0


def test_side_data_follows_truncation():
    tokens, doc, para, sent = toy_example()
    heads = np.arange(len(tokens)) - 1  # each token points at the previous one
    relation = np.arange(len(tokens)) + 100
    graph = np.arange(25, dtype=np.float64).reshape(5, 5)
    side = {
        "dep_head": (SideDataSpec("dep_head", "token_pointer", "int32"), [heads]),
        "dep_rel": (SideDataSpec("dep_rel", "token", "int32"), [relation]),
        "graph": (SideDataSpec("graph", "paragraph_matrix", "float64"), [graph.reshape(-1)]),
    }
    ds = make_dataset(TruncationConfig(max_source_positions=100, max_paragraph_tokens=2), side_data=side)
    item = ds[0]
    source = item["source"].tolist()
    # final positions of stored tokens 10, 11 (para 0) ...
    position_of = {t: i for i, t in enumerate(source) if t >= 10}
    head = item["side_data"]["dep_head"].tolist()
    assert head[position_of[11]] == position_of[10]
    assert head[position_of[13]] == -1  # its head (stored 12) was cut
    assert head[0] == -1 and head[-1] == -1  # inserted <s> and </s>
    assert item["side_data"]["dep_rel"][position_of[14]] == 104
    ds = make_dataset(TruncationConfig(max_source_positions=100, max_paragraphs=3), side_data=side)
    assert ds[0]["side_data"]["graph"].tolist() == graph[:3, :3].tolist()
    batch = ds.collater([ds[0], make_dataset(TruncationConfig(max_source_positions=100), side_data=side)[0]])
    assert batch["net_input"]["src_graph"].shape == (2, 5, 5)
    assert batch["net_input"]["src_graph"][0, 3:].abs().sum() == 0


def test_collater_pads_structure_with_minus_one():
    ds = make_dataset(TruncationConfig(max_source_positions=100), examples=2)
    short = make_dataset(TruncationConfig(max_source_positions=8))
    batch = ds.collater([ds[0], short[0]])
    net = batch["net_input"]
    assert net["src_tokens"].shape == (2, 18)
    assert net["src_lengths"].tolist() == [18, 8]
    assert (net["src_tokens"][1, 8:] == ds.dictionary.pad()).all()
    assert (net["src_doc_ids"][1, 8:] == -1).all() and (net["src_para_ids"][1, :8] >= 0).all()
    assert net["prev_output_tokens"][0].tolist() == [ds.dictionary.eos(), 5, 6, 7]
    assert batch["target"][0].tolist() == [5, 6, 7, ds.dictionary.eos()]


@pytest.mark.parametrize("multiple", [1, 3, 8])
def test_batching_serves_every_example_once(multiple):
    rng = np.random.default_rng(0)
    sizes = np.sort(rng.integers(10, 600, 203))
    batches = batch_indices_by_size(np.arange(203), sizes, max_tokens=4000, max_sentences=16, multiple=multiple)
    served = np.concatenate(batches)
    assert sorted(served.tolist()) == list(range(203))
    assert max(len(b) * sizes[b].max() for b in batches) <= 4000
    assert max(len(b) for b in batches) <= 16


# ------------------------------------------------ stock models on the task

TINY_TRANSFORMER = [
    "--arch",
    "transformer",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
    "--share-all-embeddings",
]


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("task")))


def train(data_bin, save_dir, arch_args, updates):
    return fairseq_cli(
        "fairseq_cli.train",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            *arch_args,
            "--max-source-positions",
            "512",
            "--max-target-positions",
            "128",
            "--optimizer",
            "adam",
            "--lr",
            "3e-3",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--max-tokens",
            "4096",
            "--max-update",
            str(updates),
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--log-interval",
            "1",
            "--log-format",
            "simple",
            "--cpu",
            "--seed",
            "1",
        ],
    )


@pytest.mark.slow
def test_stock_transformer_trains_20_updates_and_generates(tiny_bin, tmp_path):
    log = train(tiny_bin, str(tmp_path / "ckpt"), TINY_TRANSFORMER, 20)
    assert "--max-source-positions cut" in log  # the truncation report at load
    losses = [float(x) for x in re.findall(r"train_inner.*?loss=([\d.]+)", log)]
    assert len(losses) == 20
    assert losses[-1] < losses[0] - 0.5
    out = fairseq_cli(
        "fairseq_cli.generate",
        [
            tiny_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--path",
            str(tmp_path / "ckpt" / "checkpoint_last.pt"),
            "--gen-subset",
            "test",
            "--max-source-positions",
            "512",
            "--max-target-positions",
            "128",
            "--beam",
            "2",
            "--max-len-b",
            "30",
            "--batch-size",
            "5",
            "--cpu",
            "--post-process",
            "sentencepiece",
        ],
    )
    hypotheses = re.findall(r"^H-(\d+)\t", out, flags=re.M)
    assert sorted(int(i) for i in hypotheses) == list(range(16))


@pytest.mark.slow
def test_stock_bart_trains_and_generates_on_the_same_data(tiny_bin, tmp_path):
    from tests.utils import TINY_BART_ARGS

    log = train(tiny_bin, str(tmp_path / "bart"), [a if a != "1024" else "512" for a in TINY_BART_ARGS], 3)
    assert "done training" in log
    out = fairseq_cli(
        "fairseq_cli.generate",
        [
            tiny_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--path",
            str(tmp_path / "bart" / "checkpoint_last.pt"),
            "--gen-subset",
            "test",
            "--max-source-positions",
            "512",
            "--max-target-positions",
            "128",
            "--beam",
            "3",
            "--max-len-b",
            "10",
            "--batch-size",
            "4",
            "--cpu",
        ],
    )
    hypotheses = re.findall(r"^H-(\d+)\t", out, flags=re.M)
    assert sorted(int(i) for i in hypotheses) == list(range(16))


def test_task_hands_a_model_exactly_the_side_inputs_it_declares():
    """No signature sniffing: a stock fairseq model declares nothing and gets
    the base inputs; an mdsfair model gets what its components declare; a
    required input the batch lacks is refused by the one check of a batch's
    side inputs, naming it."""
    from mdsfair.data.side_inputs import check_side_inputs
    from mdsfair.tasks.model_inputs import net_input_for
    from mdsfair.tasks.multidoc_summarization import MultiDocSummarizationTask

    class Stock:  # a fairseq model: no side_inputs()
        pass

    class Declaring:
        def side_inputs(self):
            return {"src_doc_ids": False, "src_sent_ids": True}

    net_input = {
        "src_tokens": 1,
        "src_lengths": 2,
        "prev_output_tokens": 3,
        "src_doc_ids": 4,
        "src_sent_ids": 5,
        "src_para_ids": 6,
    }
    assert set(net_input_for(Stock(), net_input)) == {"src_tokens", "src_lengths", "prev_output_tokens"}
    assert set(net_input_for(Declaring(), net_input)) == {
        "src_tokens",
        "src_lengths",
        "prev_output_tokens",
        "src_doc_ids",
        "src_sent_ids",
    }
    without_sentences = {k: v for k, v in net_input.items() if k != "src_sent_ids"}
    assert "src_sent_ids" not in net_input_for(Declaring(), without_sentences)
    side_inputs = {"src_doc_ids": torch.zeros(2, 3, dtype=torch.long)}
    src_tokens = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"missing side input src_sent_ids \(needed by Declaring"):
        check_side_inputs(
            src_tokens, side_inputs, Declaring().side_inputs(), "Declaring", padding_mask=src_tokens.eq(0)
        )
    sample = {"id": 0, "net_input": net_input}
    assert set(MultiDocSummarizationTask._sample_for(Stock(), sample)["net_input"]) == {
        "src_tokens",
        "src_lengths",
        "prev_output_tokens",
    }


def test_checkpoint_loads_under_torch_weights_only_default(tiny_bin, tmp_path):
    """torch >= 2.6 refuses fairseq checkpoints by default; mdsfair loads them
    with weights_only still on (fairseq's extra globals allowed for that load)
    and leaves the process environment as it was."""
    from fairseq import checkpoint_utils

    train(tiny_bin, str(tmp_path / "c"), TINY_TRANSFORMER, 1)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "c" / "checkpoint_last.pt")])
    assert task.__class__.__name__ == "MultiDocSummarizationTask"
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ
    assert isinstance(models[0], torch.nn.Module)
