"""Several runs of one system in mdsfair-compare (mdsfair.evaluation.run_aggregation):
the mean and sample standard deviation over runs, the run-averaged per-cluster
scores the paired tests read, and the table, JSON and refusals of the command,
each against numbers worked by hand. The papers' sentences the module cites
(HierEncDec's 3 seeds, the Hierarchical Transformer's 5 best checkpoints) are
read from their texts."""

import json
import math
import re

import pytest

from mdsfair.evaluation import compare, run_aggregation
from tests.utils import paper_text


def test_mean_and_sample_sd_by_hand():
    # mean 0.43; deviations -0.03, -0.01, 0.04; squares sum to 0.0026; / (3 - 1) = 0.0013
    mean, sd = run_aggregation.mean_and_sample_sd([0.40, 0.42, 0.47])
    assert mean == pytest.approx(0.43, abs=1e-15)
    assert sd == pytest.approx(math.sqrt(0.0013), abs=1e-15)
    # two runs: |a - b| / sqrt(2)
    assert run_aggregation.mean_and_sample_sd([0.3, 0.5])[1] == pytest.approx(0.2 / math.sqrt(2), abs=1e-15)
    assert run_aggregation.mean_and_sample_sd([0.25]) == (0.25, None)
    with pytest.raises(ValueError):
        run_aggregation.mean_and_sample_sd([])


def test_runs_are_grouped_by_name_and_labelled():
    runs = run_aggregation.group_runs([("model", "s1.out"), ("lead", "lead.txt"), ("model", "s2.out")])
    assert list(runs.items()) == [("model", ["s1.out", "s2.out"]), ("lead", ["lead.txt"])]
    assert run_aggregation.run_labels(runs) == {"model": ["model#1", "model#2"], "lead": ["lead"]}


@pytest.mark.parametrize(
    "systems, message",
    [
        ([("model", "s1.out"), ("model", "s1.out")], "model=s1.out given twice"),
        ([("model", "s1.out"), ("model", "s2.out"), ("model#2", "x.txt")], "has the name of run 2 of system 'model'"),
    ],
)
def test_runs_that_cannot_be_told_apart_are_refused(systems, message):
    with pytest.raises(run_aggregation.RunSpecificationError, match=re.escape(message)):
        run_aggregation.group_runs(systems)


def test_aggregate_row_holds_mean_and_sd_of_every_metric():
    runs = [
        {"name": "m#1", "convention": "mdsfair", "scores": {"rouge-1": 0.40, "rouge-2": 0.10}},
        {"name": "m#2", "convention": "mdsfair", "scores": {"rouge-1": 0.42, "rouge-2": 0.20}},
        {"name": "m#3", "convention": "mdsfair", "scores": {"rouge-1": 0.47, "rouge-2": 0.30}},
    ]
    row = run_aggregation.aggregate_row("m", runs)
    assert row["runs"] == 3 and row["name"] == "m" and not row["published"]
    assert row["scores"]["rouge-2"] == pytest.approx(0.2, abs=1e-15)
    assert row["sd"]["rouge-2"] == pytest.approx(0.1, abs=1e-15)  # deviations -0.1, 0, 0.1: sqrt(0.02 / 2)
    assert run_aggregation.row_title(row) == "m (mean ± sd over 3 runs)"
    assert run_aggregation.score_spread(row, "rouge-1") == f" ± {100 * math.sqrt(0.0013):.2f}" == " ± 3.61"
    assert run_aggregation.score_spread(runs[0], "rouge-1") == ""


def test_paired_test_reads_run_averaged_clusters():
    """Two runs of A over three clusters, one of B. Averaged over A's runs the
    clusters score 0.6, 0.7, 0.8; B scores 0.59, 0.68, 0.77; the differences are
    0.01, 0.02, 0.03 and their mean, delta = 0.02, is also A's mean over runs
    ((0.6 + 0.8) / 2 = 0.7) minus B's mean (0.68). Of the 2^3 sign patterns
    only all-plus and all-minus give |mean(s_i d_i)| >= 0.02, so the exact
    two-sided approximate randomization p-value is 2/8."""
    significance = pytest.importorskip("mdsfair.evaluation.significance")
    per_cluster = {
        "A#1": {"rouge-1": [0.5, 0.6, 0.7]},
        "A#2": {"rouge-1": [0.7, 0.8, 0.9]},
        "B": {"rouge-1": [0.59, 0.68, 0.77]},
    }
    labels = run_aggregation.run_labels({"A": ["a1", "a2"], "B": ["b"]})
    averaged = run_aggregation.run_averaged_scores(per_cluster, labels)
    assert averaged["A"]["rouge-1"] == pytest.approx([0.6, 0.7, 0.8], abs=1e-15)
    assert averaged["B"]["rouge-1"] == per_cluster["B"]["rouge-1"]
    tests = significance.compare_to_baseline(averaged, "B", samples=40000, seed=7)
    assert tests["A"]["rouge-1"]["delta"] == pytest.approx(0.02, abs=1e-15)
    # Monte-Carlo error of a p of 0.25 from 40,000 samples: sd 0.0022; 0.01 is 4.6 sd
    assert tests["A"]["rouge-1"]["p_randomization"] == pytest.approx(0.25, abs=0.01)


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_compare_shows_runs_and_their_mean_and_tests_the_average(tmp_path, capsys):
    """Ten clusters, reference "the X cat sat on the Y mat today ." (9 words for
    rouge-score). Run 1 of system a changes two of them (7 of 9 shared: F1 7/9),
    run 2 drops one and changes another (8 words, 7 shared: F1 14/17), b
    changes two (F1 7/9)."""
    references = [f"the {w} cat sat on the {v} mat today ." for w, v in zip("abcdefghij", "klmnopqrst")]
    ref = _write(tmp_path / "ref.txt", references)
    run1 = _write(tmp_path / "a1.txt", [r.replace("cat sat", "dog ran") for r in references])
    run2 = _write(tmp_path / "a2.txt", [r.replace("mat today", "rug") for r in references])
    other = _write(tmp_path / "b.txt", [r.replace("cat sat", "cow ate") for r in references])
    out_json, out_csv = tmp_path / "c.json", tmp_path / "c.csv"
    argv = ["--ref", ref, "--fast", "--baseline", "b", "--samples", "200", "--json", str(out_json)]
    argv += ["--per-cluster", str(out_csv), "a=" + run1, "b=" + other, "a=" + run2]
    assert compare.cli_main(argv) == 0
    printed = capsys.readouterr().out
    mean, sd = (7 / 9 + 14 / 17) / 2, abs(7 / 9 - 14 / 17) / math.sqrt(2)
    assert f"{100 * mean:.2f} ± {100 * sd:.2f}" == "80.07 ± 3.24"
    table = printed.split("\n\n")[0].splitlines()
    assert [line.split("  ")[0] for line in table[1:5]] == ["a#1", "a#2", "a (mean ± sd over 2 runs)", "b"]
    assert "80.07 ± 3.24" in table[3] and "±" not in table[1] + table[2] + table[4]
    saved = json.loads(out_json.read_text())
    assert saved["runs"] == {"a": ["a#1", "a#2"], "b": ["b"]}
    row = next(row for row in saved["rows"] if row["name"] == "a")
    assert row["runs"] == 2
    assert row["scores"]["rouge-1"] == pytest.approx(mean, abs=1e-12)
    assert row["sd"]["rouge-1"] == pytest.approx(sd, abs=1e-12)
    # the test reads the run-averaged clusters: delta = mean of a's runs - b's score, on every cluster alike
    test = saved["tests"]["a"]["rouge-1"]
    assert set(saved["tests"]) == {"a"}
    assert test["delta"] == pytest.approx(mean - 7 / 9, abs=1e-12)
    assert test["p_randomization"] == pytest.approx(1 / 201)  # the same difference in every cluster
    assert len(out_csv.read_text().splitlines()) == 1 + 3 * 10  # one record per run and cluster


def test_compare_refuses_one_file_twice_as_two_runs(tmp_path, capsys):
    ref = _write(tmp_path / "ref.txt", ["a b c"])
    with pytest.raises(SystemExit) as exit_info:
        compare.cli_main(["--ref", ref, "--fast", "a=" + ref, "a=" + ref])
    assert exit_info.value.code == 2
    assert "given twice: a run given twice would count twice in a's mean" in capsys.readouterr().err


def test_the_papers_average_scores_of_runs_and_checkpoints():
    """The sentences the module's docstring and docs/evaluation.md quote:
    HierEncDec (Sec. 5.3) averages 3 seeds; the Hierarchical Transformer
    (Sec. 4) selects 5 checkpoints and averages their test results, i.e.
    scores of 5 decodings, not parameters (its released code tests each of
    the 5 checkpoints of lowest validation perplexity in turn:
    nlpyang/hiersumm at 476e6bf, src/train_abstractive.py lines 136-151,
    ``sorted(ppl_lst, key=lambda x: x[0])[:5]`` then ``test(args, cp, step)``
    per checkpoint; that file is not read here)."""
    assert "The reported results are the average of 3 runs from random seeds." in paper_text("hierencdec-shen2023.txt")
    hiertransformer = paper_text("hiertransformer-liu-lapata2019.txt")
    assert (
        "We selected the 5 best checkpoints based on performance on the validation set and report averaged "
        "results on the test set." in hiertransformer
    )
    assert "checkpoint averaging" not in hiertransformer.lower() and "average the parameters" not in hiertransformer
