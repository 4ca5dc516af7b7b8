"""Every console script, a table of bad values (issue 34 item 4, "fix the
class"): each row runs the script's entry point (setup.py's
``console_scripts``) in this process with a bad value and asserts exactly
one ``PROG: error: ...`` line on stderr (besides argparse's usage block
before a parser's error line, and log lines in the logging format, which
mdsfair-preprocess writes to stderr before it fails), a
non-zero exit status and nothing written in the working folder. A console
script added to setup.py without rows here fails
:func:`test_every_console_script_has_rows`.

Rows marked ``parse`` fail in the parser (argparse's exit status 2); the
others fail later, on the value's consequence, with status 1.
"""

import importlib
import os
import re

import pytest

from tests.utils import REPO_ROOT, message_lines


def console_scripts():
    """``{name: "module:function"}`` from setup.py (read as text: running
    setup.py would run setuptools)."""
    with open(os.path.join(REPO_ROOT, "setup.py"), encoding="utf-8") as handle:
        text = handle.read()
    block = re.search(r'"console_scripts":\s*\[(.*?)\]', text, re.S).group(1)
    return dict(re.findall(r'"\s*([\w-]+)\s*=\s*([\w.]+:\w+)\s*"', block))


# (script, argv, the text the error line must hold). DATA and PATH name files
# that need not exist: the value is refused before any is read.
TRAIN = [
    "DATA",
    "--task",
    "multidoc_summarization",
    "--cpu",
    "--optimizer",
    "adam",
    "--lr",
    "1e-4",
    "--max-tokens",
    "512",
    "--no-progress-bar",
    "--save-dir",
    "ckpt",
]
ROWS = [
    (
        "mdsfair-preprocess",
        ["--split", "train=raw.jsonl", "--destdir", "out", "--vocab-size", "0"],
        "argument --vocab-size: must be at least 1, got 0",
    ),
    (
        "mdsfair-preprocess",
        ["--split", "train=raw.jsonl", "--destdir", "out", "--chunk-size", "-1"],
        "argument --chunk-size: must be at least 1, got -1",
    ),
    (
        "mdsfair-preprocess",
        ["--split", "train=raw.jsonl", "--destdir", "out", "--workers", "two"],
        "argument --workers: expected an integer, got 'two'",
    ),
    # not parser errors: the value's consequence, refused in one line
    (
        "mdsfair-preprocess",
        ["--split", "train=raw.jsonl", "--destdir", "out", "--vocab-size", "3"],
        "--vocab-size 3 is below the",
    ),
    (
        "mdsfair-preprocess",
        ["--split", "train=raw.jsonl", "--destdir", "dangling"],
        "--destdir dangling is a symbolic link to nowhere, which does not exist",
    ),
    ("mdsfair-preprocess", ["--split", "train=raw.jsonl", "--destdir", "UNWRITABLE"], "UNWRITABLE: "),
    (
        "mdsfair-convert",
        ["wcep", "in.jsonl", "-o", "out", "--max-articles", "0"],
        "argument --max-articles: must be at least 1, got 0",
    ),
    (
        "mdsfair-convert",
        ["govreport", "in", "-o", "out", "--section-depth", "0"],
        "argument --section-depth: must be at least 1, got 0",
    ),
    (
        "mdsfair-rank",
        ["--input", "in.jsonl", "--output", "out.jsonl", "--max-paragraphs", "0"],
        "argument --max-paragraphs: must be at least 1, got 0",
    ),
    (
        "mdsfair-rank",
        ["--input", "in.jsonl", "--evaluate", "--top", "5", "-1"],
        "argument --top: must be at least 1, got -1",
    ),
    # user errors past the parser: a missing input, an unwritable output (one line, not a traceback)
    (
        "mdsfair-rank",
        ["--input", "nothere.jsonl", "--output", "out.jsonl", "--method", "tfidf"],
        "nothere.jsonl: No such file or directory",
    ),
    ("mdsfair-synth", ["--out-dir", "UNWRITABLE", "--train", "1", "--valid", "0", "--test", "0"], "UNWRITABLE: "),
    ("mdsfair-page-importance", ["--checkpoint", "m.pt", "--data", "DATA", "--output-dir", "out"], "m.pt"),
    (
        "mdsfair-analyze-attention",
        ["--checkpoint", "m.pt", "--data", "DATA", "--output-dir", "out"],
        "checkpoint not found: m.pt",
    ),
    ("mdsfair-synth", ["--out-dir", "out", "--test", "-1"], "argument --test: must be at least 0, got -1"),
    ("mdsfair-synth", ["--out-dir", "out", "--min-facts", "0"], "argument --min-facts: must be at least 1, got 0"),
    (
        "mdsfair-synth",
        ["--out-dir", "out", "--train", "0", "--valid", "0", "--test", "0"],
        "--train, --valid and --test are all 0: there would be no cluster to write",
    ),  # item 5: silently empty
    (
        "mdsfair-rouge",
        ["hyp.txt", "--ref", "ref.txt", "--max-summary-words", "0"],
        "argument --max-summary-words: must be at least 1, got 0",
    ),
    (
        "mdsfair-rouge",
        ["hyp.txt", "--ref", "ref.txt", "--resamples", "0"],
        "argument --resamples: must be at least 1, got 0",
    ),
    (
        "mdsfair-rouge",
        ["hyp.txt", "--ref", "ref.txt", "--expected", "-2"],
        "argument --expected: must be at least 1, got -2",
    ),
    (
        "mdsfair-baseline",
        ["in.jsonl", "-o", "out.txt", "--method", "lexrank", "--damping", "2"],
        "argument --damping: must lie in (0, 1), got 2",
    ),
    (
        "mdsfair-baseline",
        ["in.jsonl", "-o", "out.txt", "--method", "lead", "--lead-sentences", "0"],
        "argument --lead-sentences: must be at least 1, got 0",
    ),
    (
        "mdsfair-baseline",
        ["in.jsonl", "-o", "out.txt", "--method", "lead", "--lead-tokens", "-4"],
        "argument --lead-tokens: must be at least 1, got -4",
    ),
    (
        "mdsfair-baseline",
        ["in.jsonl", "-o", "out.txt", "--method", "lexrank", "--max-words", "0"],
        "argument --max-words: must be at least 1, got 0",
    ),
    (
        "mdsfair-baseline",
        ["in.jsonl", "-o", "out.txt", "--method", "lexrank", "--threshold", "1"],
        "argument --threshold: must lie in [0, 1), got 1",
    ),
    (
        "mdsfair-baseline",
        ["in.jsonl", "-o", "out.txt", "--method", "oracle", "--oracle-max-sentences", "0"],
        "argument --oracle-max-sentences: must be at least 1, got 0",
    ),
    (
        "mdsfair-compare",
        ["a=hyp.txt", "--ref", "ref.txt", "--samples", "0"],
        "argument --samples: must be at least 1, got 0",
    ),
    (
        "mdsfair-compare",
        ["a=hyp.txt", "--ref", "ref.txt", "--confidence", "1.5"],
        "argument --confidence: must lie in (0, 1), got 1.5",
    ),
    (
        "mdsfair-compare",
        ["a=hyp.txt", "--ref", "ref.txt", "--alpha", "nan"],
        "argument --alpha: must lie in (0, 1), got nan",
    ),
    (
        "mdsfair-page-importance",
        ["--checkpoint", "m.pt", "--data", "DATA", "--output-dir", "out", "--beam", "0"],
        "argument --beam: must be at least 1, got 0",
    ),
    (
        "mdsfair-page-importance",
        ["--checkpoint", "m.pt", "--data", "DATA", "--output-dir", "out", "--max-len-b", "0"],
        "argument --max-len-b: must be at least 1, got 0",
    ),
    (
        "mdsfair-analyze-attention",
        ["--checkpoint", "m.pt", "--data", "DATA", "--batch-size", "0"],
        "argument --batch-size: must be at least 1, got 0",
    ),
    (
        "mdsfair-analyze-attention",
        ["--checkpoint", "m.pt", "--data", "DATA", "--num-examples", "-1"],
        "argument --num-examples: must be at least 0, got -1",
    ),
    (
        "mdsfair-train",
        [*TRAIN, "--arch", "hiertransformer_hiersumm", "--global-heads", "0"],
        "argument --global-heads: must be at least 1, got 0",
    ),
    (
        "mdsfair-train",
        [*TRAIN, "--arch", "pagesum_bart_tiny", "--num-pages", "0"],
        "argument --num-pages: must be at least 1, got 0",
    ),
    (
        "mdsfair-train",
        [*TRAIN, "--arch", "led_tiny", "--max-encoder-positions", "0"],
        "argument --max-encoder-positions: must be at least 1, got 0",
    ),
    (
        "mdsfair-train",
        [*TRAIN, "--arch", "bart_base", "--max-documents", "0"],
        "--max-documents must be at least 1, got 0",
    ),
    ("mdsfair-train", [*TRAIN, "--arch", "bart_base"], "DATA is not an mdsfair data-bin directory"),
    ("mdsfair-generate", ["DATA", "--path", "m.pt", "--beam", "0"], "--beam (beam=) must be at least 1, got 0"),
    ("mdsfair-generate", ["DATA", "--path", "m.pt", "--max-len-b", "0"], "--max-len-b 0 with --max-len-a 0 allows no"),
    ("mdsfair-generate", ["DATA", "--path", "m.pt"], "DATA: No such file or directory"),
    (
        "mdsfair-import",
        ["bart-to-led", "bart.pt", "led.pt", "--max-source-positions", "0"],
        "argument --max-source-positions: must be at least 1, got 0",
    ),
    (
        "mdsfair-import",
        ["pagesum", "model.bin", "config.json", "out", "--pages", "0"],
        "argument --pages: must be at least 1, got 0",
    ),
    (
        "mdsfair-import",
        ["pagesum", "model.bin", "config.json", "out", "--page-length", "2"],
        "argument --page-length: must be at least 3, got 2",
    ),
    (
        "mdsfair-export",
        ["hf-bart", "m.pt", "dict.txt", "out", "--weights-format", "pickle"],
        "argument --weights-format: invalid choice: 'pickle'",
    ),
    (
        "mdsfair-human-eval",
        ["export", "a=hyp.txt", "--references", "ref.txt", "--out", "sheets", "--clusters", "0"],
        "argument --clusters: must be at least 1, got 0",
    ),
    (
        "mdsfair-human-eval",
        ["export", "a=hyp.txt", "--references", "ref.txt", "--out", "sheets", "--tuple-size", "1"],
        "argument --tuple-size: must be at least 2, got 1",
    ),
    ("mdsfair-human-eval", ["score", "sheets", "--samples", "0"], "argument --samples: must be at least 1, got 0"),
]


def test_every_console_script_has_rows():
    assert sorted({script for script, _argv, _text in ROWS}) == sorted(console_scripts())


def unwritable_folder(tmp_path):
    """A destination this process may not create: inside a folder without
    write permission when not root; as root (whom permissions do not stop)
    a path under /sys, where the kernel refuses new files (a read-only file
    system answers the same way: one line naming the path)."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return str(locked / "out")
    return "/sys/fs/mdsfair-bad-values-table"


def listing(folder):
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, directories, files in os.walk(folder)
        for name in files + directories
    )


@pytest.mark.parametrize("script, argv, text", ROWS, ids=[f"{row[0]} {' '.join(row[1][-2:])}" for row in ROWS])
def test_a_bad_value_is_one_error_line_a_failure_and_nothing_written(script, argv, text, tmp_path, monkeypatch, capsys):
    module_name, function_name = console_scripts()[script].split(":")
    entry = getattr(importlib.import_module(module_name), function_name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raw.jsonl").write_text(
        '{"id": "c1", "documents": ["The cat sat. A dog ran far away."], "summary": "The cat sat."}\n'
    )
    os.symlink("nowhere", tmp_path / "dangling")
    unwritable = unwritable_folder(tmp_path)
    argv = [unwritable if arg == "UNWRITABLE" else arg for arg in argv]
    text = text.replace("UNWRITABLE", unwritable)
    before = listing(str(tmp_path))
    try:
        status = entry(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    err = capsys.readouterr().err
    lines = message_lines(err)
    prog = script
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}") and ": error: " in lines[0], lines[0]
    assert text in lines[0], lines[0]
    assert status not in (0, None), status
    assert listing(str(tmp_path)) == before
