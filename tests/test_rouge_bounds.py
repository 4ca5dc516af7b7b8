"""Issue 34 item 6: ``mdsfair-rouge --fast`` on a 30,000-word hypothesis
line ran past 150 s (rouge-score's LCS tables grow with the product of the
two lengths). The --max-summary-words limit (docs/evaluation.md) refuses it
up front on every path: the official scorer, --fast, and mdsfair-compare,
which scores through the same function. The refusal is timed, so a change
that scores first and checks after fails here."""

import time

import pytest

from tests.utils import message_lines

OVERLONG = 30000


@pytest.fixture
def files(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text(" ".join(f"w{i % 997}" for i in range(OVERLONG)) + "\nthe second summary\n", encoding="utf-8")
    ref.write_text(" ".join(f"w{i % 991}" for i in range(300)) + "\nthe second reference\n", encoding="utf-8")
    return hyp, ref


@pytest.mark.parametrize("fast", [True, False])
def test_rouge_refuses_a_30000_word_line_within_seconds(files, capsys, fast):
    from mdsfair.evaluation.rouge import cli_main

    hyp, ref = files
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        cli_main([str(hyp), str(ref)] + (["--fast"] if fast else []))
    elapsed = time.perf_counter() - started
    assert exit_info.value.code != 0
    err = message_lines(capsys.readouterr().err)  # less argparse's usage block
    assert len(err) == 1 and err[0].startswith("mdsfair-rouge: error: ") and "above --max-summary-words 5,000" in err[0]
    assert elapsed < 10.0, f"the refusal took {elapsed:.1f} s: the summary was scored before it was checked"


def test_compare_refuses_a_30000_word_line_within_seconds(files, capsys):
    from mdsfair.evaluation.compare import cli_main

    hyp, ref = files
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        cli_main([f"system={hyp}", "--ref", str(ref), "--fast"])
    elapsed = time.perf_counter() - started
    assert exit_info.value.code != 0
    err = message_lines(capsys.readouterr().err)  # less argparse's usage block
    assert len(err) == 1 and ": error: " in err[0] and "above --max-summary-words 5,000" in err[0], err
    assert elapsed < 10.0, f"the refusal took {elapsed:.1f} s"
