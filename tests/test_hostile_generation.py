"""Issue 47, class 1 (generation): search flags that fairseq accepts but
cannot carry out are one ``mdsfair-generate: error:`` line before any model
loads (``--sampling`` with ``--beam`` > 1 but not ``--nbest`` = ``--beam``;
``--match-source-len``), and ``--prefix-size`` on a test cluster whose
summary is shorter than the prefix generates (the prefix kept to the
summary, the cluster named in a warning) with fairseq's generator and the
static one, instead of fairseq's "step < max_len" assertion and the static
generator's "ran past its length limit"."""

import json
import logging
import os

import pytest
import torch

from mdsfair import cli
from mdsfair.generation.sequence_generator import GenerationSettingsError, check_generation_settings
from mdsfair.generation.settings_checks import prefix_within_summaries, search_flags_refusal
from tests.utils import make_tiny_data_bin


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
    "--arch",
    "transformer",
    "--encoder-layers",
    "1",
    "--decoder-layers",
    "1",
    "--encoder-embed-dim",
    "16",
    "--decoder-embed-dim",
    "16",
    "--encoder-ffn-embed-dim",
    "16",
    "--decoder-ffn-embed-dim",
    "16",
    "--encoder-attention-heads",
    "2",
    "--decoder-attention-heads",
    "2",
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
    save_dir = str(work / "checkpoints")
    cli.train_main(
        [
            data_bin,
            *TINY_TRANSFORMER,
            "--optimizer",
            "adam",
            "--lr",
            "1e-3",
            "--max-sentences",
            "4",
            "--max-update",
            "1",
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--no-progress-bar",
            "--cpu",
            "--seed",
            "1",
            "--disable-validation",
        ]
    )
    return empty_bin, os.path.join(save_dir, "checkpoint_last.pt")


@pytest.mark.parametrize("generator", [[], ["--fairseq-generator"]], ids=["static", "fairseq"])
def test_class_1_prefix_size_on_an_empty_summary_generates(empty_summary_run, capsys, caplog, generator):
    data_bin, checkpoint = empty_summary_run
    with caplog.at_level(logging.WARNING, logger="mdsfair.generation.settings_checks"):
        cli.generate_main(
            [
                data_bin,
                "--task",
                "multidoc_summarization",
                "--gen-subset",
                "test",
                "--path",
                checkpoint,
                "--beam",
                "3",
                "--prefix-size",
                "1",
                "--max-len-b",
                "6",
                "--batch-size",
                "3",
                "--cpu",
                *generator,
            ]
        )
    hypotheses = [line for line in capsys.readouterr().out.splitlines() if line.startswith("H-")]
    assert sorted(int(line.split("\t")[0][2:]) for line in hypotheses) == [0, 1, 2]
    assert "(S-1) have a summary shorter than --prefix-size 1" in caplog.text
