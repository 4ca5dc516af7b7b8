"""docs/precision.md's table is the truth: every refusal it lists is run here
and stops with the message the page prints, and every fairseq-train /
mdsfair-train command line of the recipes uses only precision flags the table
accepts for that command on the device the line names.

The fast tier runs each refusal through the code that makes it (mdsfair-train's
argument check in a fresh process, the task's check on a config), with CUDA
reported present or absent as the table's column says; the slow tier runs the
CPU refusals of fairseq-train end to end on a tiny data-bin."""

import os
import re
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.utils import REPO_ROOT, tiny_transformer

PAGE = os.path.join(REPO_ROOT, "docs/precision.md")
PRECISION_FLAGS = ("--fp16", "--memory-efficient-fp16", "--amp", "--bf16", "--memory-efficient-bf16")
FAIRSEQ_TRAIN = "`fairseq-train --user-dir mdsfair`"
MDSFAIR_TRAIN = "`mdsfair-train`"
MDSFAIR_GENERATE = "`mdsfair-generate`"


def page_text():
    with open(PAGE, encoding="utf-8") as handle:
        return handle.read()


def table_rows():
    """(command, flag, {"cpu": cell, "gpu": cell}) for every row of the table."""
    table = re.search(r"<!-- precision-table -->\n(.*?)<!-- /precision-table -->", page_text(), flags=re.S).group(1)
    rows = []
    for line in table.strip().splitlines()[2:]:
        command, flag, cpu, gpu = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows.append((command, flag, {"cpu": cpu, "gpu": gpu}))
    return rows


def messages():
    """Refusal key -> the exact message the page prints under ``### `key```."""
    found = re.findall(r"^### `([a-z0-9-]+)`\n.*?```text\n(.*?)\n```", page_text(), flags=re.S | re.M)
    return dict(found)


def refusals():
    """(command, flag, device, key) of every refused cell."""
    out = []
    for command, flag, cells in table_rows():
        for device, cell in cells.items():
            match = re.match(r"refused: \[`([a-z0-9-]+)`\]", cell)
            if match:
                out.append((command, flag, device, match.group(1)))
    return out


def flags_of(flag_cell):
    return re.findall(r"--[a-z0-9-]+", flag_cell)


def normalized(text):
    return " ".join(text.split())


def test_page_messages_are_the_codes():
    from mdsfair.cli import GENERATION_PRECISION_IGNORED
    from mdsfair.tasks.training_setup import BF16_NEEDS_TPU, FP16_NEEDS_CUDA

    assert messages() == {
        "bf16-needs-tpu": BF16_NEEDS_TPU,
        "fp16-needs-cuda": FP16_NEEDS_CUDA,
        "generation-ignores": GENERATION_PRECISION_IGNORED,
    }
    assert {key for *_, key in refusals()} == set(messages())


def test_table_names_every_precision_flag_for_every_command():
    rows = {(command, flag) for command, flag, _ in table_rows()}
    for command in (FAIRSEQ_TRAIN, MDSFAIR_TRAIN, "`fairseq-generate --user-dir mdsfair`", MDSFAIR_GENERATE):
        for flag in PRECISION_FLAGS:
            assert (command, f"`{flag}`") in rows, (command, flag)


@pytest.mark.parametrize(
    "command, flag, device, key", [r for r in refusals() if r[0] in (MDSFAIR_TRAIN, MDSFAIR_GENERATE)]
)
def test_mdsfair_command_refusal(command, flag, device, key, tmp_path, capsys):
    """mdsfair-train and mdsfair-generate refuse before fairseq starts: one error
    line, exit 2. On the CPU column in a fresh process with CUDA reported absent;
    on the GPU column in this process with CUDA reported present."""
    prog = command.strip("`")
    entry = "train_main" if prog == "mdsfair-train" else "generate_main"
    argv = [str(tmp_path / "data-bin"), "--task", "multidoc_summarization", *flags_of(flag)]
    argv += ["--arch", "transformer"] if prog == "mdsfair-train" else ["--path", str(tmp_path / "model.pt")]
    message = messages()[key]
    if device == "cpu":
        code = (
            "import sys, torch\n"
            "torch.cuda.is_available = lambda: False\n"
            f"from mdsfair.cli import {entry}\n"
            f"{entry}(sys.argv[1:])\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, PYTHONPATH=REPO_ROOT),
        )
        assert result.returncode == 2, result.stderr[-2000:]
        stderr = result.stderr
        assert "Traceback" not in stderr
    else:
        import torch

        from mdsfair import cli

        check = cli.check_train_arguments if prog == "mdsfair-train" else cli.check_generation_arguments
        saved = torch.cuda.is_available
        torch.cuda.is_available = lambda: True
        try:
            with pytest.raises(SystemExit) as raised:
                check(argv)
        finally:
            torch.cuda.is_available = saved
        assert raised.value.code == 2
        stderr = capsys.readouterr().err
    assert stderr.startswith(f"{prog}: error: ")
    assert normalized(message) in normalized(stderr)


@pytest.mark.parametrize("command, flag, device, key", [r for r in refusals() if r[0] == FAIRSEQ_TRAIN])
def test_task_refusal(command, flag, device, key, monkeypatch):
    """The task's check (what fairseq-train --user-dir mdsfair runs when it builds
    the model) on the config fairseq parses from the flag, on the table's device."""
    import torch

    from mdsfair.tasks.training_setup import check_training_setup

    flag_set = set(flags_of(flag))
    bf16 = bool(flag_set & {"--bf16", "--memory-efficient-bf16"})
    memory_efficient = "--memory-efficient-fp16" in flag_set
    cfg = SimpleNamespace(
        bf16=bf16,
        tpu=bf16,  # fairseq's options.py: --bf16 sets --tpu
        fp16="--fp16" in flag_set or memory_efficient,
        memory_efficient_fp16=memory_efficient,
        cpu=device == "cpu",
        ddp_backend="pytorch_ddp",
        distributed_world_size=1,
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: device == "gpu")
    with pytest.raises(ValueError) as raised:
        check_training_setup(cfg)
    assert str(raised.value) == messages()[key]


@pytest.mark.parametrize(
    "command, flag, device",
    [
        (command, flag, device)
        for command, flag, cells in table_rows()
        if command in (FAIRSEQ_TRAIN, MDSFAIR_TRAIN)
        for device, cell in cells.items()
        if not cell.startswith("refused") and flags_of(flag)
    ],
)
def test_accepted_cells_are_not_refused(command, flag, device, monkeypatch):
    """What the table accepts passes both checks."""
    import torch

    from mdsfair import cli
    from mdsfair.tasks.training_setup import check_training_setup

    flag_set = set(flags_of(flag))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: device == "gpu")
    if command == MDSFAIR_TRAIN:
        cli.check_train_arguments(["data-bin", *flag_set] + (["--cpu"] if device == "cpu" else []))
        bf16_kept = cli.bf16_on_cuda(["data-bin", *flag_set], cuda_available=device == "gpu")
    else:
        bf16_kept = False
    bf16 = bool(flag_set & {"--bf16", "--memory-efficient-bf16"})
    memory_efficient = "--memory-efficient-fp16" in flag_set
    cfg = SimpleNamespace(
        bf16=bf16,
        tpu=bf16 and not bf16_kept,
        fp16="--fp16" in flag_set or memory_efficient,
        memory_efficient_fp16=memory_efficient,
        cpu=device == "cpu",
        ddp_backend="pytorch_ddp",
        distributed_world_size=1,
    )
    check_training_setup(cfg)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flag, key",
    [(flag, key) for command, flag, device, key in refusals() if command == FAIRSEQ_TRAIN and device == "cpu"],
)
def test_fairseq_train_refusal_end_to_end(flag, key, tmp_path):
    from tests.utils import make_tiny_data_bin

    data = make_tiny_data_bin(str(tmp_path / "bin"), train=8, valid=2, test=2)
    tiny = [
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
        "--disable-validation",
        "--no-progress-bar",
    ]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            data,
            "--user-dir",
            os.path.join(REPO_ROOT, "mdsfair"),
            *tiny,
            *flags_of(flag),
        ],
        cwd=tmp_path,  # fairseq-train writes a probe file into its --save-dir (default ./checkpoints) at start
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT),
    )
    assert result.returncode != 0
    assert normalized(messages()[key]) in normalized(result.stderr)
    assert "AssertionError: Torch not compiled with CUDA" not in result.stderr and "xla_device" not in result.stderr


def recipe_training_commands():
    """(file, command, argv) of every fairseq-train / mdsfair-train command line in
    the code blocks of the recipes and documentation pages."""
    paths = [
        os.path.join("examples", name, "README.md")
        for name in sorted(os.listdir(os.path.join(REPO_ROOT, "examples")))
        if os.path.isfile(os.path.join(REPO_ROOT, "examples", name, "README.md"))
    ]
    paths += [
        os.path.join("docs", name)
        for name in sorted(os.listdir(os.path.join(REPO_ROOT, "docs")))
        if name.endswith(".md")
    ]
    out = []
    for path in paths:
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as handle:
            text = handle.read()
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
            joined = block.replace("\\\n", " ")
            for line in joined.splitlines():
                line = line.split(" #")[0].strip()
                match = re.search(r"(fairseq-train|\$\(which mdsfair-train\)|mdsfair-train)\s", line)
                if not match:
                    continue
                text_of_command = line[match.start() :].replace("$(which mdsfair-train)", "mdsfair-train")
                try:
                    words = shlex.split(text_of_command)
                except ValueError:  # prose or a shell fragment with an open quote: whitespace words
                    words = text_of_command.split()
                out.append((path, words[0], words[1:]))
    return out


def test_recipes_find_their_training_commands():
    commands = recipe_training_commands()
    files = {path for path, _, _ in commands}
    assert {"examples/hierencdec/README.md", "examples/led/README.md", "examples/sparse_decoder/README.md"} <= files
    assert len(commands) >= 15


@pytest.mark.parametrize("path, command, argv", recipe_training_commands())
def test_recipe_uses_only_accepted_precision_flags(path, command, argv):
    table = {(row_command, row_flag): cells for row_command, row_flag, cells in table_rows()}
    key = FAIRSEQ_TRAIN if command == "fairseq-train" else MDSFAIR_TRAIN
    device = "cpu" if "--cpu" in argv else "gpu"
    for flag in PRECISION_FLAGS:
        if flag in argv:
            cell = table[(key, f"`{flag}`")][device]
            assert not cell.startswith("refused"), f"{path}: {command} {flag} on the {device}: {cell}"
