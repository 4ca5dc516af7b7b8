"""Beam-search flags that cannot work are refused with a plain message before
any model loads, and a data-bin path with ':' is not split silently."""

import os
import subprocess
import sys

import pytest

from mdsfair.generation.sequence_generator import GenerationSettingsError, check_generation_settings
from tests.utils import REPO_ROOT, tiny_transformer


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--beam", "0"], "--beam (beam=) must be at least 1, got 0"),
        (["--beam", "-3"], "must be at least 1, got -3"),
        (["--max-len-b", "0"], "--max-len-b 0 with --max-len-a 0 allows no output token"),
        (["--max-len-b", "5", "--min-len", "10"], "--min-len 10 is above the length limit --max-len-b 5"),
    ],
)
def test_mdsfair_generate_refuses_before_loading_anything(tmp_path, flags, message):
    # the checkpoint and the data-bin do not exist: the refusal must come first
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [
        sys.executable,
        "-c",
        "from mdsfair.cli import generate_main; generate_main()",
        str(tmp_path / "no-data-bin"),
        "--path",
        str(tmp_path / "none.pt"),
        *flags,
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_generator_and_hub_settings_are_checked_in_process():
    with pytest.raises(GenerationSettingsError, match="beam"):
        check_generation_settings(-1, 1, 0, 200)
    check_generation_settings(1, 1, 0, 1)  # the smallest settings that work
    check_generation_settings(4, 50, 1.5, 0)  # a length limit that grows with the source


def test_data_directory_with_colon_is_refused_not_split(tmp_path):
    from mdsfair.tasks.data_paths import check_data_paths, data_bin_folders

    data = tmp_path / "runs:2026"
    data.mkdir()
    with pytest.raises(ValueError) as raised:
        check_data_paths(str(data), data_bin_folders(str(data)))
    assert "epoch shards" in str(raised.value) and "symbolic link" in str(raised.value)
    check_data_paths(str(tmp_path), [str(tmp_path)])  # a plain directory passes
    # fairseq's shard list: split at os.pathsep, in order, empty pieces dropped
    assert data_bin_folders(os.pathsep.join(["b", "", "a", ""])) == ["b", "a"]


TINY_TRAIN = [
    "--task",
    "multidoc_summarization",
    *tiny_transformer(embed_dim=16, ffn_embed_dim=16, attention_heads=2, share_all_embeddings=False),
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "2048",
    "--max-update",
    "1",
    "--no-save",
    "--cpu",
    "--bf16",
    "--disable-validation",
    "--no-progress-bar",
]


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    from tests.utils import make_tiny_data_bin

    return make_tiny_data_bin(str(tmp_path_factory.mktemp("bf16")), train=8, valid=2, test=2)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["mdsfair-train", "fairseq-train"])
def test_cpu_bf16_stops_with_what_to_use_instead(tiny_bin, tmp_path, entry):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if entry == "mdsfair-train":
        command = [sys.executable, "-c", "from mdsfair.cli import train_main; train_main()", tiny_bin]
    else:
        command = [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            tiny_bin,
            "--user-dir",
            os.path.join(REPO_ROOT, "mdsfair"),
        ]
    result = subprocess.run(
        command + TINY_TRAIN + ["--save-dir", str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode != 0
    assert "drop --bf16" in result.stderr and "--fp16" in result.stderr
    assert "xla_device" not in result.stderr
    if entry == "mdsfair-train":
        assert "Traceback" not in result.stderr


def test_negative_lengths_are_refused_by_name():
    """fairseq parses --min-len and --max-len-a with no range; a negative
    one is refused naming the flag (issue 34.4: every numeric flag)."""
    with pytest.raises(GenerationSettingsError, match="--min-len"):
        check_generation_settings(4, -1, 0, 200)
    with pytest.raises(GenerationSettingsError, match="--max-len-a"):
        check_generation_settings(4, 1, -0.5, 200)
