"""docs/own-data.md's five commands run as the page prints them, at a tiny
scale: the commands are read from the page itself (the bash block after its
``own-data-commands`` marker), so page and test cannot drift apart. Only the
sizes below are changed, each of which must appear in the block exactly once.
"""

import os
import re
import shutil
import subprocess

import pytest

from tests.utils import REPO_ROOT

PAGE = os.path.join(REPO_ROOT, "docs/own-data.md")

#: flag -> (the page's value, the tiny test's value): a 60-cluster corpus, a d-32 model, 4 updates
#: with a validation (and ROUGE) after updates 2 and 4, so checkpoint_best.pt is chosen by rouge_avg.
TINY_SCALE = {
    "--vocab-size": ("8000", "1000"),
    "--encoder-embed-dim": ("128", "32"),
    "--encoder-ffn-embed-dim": ("512", "64"),
    "--max-update": ("1200", "4"),
    "--save-interval-updates": ("300", "2"),
}


def page_block(page: str, opening: str) -> str:
    """The body of the first ```bash block of ``page`` after ``opening``."""
    start = page.index(opening)
    match = re.compile(r"```bash\n(.*?)```", flags=re.S).search(page, start)
    assert match is not None, f"no bash block after {opening!r} in {PAGE}"
    return match.group(1)


def at_tiny_scale(commands: str) -> str:
    for flag, (page_value, tiny_value) in TINY_SCALE.items():
        pattern = re.compile(rf"(?<=\s){re.escape(flag)}\s+{re.escape(page_value)}(?=\s)")
        found = pattern.findall(commands)
        assert len(found) == 1, f"{PAGE}: expected '{flag} {page_value}' once in the commands, found {found}"
        commands = pattern.sub(f"{flag} {tiny_value}", commands)
    return commands


def test_page_commands_block_has_five_commands():
    commands = page_block(open(PAGE, encoding="utf-8").read(), "<!-- own-data-commands")
    joined = re.sub(r"\\\n", " ", commands)
    programs = [line.split()[0] for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert programs == [
        "export",
        "mdsfair-preprocess",
        "mdsfair-train",
        "mdsfair-generate",
        "mdsfair-baseline",
        "mdsfair-compare",
    ]
    assert "--post-process sentencepiece" in joined  # hypotheses as text, not pieces


@pytest.mark.slow  # the slow tier: docs/tests.md
@pytest.mark.skipif(shutil.which("mdsfair-synth") is None, reason="console scripts not installed (pip install -e .)")
def test_own_data_page_runs_end_to_end(tmp_path):
    page = open(PAGE, encoding="utf-8").read()
    commands = at_tiny_scale(page_block(page, "<!-- own-data-commands"))
    synth = subprocess.run(
        ["mdsfair-synth", "--out-dir", "raw", "--seed", "1", "--train", "60", "--valid", "6", "--test", "6"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert synth.returncode == 0, synth.stderr

    result = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + commands],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1500,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )

    def tail(name):
        path = tmp_path / name
        return path.read_text(encoding="utf-8", errors="replace")[-3000:] if path.exists() else ""

    assert result.returncode == 0, (
        result.stdout[-3000:] + result.stderr[-3000:] + tail("train.log") + tail("generate.log")
    )
    assert (tmp_path / "checkpoints" / "checkpoint_best.pt").exists()
    train_log = (tmp_path / "train.log").read_text(encoding="utf-8")
    # checkpoint choice by validation ROUGE: fairseq logs the best value of the chosen metric
    assert re.search(r"\| valid \|.*\| rouge_avg [\d.]+ .*\| best_rouge_avg [\d.]+", train_log), train_log[-3000:]
    # the commands print none of fairseq's known third-party notices (mdsfair.cli.THIRD_PARTY_NOTICES)
    generate_log = (tmp_path / "generate.log").read_text(encoding="utf-8")
    assert not re.findall(r"^.*\w+Warning: .*$", train_log + generate_log, flags=re.M)
    # hypotheses are text (--post-process sentencepiece), not SentencePiece pieces
    hypotheses = [
        line.split("\t")[2]
        for line in (tmp_path / "generate.out").read_text(encoding="utf-8").splitlines()
        if line.startswith("D-")
    ]
    assert len(hypotheses) == 6 and not any("\u2581" in hypothesis for hypothesis in hypotheses)
    # the comparison table: the model's row and the baseline's
    rows = re.findall(r"^(model|lead)\s+\S+\s+yours\s+([\d.]+)", result.stdout, flags=re.M)
    assert [name for name, _ in rows] == ["model", "lead"], result.stdout
    assert (tmp_path / "scores.json").exists()

    # the page's way of following the training shows the loss and the validation ROUGE
    follow = subprocess.run(
        ["bash", "-c", page_block(page, "Follow the training in")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert follow.returncode == 0 and re.search(r"\| valid \|.* loss [\d.]+ .*rouge_avg", follow.stdout), follow.stdout
    assert re.search(r"\| train \|.* loss [\d.]+", follow.stdout), follow.stdout
