"""mdsfair-train / mdsfair-generate: fairseq's commands with mdsfair as user dir."""

import os
import sys

import pytest
import torch

from mdsfair import cli
from tests.utils import REPO_ROOT, hypothesis_lines, make_tiny_data_bin, tiny_transformer, train_in_process

TINY_TRANSFORMER_ARGS = [
    "--task",
    "multidoc_summarization",
    *tiny_transformer(share_all_embeddings=False),
    "--max-source-positions",
    "1024",
    "--max-target-positions",
    "1024",
]


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_tiny_data_bin(str(tmp_path_factory.mktemp("cli")), train=16, valid=4, test=4)


def test_with_user_dir_adds_the_package_path_once():
    assert cli.with_user_dir(["data-bin", "--arch", "transformer"]) == [
        "--user-dir",
        cli.USER_DIR,
        "data-bin",
        "--arch",
        "transformer",
    ]
    assert os.path.samefile(cli.USER_DIR, os.path.join(REPO_ROOT, "mdsfair"))
    given = ["data-bin", "--user-dir", "/elsewhere/mdsfair"]
    assert cli.with_user_dir(given) == given
    given_inline = ["data-bin", "--user-dir=/elsewhere/mdsfair"]
    assert cli.with_user_dir(given_inline) == given_inline


@pytest.fixture(scope="module")
def trained_with_wrapper(data_bin, tmp_path_factory):
    """mdsfair-train (in this process) for 2 updates; returns the checkpoint
    and sys.argv before and after."""
    save_dir = str(tmp_path_factory.mktemp("cli_checkpoints"))
    argv_before = list(sys.argv)
    checkpoint = train_in_process(data_bin, TINY_TRANSFORMER_ARGS, save_dir, updates=2)
    return {"checkpoint": checkpoint, "argv": (argv_before, list(sys.argv))}


def test_train_wrapper_trains(trained_with_wrapper):
    argv_before, argv_after = trained_with_wrapper["argv"]
    assert argv_after == argv_before
    state = torch.load(trained_with_wrapper["checkpoint"], map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 2
    assert state["cfg"]["task"]["_name"] == "multidoc_summarization"
    assert os.path.samefile(state["cfg"]["common"]["user_dir"], cli.USER_DIR)


def test_generate_wrapper_writes_hypotheses(data_bin, trained_with_wrapper, capsys):
    """mdsfair-generate writes one hypothesis per test cluster. (In a fresh
    process, where only the wrapper can point fairseq at mdsfair, see
    tests/test_hub.py::test_summaries_equal_mdsfair_generate.)"""
    cli.generate_main(
        [
            data_bin,
            "--task",
            "multidoc_summarization",
            "--gen-subset",
            "test",
            "--path",
            trained_with_wrapper["checkpoint"],
            "--beam",
            "2",
            "--max-len-b",
            "10",
            "--batch-size",
            "2",
            "--cpu",
        ]
    )
    hypotheses = hypothesis_lines(capsys.readouterr().out)
    assert sorted(int(line.split("\t")[0][2:]) for line in hypotheses) == [0, 1, 2, 3]
    assert all(len(line.split("\t")) == 3 for line in hypotheses)
