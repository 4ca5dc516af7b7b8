"""Issue 47, class 1 (generation): search flags that fairseq accepts but
cannot carry out are one ``mdsfair-generate: error:`` line before any model
loads (``--sampling`` with ``--beam`` > 1 but not ``--nbest`` = ``--beam``;
``--match-source-len``), and ``--prefix-size`` on a test cluster whose
summary is shorter than the prefix generates (the prefix kept to the
summary, the cluster named in a warning) with fairseq's generator and the
static one, instead of fairseq's "step < max_len" assertion and the static
generator's "ran past its length limit". A cluster the task's limits cannot
serve (more documents than ``--per-document-budget`` has positions, more
tokens than ``--max-tokens``) is one error line naming the split's ids file,
the line and the cluster id, not "example 8" in a traceback."""

import json
import logging
import os

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from mdsfair import cli
from mdsfair.argument_types import UsageError
from mdsfair.data.multidoc_dataset import MultiDocSummarizationDataset
from mdsfair.data.source_truncation import TruncationConfig
from mdsfair.generation.sequence_generator import GenerationSettingsError, check_generation_settings
from mdsfair.generation.settings_checks import prefix_within_summaries, search_flags_refusal
from tests.utils import generation_command, hypothesis_lines, make_tiny_data_bin, tiny_transformer, train_in_process


def test_class_1_sampling_needs_nbest_equal_to_beam():
    assert "give --nbest 4" in search_flags_refusal(True, 4, 1, False)
    assert search_flags_refusal(True, 4, 4, False) is None  # fairseq-generate prints the 4 samples
    assert search_flags_refusal(True, 4, None, False) is None  # the hub returns the best sample itself
    assert search_flags_refusal(False, 4, 1, False) is None
    with pytest.raises(GenerationSettingsError, match="--sampling with --beam 3"):
        check_generation_settings(3, 1, 0, 200, sampling=True, nbest=1)


def test_class_1_match_source_len_is_refused_with_the_reason():
    with pytest.raises(GenerationSettingsError, match="--match-source-len makes every output exactly as long"):
        check_generation_settings(4, 1, 0, 200, match_source_len=True)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--sampling", "--beam", "4"], "--sampling with --beam 4 draws 4 samples per cluster"),
        (["--match-source-len"], "--match-source-len makes every output exactly as long as its source"),
    ],
)
def test_class_1_mdsfair_generate_refuses_search_flags_before_loading(tmp_path, capsys, flags, message):
    # neither the data-bin nor the checkpoint exists: the refusal comes first
    with pytest.raises(SystemExit) as exited:
        cli.generate_main([str(tmp_path / "no-data-bin"), "--path", str(tmp_path / "none.pt"), *flags])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mdsfair-generate: error: ") and message in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "main, prog, flag",
    [(cli.generate_main, "mdsfair-generate", "--results-path"), (cli.train_main, "mdsfair-train", "--save-dir")],
)
@pytest.mark.parametrize("under_a_file", [False, True])
def test_class_1_an_output_folder_that_is_a_file_is_refused_before_loading(
    tmp_path, capsys, main, prog, flag, under_a_file
):
    """A folder flag naming a file (or a path under one) is one line naming
    the flag and the path, before any data-bin or checkpoint is read (it
    read "afile: File exists" after the model had loaded)."""
    a_file = tmp_path / "afile"
    a_file.write_text("not a folder\n")
    folder = a_file / "inner" if under_a_file else a_file
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path / "no-data-bin"), "--path", str(tmp_path / "none.pt"), flag, str(folder)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: {flag} {folder}: "), err
    assert ("is a file, not a folder" if not under_a_file else f"{a_file} is not a folder") in lines[0]
    assert a_file.read_text() == "not a folder\n"


def test_class_1_prefix_is_kept_within_each_summary(caplog):
    eos, pad = 2, 1
    prefix = torch.tensor([[5, 6, 7], [2, 1, 1], [8, 2, 1]])
    with caplog.at_level(logging.WARNING, logger="mdsfair.generation.settings_checks"):
        kept = prefix_within_summaries(prefix, eos, pad, ids=[10, 11, 12])
    assert kept.tolist() == [[5, 6, 7], [1, 1, 1], [8, 1, 1]]
    assert "2 cluster(s) (S-11, S-12) have a summary shorter than --prefix-size 3" in caplog.text
    full = torch.tensor([[5, 6], [7, 8]])
    assert prefix_within_summaries(full, eos, pad) is full  # nothing to keep: the same tensor, no warning


TINY_TRANSFORMER = [
    "--task",
    "multidoc_summarization",
    *tiny_transformer(embed_dim=16, ffn_embed_dim=16, attention_heads=2, share_all_embeddings=False),
]


@pytest.fixture(scope="module")
def empty_summary_run(tmp_path_factory):
    """A tiny transformer trained one update, and a test split (same
    dictionary) whose second cluster has an empty summary."""
    from mdsfair.preprocess.binarize import run

    work = tmp_path_factory.mktemp("empty_summary")
    data_bin = make_tiny_data_bin(str(work), train=8, valid=2, test=3)
    raw = work / "raw_empty"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        with open(work / "raw" / f"{split}.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        if split == "test":
            rows[1]["summary"] = ""
        with open(raw / f"{split}.jsonl", "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(row) + "\n" for row in rows))
    empty_bin = str(work / "data-bin-empty")
    run(
        [
            "--input-dir",
            str(raw),
            "--destdir",
            empty_bin,
            "--spm-model",
            os.path.join(data_bin, "spm.model"),
            "--dict",
            os.path.join(data_bin, "dict.txt"),
            "--no-progress-bar",
        ]
    )
    return empty_bin, train_in_process(data_bin, TINY_TRANSFORMER, str(work / "checkpoints"))


@pytest.mark.parametrize("generator", [[], ["--fairseq-generator"]], ids=["static", "fairseq"])
def test_class_1_prefix_size_on_an_empty_summary_generates(empty_summary_run, capsys, caplog, generator):
    data_bin, checkpoint = empty_summary_run
    with caplog.at_level(logging.WARNING, logger="mdsfair.generation.settings_checks"):
        cli.generate_main(
            generation_command(
                data_bin, checkpoint, "--prefix-size", "1", "--max-len-b", "6", *generator, beam=3, batch_size=3
            )
        )
    hypotheses = hypothesis_lines(capsys.readouterr().out)
    assert sorted(int(line.split("\t")[0][2:]) for line in hypotheses) == [0, 1, 2]
    assert "(S-1) have a summary shorter than --prefix-size 1" in caplog.text


def three_cluster_dataset(truncation, cluster_ids_file=None):
    """Clusters of 1, 4 and 2 documents of 3 tokens each (no targets)."""
    dictionary = Dictionary()
    documents = (1, 4, 2)
    doc = [np.repeat(np.arange(n), 3) for n in documents]
    tokens = [np.full(len(ids), dictionary.unk()) for ids in doc]
    structure = {"doc": doc, "para": doc, "sent": doc}
    return MultiDocSummarizationDataset(
        tokens, None, structure, dictionary, truncation, name="bin/test", cluster_ids_file=cluster_ids_file
    )


def test_class_1_a_cluster_beyond_the_per_document_budget_is_named_by_its_id(tmp_path):
    """Class 1: library errors reach users as tracebacks. A budget of 4
    positions leaves the 4-document cluster (line 2 of the ids file) no
    token per document: the error names the file, line and cluster id and
    both flags, and is a UsageError (one line from mdsfair-generate)."""
    ids = tmp_path / "test.ids.txt"
    ids.write_text("first\nsite-42/2019\nthird\n", encoding="utf-8")
    budget = TruncationConfig(max_source_positions=4, per_document_budget=True)
    with pytest.raises(UsageError) as refused:
        three_cluster_dataset(budget, cluster_ids_file=str(ids))
    message = str(refused.value)
    assert message.startswith(f"{ids}:2: cluster 'site-42/2019': --per-document-budget: 4 documents leave no tokens")
    assert "--max-source-positions" in message and "--max-documents" in message
    with pytest.raises(UsageError, match=r"^bin/test: cluster 1: --per-document-budget"):
        three_cluster_dataset(budget)  # no ids file (the hub's clusters): the index in the order given


def test_class_1_a_cluster_above_max_tokens_is_named_by_its_id(tmp_path):
    """Class 1: --max-tokens below a cluster's length names the cluster, not
    its index in the dataset."""
    ids = tmp_path / "test.ids.txt"
    ids.write_text("first\nsecond\nthird\n", encoding="utf-8")
    dataset = three_cluster_dataset(TruncationConfig(max_source_positions=100), cluster_ids_file=str(ids))
    with pytest.raises(UsageError, match=rf"^{ids}:2: cluster 'second': 17 tokens, more than --max-tokens 10"):
        dataset.batch_by_size(dataset.ordered_indices(), max_tokens=10)


def test_class_1_mdsfair_generate_names_the_cluster_the_budget_cannot_serve(empty_summary_run, capsys):
    """Class 1 through mdsfair-generate: --per-document-budget with fewer
    positions than the test cluster has documents is one error line naming
    the split's ids file, line 1 and the cluster's id."""
    data_bin, checkpoint = empty_summary_run
    with open(os.path.join(data_bin, "test.ids.txt"), encoding="utf-8") as ids:
        first_id = ids.readline().rstrip("\n")
    argv = [data_bin, "--task", "multidoc_summarization", "--gen-subset", "test", "--path", checkpoint, "--cpu"]
    with pytest.raises(SystemExit) as exited:
        cli.generate_main(argv + ["--per-document-budget", "--max-source-positions", "2"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mdsfair-generate: error: ") and last.endswith("raise --max-source-positions"), last
    assert f"test.ids.txt:1: cluster {first_id!r}: --per-document-budget: " in last, last
