"""fairseq's own ``lstm`` (a bidirectional, packed RNN encoder) in the task:
its batches are ordered by source length, longest first, as fairseq's
``LanguagePairDataset`` collates them, and every field follows that order."""

import os
import re

import pytest
import torch

from mdsfair.data.multidoc_dataset import MultiDocSummarizationDataset
from mdsfair.data.source_truncation import TruncationConfig
from tests.utils import USER_DIR, fairseq_cli, make_dataset

TINY_LSTM = [
    "--arch",
    "lstm",
    "--encoder-bidirectional",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "32",
    "--encoder-hidden-size",
    "32",
    "--decoder-embed-dim",
    "32",
    "--decoder-hidden-size",
    "32",
    "--decoder-out-embed-dim",
    "32",
]


def test_sorted_batch_takes_every_field_in_the_same_order():
    long = make_dataset(TruncationConfig(max_source_positions=100))
    middle = make_dataset(TruncationConfig(max_source_positions=12))
    short = make_dataset(TruncationConfig(max_source_positions=8))
    samples = [short[0], long[0], middle[0]]
    for sample, index in zip(samples, (7, 3, 5)):
        sample["id"] = index
        sample["target"] = torch.full((index,), index, dtype=torch.long)
    batch = long.collater(samples)
    batch["references"] = [f"reference {i}" for i in batch["id"].tolist()]
    ordered = MultiDocSummarizationDataset.sorted_by_source_length(batch)

    assert ordered["net_input"]["src_lengths"].tolist() == [18, 12, 8]
    order = [1, 2, 0]  # collated rows, longest source first
    assert ordered["id"].tolist() == [3, 5, 7]
    assert ordered["references"] == ["reference 3", "reference 5", "reference 7"]
    assert torch.equal(ordered["target"], batch["target"][order])
    for name, value in batch["net_input"].items():
        assert torch.equal(ordered["net_input"][name], value[order]), name
    assert set(ordered["net_input"]) == set(batch["net_input"])
    for row, index in enumerate(ordered["id"].tolist()):  # each row is still its own example's
        assert (ordered["target"][row].ne(long.dictionary.pad()).sum()) == index
    assert ordered["ntokens"] == batch["ntokens"] and ordered["nsentences"] == batch["nsentences"]


def test_sorted_batch_keeps_the_order_of_equal_lengths():
    ds = make_dataset(TruncationConfig(max_source_positions=100), examples=3)
    short = make_dataset(TruncationConfig(max_source_positions=8))[0]
    short["id"] = 3
    batch = ds.collater([short, ds[2], ds[0], ds[1]])
    assert batch["net_input"]["src_lengths"].tolist() == [8, 18, 18, 18]
    assert MultiDocSummarizationDataset.sorted_by_source_length(batch)["id"].tolist() == [2, 0, 1, 3]


def test_only_a_packed_rnn_encoder_reads_length_sorted_batches():
    from fairseq.models.lstm import LSTMEncoder
    from fairseq.models.transformer import TransformerEncoder

    from mdsfair.tasks.model_inputs import reads_length_sorted_batches

    class Model(torch.nn.Module):
        def __init__(self, encoder_class):
            super().__init__()
            self.encoder = encoder_class.__new__(encoder_class)

    assert reads_length_sorted_batches(Model(LSTMEncoder))
    assert not reads_length_sorted_batches(Model(TransformerEncoder))


def task_arguments(data_bin):
    # long enough that no synthetic cluster is cut, so a batch's sources differ in length
    return [
        data_bin,
        "--user-dir",
        USER_DIR,
        "--task",
        "multidoc_summarization",
        "--max-source-positions",
        "2048",
        "--max-target-positions",
        "128",
        "--cpu",
    ]


class RowEchoGenerator:
    """Answers each row of the batch it is given with that row's source and
    prefix, so a test sees which row each hypothesis was generated from."""

    def generate(self, models, sample, prefix_tokens=None, constraints=None):
        return [
            [{"tokens": sample["net_input"]["src_tokens"][row], "prefix": prefix_tokens[row]}]
            for row in range(sample["net_input"]["src_tokens"].size(0))
        ]


def test_generation_for_a_packed_rnn_returns_hypotheses_in_the_batch_order():
    from fairseq.models.lstm import LSTMEncoder

    from mdsfair.tasks.multidoc_summarization import MultiDocSummarizationTask

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = LSTMEncoder.__new__(LSTMEncoder)

    long = make_dataset(TruncationConfig(max_source_positions=100))
    short = make_dataset(TruncationConfig(max_source_positions=8))[0]
    middle = make_dataset(TruncationConfig(max_source_positions=12))[0]
    batch = long.collater([short, middle, long[0]])
    prefix_tokens = torch.tensor([[101], [102], [103]])  # not the references' first tokens
    task = MultiDocSummarizationTask.__new__(MultiDocSummarizationTask)
    hypotheses = task.inference_step(RowEchoGenerator(), [Model()], batch, prefix_tokens=prefix_tokens)
    for row, (best,) in enumerate(hypotheses):
        assert torch.equal(best["tokens"], batch["net_input"]["src_tokens"][row])
        assert torch.equal(best["prefix"], prefix_tokens[row])


@pytest.mark.slow
def test_stock_bidirectional_lstm_trains_and_generates(tmp_path):
    from mdsfair.data.indexed import NumpyMMapDataset
    from tests.utils import make_tiny_data_bin

    data_bin = make_tiny_data_bin(str(tmp_path / "data"))
    source = NumpyMMapDataset(os.path.join(data_bin, "test.source"))
    source_sizes = source.sizes.copy()  # a view would outlive the memory map
    del source
    assert source_sizes.max() < 2048 and len(set(source_sizes.tolist())) > 1
    log = fairseq_cli(
        "fairseq_cli.train",
        task_arguments(data_bin)
        + TINY_LSTM
        + ["--optimizer", "adam", "--lr", "3e-3", "--criterion", "cross_entropy", "--max-tokens", "4096"]
        + ["--max-update", "2", "--save-dir", str(tmp_path / "lstm"), "--no-epoch-checkpoints"]
        + ["--log-interval", "1", "--log-format", "simple", "--seed", "1"],
    )
    assert len(re.findall(r"train_inner", log)) == 2
    assert "done training" in log

    def generate(batch_size):
        return fairseq_cli(
            "fairseq_cli.generate",
            task_arguments(data_bin)
            + ["--path", str(tmp_path / "lstm" / "checkpoint_last.pt"), "--gen-subset", "test"]
            + ["--beam", "2", "--max-len-b", "10", "--batch-size", str(batch_size), "--post-process", "sentencepiece"],
        )

    out = generate(5)
    for kind in "HS":  # every example is generated once
        assert sorted(int(i) for i in re.findall(rf"^{kind}-(\d+)\t", out, flags=re.M)) == list(range(16)), kind
    # each id is printed with its own reference: the batch's id and target rows moved together
    printed = {int(i): text for i, text in re.findall(r"^T-(\d+)\t(.*)$", out, flags=re.M)}
    with open(os.path.join(data_bin, "test.summary.txt"), encoding="utf-8") as handle:
        references = handle.read().splitlines()
    assert printed == dict(enumerate(references))
    # and its own hypothesis: the same as when the example is generated alone
    hypotheses = dict(re.findall(r"^D-(\d+)\t\S+\t(.*)$", out, flags=re.M))
    assert hypotheses == dict(re.findall(r"^D-(\d+)\t\S+\t(.*)$", generate(1), flags=re.M))
