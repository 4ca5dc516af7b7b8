"""Shared test fixtures: tiny data-bin directories and tiny checkpoints.

Everything here is small enough for CPU tests (seconds) and built from the
project's own pipeline, so tests exercise the real code paths.
"""

import hashlib
import os
import re
import subprocess
import sys
from typing import Dict, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO_ROOT, "mdsfair")


def _shared_data() -> str:
    """``../shared/data`` of the checkout, or of the nearest ancestor that has
    one (a git worktree may lie a level deeper than the main checkout)."""
    directory = REPO_ROOT
    while True:
        parent = os.path.dirname(directory)
        candidate = os.path.join(parent, "shared", "data")
        if os.path.isdir(candidate) or parent == directory:
            return candidate if os.path.isdir(candidate) else os.path.join(os.path.dirname(REPO_ROOT), "shared", "data")
        directory = parent


SHARED_DATA = _shared_data()


def paper_text(name: str) -> str:
    """The text of ``../shared/papers/NAME`` with every run of whitespace made one
    space (the line breaks of the PDF's text gone), so that a sentence is found
    whole; the calling test is skipped where the papers are not available."""
    import pytest

    path = os.path.join(os.path.dirname(SHARED_DATA), "papers", name)
    if not os.path.isfile(path):
        pytest.skip("../shared/papers not available")
    with open(path, encoding="utf-8") as handle:
        return " ".join(handle.read().split())


#: Where ``fetch github:OWNER/NAME`` leaves its snapshots (``OWNER+NAME/repo``, a git directory).
MIRRORS = os.environ.get("MDSFAIR_MIRRORS", "/work/.mirror")


def authors_source(repository: str, path: str, git_dir: Optional[str] = None) -> str:
    """The text of ``path`` at HEAD of a local snapshot of the GitHub
    repository ``OWNER/NAME``: the git directory ``git_dir``, else the one
    ``fetch`` leaves under :data:`MIRRORS`; the calling test is skipped where
    there is none (the authors' repositories state no licence, so the tests
    read them there instead of copying them)."""
    import pytest

    if git_dir is None:
        folder = os.path.join(MIRRORS, repository.replace("/", "+"), "repo")
        git_dir = os.path.join(folder, ".git") if os.path.isdir(os.path.join(folder, ".git")) else folder
    if not os.path.isdir(git_dir):
        pytest.skip(f"no snapshot of {repository} at {git_dir}")
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout


def make_synthetic_jsonl(out_dir: str, train: int = 64, valid: int = 16, test: int = 16, seed: int = 1, **options):
    """Write a small synthetic data set (raw JSONL contract) into ``out_dir``."""
    from mdsfair.preprocess.synthetic import write_dataset

    write_dataset(out_dir, seed=seed, train=train, valid=valid, test=test, **options)
    return out_dir


def make_tiny_data_bin(
    work_dir: str,
    train: int = 64,
    valid: int = 16,
    test: int = 16,
    vocab_size: int = 400,
    extra_args: Optional[List[str]] = None,
    seed: int = 1,
    **synth_options,
) -> str:
    """Synthesize clusters and preprocess them into ``work_dir/data-bin``
    (SentencePiece vocabulary of about ``vocab_size`` pieces)."""
    from mdsfair.preprocess.binarize import run

    raw = make_synthetic_jsonl(os.path.join(work_dir, "raw"), train, valid, test, seed=seed, **synth_options)
    dest = os.path.join(work_dir, "data-bin")
    run(
        ["--input-dir", raw, "--destdir", dest, "--vocab-size", str(vocab_size), "--no-progress-bar"]
        + (extra_args or [])
    )
    return dest


def run_python(arguments: List[str], cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python ARGUMENTS`` in a fresh process, as a user runs mdsfair's
    commands: this checkout first on the path, one intra-op thread, and
    ``MDSFAIR_TRUST_CHECKPOINTS`` unset (checkpoints are verified)."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    env.pop("MDSFAIR_TRUST_CHECKPOINTS", None)
    return subprocess.run(
        [sys.executable, *arguments], cwd=str(cwd), capture_output=True, text=True, env=env, timeout=timeout
    )


def fairseq_cli(module: str, args: List[str], cwd: Optional[str] = None, timeout: int = 600) -> str:
    """Run a fairseq command-line entry (``fairseq_cli.train`` ...) in a
    subprocess with mdsfair as user dir; returns its combined output and
    raises with that output when it fails."""
    command = [sys.executable, "-m", module] + args
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(command, cwd=cwd or REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{output[-6000:]}")
    return output


def generate_in_process(args: List[str], results_dir: str) -> str:
    """fairseq-generate's ``main`` in this process (a test module has already
    paid for importing torch and fairseq); returns what it writes."""
    from fairseq import options
    from fairseq_cli.generate import main as generate_main

    parsed = options.parse_args_and_arch(options.get_generation_parser(), args + ["--results-path", results_dir])
    generate_main(parsed)
    with open(os.path.join(results_dir, f"generate-{parsed.gen_subset}.txt"), encoding="utf-8") as f:
        return f.read()


TINY_BART_ARGS = [
    "--arch",
    "bart_base",
    "--encoder-layers",
    "2",
    "--decoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--decoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--decoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--max-source-positions",
    "1024",
    "--max-target-positions",
    "1024",
]


def make_tiny_bart_checkpoint(
    data_bin: str, save_dir: str, updates: int = 1, extra_args: Optional[List[str]] = None
) -> str:
    """Train fairseq's own ``bart`` model (tiny dims) for ``updates`` steps on
    ``data_bin`` and return the path of the fairseq checkpoint it saved: a
    real BART checkpoint to restore derived architectures from."""
    fairseq_cli(
        "fairseq_cli.train",
        [
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "multidoc_summarization",
            *TINY_BART_ARGS,
            *short_training(save_dir, updates, max_tokens=4096),
            *(extra_args or []),
        ],
    )
    return os.path.join(save_dir, "checkpoint_last.pt")


def tiny_transformer(
    embed_dim: int = 32, ffn_embed_dim: int = 64, attention_heads: int = 4, share_all_embeddings: bool = True
) -> List[str]:
    """fairseq's ``transformer`` architecture, one encoder and one decoder
    layer of the given widths: the model flags (from ``--arch``) of a test
    training that takes seconds on a CPU."""
    widths = []
    for side in ("encoder", "decoder"):
        widths += [f"--{side}-embed-dim", str(embed_dim)]
    for side in ("encoder", "decoder"):
        widths += [f"--{side}-ffn-embed-dim", str(ffn_embed_dim)]
    for side in ("encoder", "decoder"):
        widths += [f"--{side}-attention-heads", str(attention_heads)]
    return [
        "--arch",
        "transformer",
        "--encoder-layers",
        "1",
        "--decoder-layers",
        "1",
        *widths,
        *(["--share-all-embeddings"] if share_all_embeddings else []),
    ]


TINY_TRANSFORMER_ARGS = [
    "--task",
    "multidoc_summarization",
    *tiny_transformer(),
    "--max-source-positions",
    "1024",
    "--max-target-positions",
    "1024",
]


def short_training(save_dir: str, updates: int = 1, batch_size: int = 4, max_tokens: Optional[int] = None) -> List[str]:
    """The optimizer and checkpoint flags of a test training: Adam at 1e-3
    for ``updates`` updates of ``batch_size`` clusters (or, given
    ``max_tokens``, of at most that many tokens) on the CPU, seed 1, only
    ``checkpoint_last.pt`` (and ``checkpoint_best.pt``) saved into
    ``save_dir``, no validation."""
    batches = ["--max-sentences", str(batch_size)] if max_tokens is None else ["--max-tokens", str(max_tokens)]
    return [
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        *batches,
        "--max-update",
        str(updates),
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--no-progress-bar",
        "--cpu",
        "--seed",
        "1",
        "--disable-validation",
    ]


def train_in_process(data_bin: str, model_args: List[str], save_dir: str, updates: int = 1) -> str:
    """mdsfair-train's ``main`` in this process on ``data_bin`` with the
    model flags ``model_args`` (task included) and :func:`short_training`;
    returns the path of the ``checkpoint_last.pt`` it saved."""
    from mdsfair import cli

    cli.train_main([data_bin, *model_args, *short_training(save_dir, updates)])
    return os.path.join(save_dir, "checkpoint_last.pt")


def one_update_hub_model(data_bin: str, save_dir: str):
    """A stock transformer trained for one update on ``data_bin`` and loaded
    through torch.hub (the hub's encoding reads the data-bin, not the weights)."""
    import torch

    fairseq_cli(
        "fairseq_cli.train", [data_bin, "--user-dir", USER_DIR, *TINY_TRANSFORMER_ARGS, *short_training(save_dir)]
    )
    return torch.hub.load(
        REPO_ROOT,
        "transformer",
        model_dir=save_dir,
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=data_bin,
        source="local",
    )


def snapshot(folder: str) -> Dict[str, str]:
    """Everything under ``folder``: ``{relative path: sha256 of the file}``,
    and ``{relative path + "/": "dir"}`` for each sub-folder; equal snapshots
    before and after a command mean it left the folder as it was."""
    listing = {}
    for root, directories, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                listing[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
        for name in directories:
            listing[os.path.relpath(os.path.join(root, name), folder) + "/"] = "dir"
    return listing


def generation_command(data_bin: str, checkpoint: str, *flags: str, beam: int = 1, batch_size: int = 2) -> List[str]:
    """A generation command line (mdsfair-generate's, or fairseq-generate's
    with ``--user-dir``): beam search of width ``beam`` over the test split
    of ``data_bin`` with ``checkpoint``, ``batch_size`` clusters a batch, on
    the CPU, and ``flags``."""
    return [
        data_bin,
        "--task",
        "multidoc_summarization",
        "--gen-subset",
        "test",
        "--path",
        checkpoint,
        "--beam",
        str(beam),
        "--batch-size",
        str(batch_size),
        "--cpu",
        *flags,
    ]


def hypothesis_lines(output: str) -> List[str]:
    """The ``H-<id>\t<score>\t<text>`` lines of a fairseq-generate output
    (its stdout or its ``generate-<split>.txt``), in the order written."""
    return [line for line in output.splitlines() if line.startswith("H-")]


#: A line of mdsfair's and fairseq's logging format (``2024-01-01 12:00:00,000 | INFO | ...``).
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \| [A-Z]+ \| ")


def message_lines(err: str) -> List[str]:
    """stderr's lines less log lines and argparse's usage block (``usage:``
    and its indented continuation lines, which argparse prints before its
    error line)."""
    lines, in_usage = [], False
    for line in err.splitlines():
        if line.startswith("usage: "):
            in_usage = True
            continue
        if in_usage and (line.startswith(" ") or not line.strip()):
            continue
        in_usage = False
        if line.strip() and not LOG_LINE.match(line):
            lines.append(line)
    return lines


def model_on_dictionary(arch: str, dictionary, **flags):
    """The model of ``arch`` built on ``dictionary`` (source = target, no
    data-bin), seeded (0), in float64 and eval mode. The flags are parsed as
    fairseq-train's model group parses them (unset flags absent, so the
    architecture fills them), then ``flags`` override them."""
    import argparse
    from types import SimpleNamespace

    import torch
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    import mdsfair

    mdsfair.register()
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    args = parser.parse_args([])
    vars(args).update(flags)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task).double().eval()


# --- a toy multi-document dataset (3 documents, 5 paragraphs, 8 sentences) ---


def toy_dictionary():
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(50):
        d.add_symbol(f"w{i}")
    return d


def toy_example():
    """3 documents; paragraphs 0,1 | 2 | 3,4; tokens 100.. so positions are visible."""
    import numpy as np

    doc = np.array([0] * 6 + [1] * 3 + [2] * 5)
    para = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4])
    sent = np.array([0, 0, 1, 2, 2, 2, 3, 3, 4, 5, 5, 6, 6, 7])
    tokens = np.arange(10, 10 + len(doc))
    return tokens, doc, para, sent


def make_dataset(truncation, side_data=None, examples=1):
    """The toy example (:func:`toy_example`) ``examples`` times, with the summary 5 6 7."""
    import numpy as np

    from mdsfair.data.multidoc_dataset import MultiDocSummarizationDataset

    tokens, doc, para, sent = toy_example()
    structure = {"doc": [doc] * examples, "para": [para] * examples, "sent": [sent] * examples}
    return MultiDocSummarizationDataset(
        [tokens] * examples,
        [np.array([5, 6, 7])] * examples,
        structure,
        toy_dictionary(),
        truncation,
        side_data=side_data,
        name="toy",
    )


def scheduler_from(argv: List[str]):
    """The learning-rate scheduler fairseq-train builds from a recipe's
    ``argv`` (``--user-dir`` pointed at this checkout), on one dummy parameter:
    ``step_update(s)`` then gives the recipe's rate at update ``s``."""
    import torch
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim import build_optimizer
    from fairseq.optim.lr_scheduler import build_lr_scheduler

    argv = [USER_DIR if previous == "--user-dir" else value for previous, value in zip([None] + argv, argv)]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    optimizer = build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    return build_lr_scheduler(cfg.lr_scheduler, optimizer)
