"""Issue 34 items 4-5: a flag that sizes, limits or filters is range-checked by
its command's parser: a bad value is one ``PROG: error: ...`` line and exit
status 2, and nothing is written (``--chunk-size 0`` used to exit 0 with a
data-bin holding 0 of 10 clusters)."""

import os

import pytest

from tests.utils import make_synthetic_jsonl

PREPROCESS_BAD_VALUES = [
    ("--chunk-size", "0", "must be at least 1, got 0"),
    ("--chunk-size", "-1", "must be at least 1, got -1"),
    ("--workers", "0", "must be at least 1, got 0"),
    ("--vocab-size", "0", "must be at least 1, got 0"),
    ("--vocab-size", "-5", "must be at least 1, got -5"),
    ("--shards", "0", "must be at least 1, got 0"),
    ("--chunk-size", "many", "expected an integer, got 'many'"),
]


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return make_synthetic_jsonl(str(tmp_path_factory.mktemp("raw")), train=10, valid=2, test=2)


@pytest.mark.parametrize("flag, value, message", PREPROCESS_BAD_VALUES)
def test_preprocess_refuses_a_bad_size_in_one_line_and_writes_nothing(raw, tmp_path, capsys, flag, value, message):
    from mdsfair.preprocess.binarize import run

    destdir = str(tmp_path / "data-bin")
    with pytest.raises(SystemExit) as exit_info:
        run(["--input-dir", raw, "--destdir", destdir, "--no-progress-bar", flag, value])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("mdsfair-preprocess: error: argument " + flag)
    assert message in errors[0]
    assert not os.path.exists(destdir)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--train", "-3"], "argument --train: must be at least 0, got -3"),
        (["--valid", "-1"], "argument --valid: must be at least 0, got -1"),
        (["--num-docs", "0"], "argument --num-docs: must be at least 1, got 0"),
        (["--max-paragraphs", "0"], "argument --max-paragraphs: must be at least 1, got 0"),
        (["--noise-sentences", "-2"], "argument --noise-sentences: must be at least 0, got -2"),
    ],
)
def test_synth_refuses_negative_counts(tmp_path, capsys, argv, message):
    from mdsfair.preprocess.synthetic import cli_main

    out_dir = str(tmp_path / "synth")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--out-dir", out_dir, *argv])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert errors == [f"mdsfair-synth: error: {message}"]
    assert not os.path.exists(out_dir)


@pytest.mark.parametrize("damping", ["2", "1", "0", "-0.5", "nan"])
def test_baseline_refuses_a_damping_outside_0_1(raw, tmp_path, capsys, damping):
    from mdsfair.evaluation.baselines import cli_main

    out = str(tmp_path / "lexrank.txt")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["lexrank", "--input", os.path.join(raw, "test.jsonl"), "--output", out, "--damping", damping])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and f"argument --damping: must lie in (0, 1), got {damping}" in errors[0]
    assert not os.path.exists(out)


def test_rouge_refuses_an_overlong_summary_up_front_and_the_limit_is_a_flag(tmp_path, capsys):
    """Issue 34 item 6: a 30,000-word hypothesis line grew ROUGE-1.5.5 to
    22 GB; it is refused before any scoring, naming the file and line, and
    --max-summary-words moves the limit (both ways)."""
    from mdsfair.evaluation.rouge import cli_main

    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("word " * 30000 + "\nthe second summary\n", encoding="utf-8")
    ref.write_text("the first reference\nthe second reference\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        cli_main([str(hyp), str(ref), "--fast"])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert (
        len(errors) == 1
        and f"{hyp}: cluster 0 (line 1 of a one-per-line file): the hypothesis has 30,000 "
        "words, above --max-summary-words 5,000"
        in errors[0]
    )

    hyp.write_text("one two three four five six\nthe second summary\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        cli_main([str(hyp), str(ref), "--fast", "--max-summary-words", "5"])
    assert "the hypothesis has 6 words, above --max-summary-words 5" in capsys.readouterr().err
    ref.write_text("the first reference is long enough\nthe second reference\n", encoding="utf-8")
    hyp.write_text("one two\nthe second summary\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        cli_main([str(hyp), str(ref), "--fast", "--max-summary-words", "5"])
    assert f"{ref}: cluster 0: a reference has 6 words, above --max-summary-words 5" in capsys.readouterr().err
    assert cli_main([str(hyp), str(ref), "--fast", "--max-summary-words", "6"]) == 0
    with pytest.raises(SystemExit):
        cli_main([str(hyp), str(ref), "--max-summary-words", "0"])
    assert "argument --max-summary-words: must be at least 1, got 0" in capsys.readouterr().err
