"""No cluster of a test or validation split is dropped by fairseq's size
filter: what ``--skip-invalid-size-inputs-valid-test`` would drop silently is
counted and refused, with the flag that makes the clusters fit instead."""

import os
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT, USER_DIR, hypothesis_lines, make_tiny_data_bin, short_training, tiny_transformer

pytestmark = pytest.mark.slow  # the slow tier: docs/tests.md

MODEL = tiny_transformer(embed_dim=16, ffn_embed_dim=16, attention_heads=2, share_all_embeddings=False)


def run(module, args):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    """A model trained with 64 source positions on clusters longer than that."""
    work = tmp_path_factory.mktemp("size_filter")
    data_bin = make_tiny_data_bin(str(work), train=8, valid=3, test=5)
    save_dir = str(work / "checkpoints")
    trained = run(
        "fairseq_cli.train",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            *MODEL,
            "--max-source-positions",
            "64",
            "--max-target-positions",
            "64",
            *short_training(save_dir, max_tokens=4096),
        ],
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    return data_bin, os.path.join(save_dir, "checkpoint_last.pt")


def generate(short_model, *flags):
    data_bin, checkpoint = short_model
    return run(
        "fairseq_cli.generate",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            "--path",
            checkpoint,
            "--gen-subset",
            "test",
            "--beam",
            "1",
            "--max-len-b",
            "5",
            "--cpu",
            "--batch-size",
            "2",
            *flags,
        ],
    )


@pytest.mark.parametrize("skip_flag", [False, True])
def test_too_long_test_clusters_are_counted_and_refused(short_model, skip_flag):
    result = generate(
        short_model, "--max-source-positions", "512", *(["--skip-invalid-size-inputs-valid-test"] if skip_flag else [])
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "test: 5 of 5 clusters do not fit (5 with a source above the model's limit of 64 tokens" in output
    assert "give --max-source-positions 64" in output
    if skip_flag:
        assert "so mdsfair refuses it for validation and test splits" in output
    else:
        assert "do not add --skip-invalid-size-inputs-valid-test" in output
    assert "skip this example with --skip-invalid-size-inputs-valid-test" not in output  # fairseq's advice


def test_the_advised_limit_generates_every_cluster(short_model):
    result = generate(short_model, "--max-source-positions", "64", "--skip-invalid-size-inputs-valid-test")
    assert result.returncode == 0, result.stderr[-3000:]
    hypotheses = hypothesis_lines(result.stdout)
    assert sorted(int(line.split("\t")[0][2:]) for line in hypotheses) == [0, 1, 2, 3, 4]
