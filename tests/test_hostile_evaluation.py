"""Issue 47's hostile cases on the evaluation side, fixed by class; every
case gives a one-line error that names the flag, file, line or cluster (or a
counted, warned change), never a traceback:

* class 1, library errors reaching users as tracebacks: output paths that
  are folders, in missing folders or inputs (checked before scoring), writes
  that fail (no temporary file left), a ``--samples`` too large for memory,
  ``mdsfair-synth``'s minimum above its maximum;
* class 3, evaluation not checking where its inputs came from: ``--data-bin``
  against the log's, systems of different data-bins, a log holding a cluster
  twice, comparisons too small for their tests;
* class 4, checks before normalisation: an NFD hypothesis scores as NFC;
* class 6, errors that do not say where: invalid UTF-8 as ``FILE:LINE``, a
  lone CR inside a line, a confidence printed with all its digits.
"""

import json
import logging
import os
import unicodedata

import pytest

from mdsfair.evaluation import baselines, compare, file_scoring, rouge, score_table, scoring, significance
from mdsfair.evaluation.conventions import ALL_METRICS
from mdsfair.evaluation.inputs import RougeInputError, read_lines
from mdsfair.evaluation.outputs import write_bytes_atomic
from mdsfair.evaluation.per_cluster import write_per_cluster
from mdsfair.preprocess import synthetic

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "evaluation")
HYP = os.path.join(FIXTURES, "hyp.txt")
REF = os.path.join(FIXTURES, "ref.txt")

REFERENCES = [f"the {w} cat sat on the {v} mat today ." for w, v in zip("abcdefghij", "klmnopqrst")]


def _write(folder, name, lines, encoding="utf-8"):
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding=encoding)
    return str(path)


def _one_line_error(capsys, main, argv, code=2):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == code
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return error.strip().splitlines()[-1]


def _data_bin(folder, name, summaries, split="test"):
    path = folder / name
    path.mkdir()
    (path / f"{split}.summary.txt").write_text("\n".join(summaries) + "\n", encoding="utf-8")
    return str(path)


def _generate_log(folder, name, data_bin, hypotheses, split="test"):
    lines = [
        f"2026-01-01 10:00:00 | INFO | mdsfair.tasks.multidoc_summarization | split {split} of data-bin "
        f"{data_bin}: {len(hypotheses)} clusters, source tokens kept 100.0% (9 of 9); nothing truncated"
    ]
    for index, text in enumerate(hypotheses):
        lines += [
            f"S-{index}\tsource {index}",
            f"T-{index}\t{text}",
            f"H-{index}\t-0.5\t{text}",
            f"D-{index}\t-0.5\t{text}",
            f"P-{index}\t-0.5 -0.5",
        ]
    return _write(folder, name, lines)


# ------------------------------------------------------------------ class 1


def _baseline_input(folder):
    clusters = [
        {"id": str(i), "documents": [f"Document {i} says the cat sat. It was on the mat."], "summary": "The cat sat."}
        for i in range(3)
    ]
    return _write(folder, "clusters.jsonl", [json.dumps(cluster) for cluster in clusters])


@pytest.mark.parametrize("command", ["rouge", "compare", "baseline"])
@pytest.mark.parametrize("place", ["folder", "missing-folder", "input"])
def test_class1_output_paths_are_refused_before_any_scoring(command, place, tmp_path, capsys, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the output path must be checked before any input is read")

    monkeypatch.setattr(rouge, "load_scoring_inputs", must_not_run)
    monkeypatch.setattr(compare, "load_scoring_inputs", must_not_run)
    monkeypatch.setattr(baselines, "read_clusters", must_not_run)
    hyp = _write(tmp_path, "hyp.txt", REFERENCES[:5])
    clusters = _baseline_input(tmp_path)
    (tmp_path / "out.png").mkdir()
    source = clusters if command == "baseline" else hyp
    target = {
        "folder": str(tmp_path / "out.png"),
        "missing-folder": str(tmp_path / "nowhere" / "out.png"),
        "input": source,
    }[place]
    reason = {"folder": "is a folder", "missing-folder": "does not exist", "input": "is also an input"}[place]
    if command == "rouge":
        flags = ["--json", "--per-cluster"]
        runs = [(flag, rouge.cli_main, [hyp, REF, "--fast", flag, target]) for flag in flags]
    elif command == "compare":
        flags = ["--json", "--per-cluster", "--plot"]
        runs = [(flag, compare.cli_main, ["--ref", REF, "--fast", flag, target, "a=" + hyp]) for flag in flags]
    else:
        runs = [("-o/--output", baselines.cli_main, [clusters, "--method", "lead", "-o", target])]
    for flag, main, argv in runs:
        if (flag == "--per-cluster" and place != "missing-folder") or (flag == "--plot" and place == "input"):
            continue  # the extension checks (.jsonl/.csv, .png) answer first; the path check is the same function
        error = _one_line_error(capsys, main, argv)
        assert flag in error and target in error and reason in error, error


def test_class1_two_outputs_naming_one_file_are_refused(tmp_path, capsys):
    out = str(tmp_path / "scores.csv")
    error = _one_line_error(capsys, rouge.cli_main, [HYP, REF, "--fast", "--json", out, "--per-cluster", out])
    assert "--json and --per-cluster both name" in error and out in error


def test_class1_a_failed_write_leaves_no_temporary_file(tmp_path):
    result = file_scoring.score_files(HYP, REF, fast=True, per_cluster=True)
    folder = tmp_path / "taken.csv"
    folder.mkdir()
    with pytest.raises(OSError):
        write_per_cluster(str(folder), {"a": result})
    with pytest.raises(OSError):
        write_bytes_atomic(str(folder), b"\x89PNG")
    assert sorted(os.listdir(tmp_path)) == ["taken.csv"] and os.listdir(folder) == []
    written = tmp_path / "fine.csv"
    assert write_per_cluster(str(written), {"a": result}) == 5
    assert sorted(os.listdir(tmp_path)) == ["fine.csv", "taken.csv"]


def test_class1_samples_beyond_the_memory_budget_are_refused_with_the_largest_allowed(capsys, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("--samples must be checked before any scoring")

    monkeypatch.setattr(compare, "score_inputs", must_not_run)
    error = _one_line_error(
        capsys, compare.cli_main, ["--ref", REF, "--fast", "--ci", "--samples", "100000000", "a=" + HYP]
    )
    # the ROUGE rows of one system (no --bertscore or --nsp-coherence column asked for)
    metrics = len([metric for metric in ALL_METRICS if metric not in ("bertscore", "nsp-coherence")])
    largest = significance.largest_samples(5, metrics)
    assert error.endswith(f"the largest --samples this comparison allows is {largest}"), error
    assert significance.resampling_bytes(5, metrics, largest) <= significance.RESAMPLING_MEMORY_BUDGET
    assert significance.resampling_bytes(5, metrics, largest + 1) > significance.RESAMPLING_MEMORY_BUDGET


def test_class1_the_resampling_bound_holds_for_the_arrays_numpy_allocates():
    tracemalloc = pytest.importorskip("tracemalloc")
    import numpy as np

    clusters, rows, samples = 40, 6, 5000
    rng = np.random.default_rng(0)
    system, base = rng.random((rows, clusters)), rng.random((rows, clusters))
    for run in (
        lambda: significance.bootstrap_ci(system, samples, 1),
        lambda: significance.paired_bootstrap(system, base, samples, 1),
        lambda: significance.approximate_randomization(system, base, samples, 1),
    ):
        tracemalloc.start()
        run()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= significance.resampling_bytes(clusters, rows, samples)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--min-facts", "6", "--max-facts", "2"], "--min-facts 6 is above --max-facts 2"),
        (
            ["--min-facts-per-doc", "3", "--max-facts-per-doc", "2"],
            "--min-facts-per-doc 3 is above --max-facts-per-doc 2",
        ),
        (["--max-facts", "8"], "--max-facts 8: a summary has at most 7 facts"),
        (
            [
                "--num-docs",
                "1",
                "--min-facts-per-doc",
                "1",
                "--max-facts-per-doc",
                "1",
                "--min-facts",
                "1",
                "--max-facts",
                "3",
            ],
            "--num-docs 1 x --max-facts-per-doc 1 is below --max-facts 3",
        ),
        (["--num-names", "3"], "--num-names 3: the world needs at least 8 names"),
    ],
)
def test_class1_synth_refuses_a_minimum_above_its_maximum_naming_both_flags(argv, message, tmp_path, capsys):
    out = tmp_path / "synth"
    error = _one_line_error(capsys, synthetic.cli_main, ["--out-dir", str(out), "--train", "1", *argv])
    assert error.startswith("mdsfair-synth: error: ") and message in error, error
    assert not out.exists()


def _command_outputs(tmp_path):
    """Each other command with output flags: its entry point, its arguments
    with OUT where the output goes, the flag, and the function that would
    do the work (which must not run)."""
    from mdsfair.evaluation import attention_analysis, page_importance
    from mdsfair.preprocess import rank
    from mdsfair.preprocess.converters import driver

    clusters = _baseline_input(tmp_path)
    checkpoint = str(tmp_path / "model.pt")  # never read: the output is checked first
    return {
        "convert -o": (driver.cli_main, ["cnn_dailymail", clusters, "-o", "OUT"], "-o/--output", driver, "convert"),
        "convert --report-json": (
            driver.cli_main,
            ["cnn_dailymail", clusters, "-o", str(tmp_path / "c.jsonl"), "--report-json", "OUT"],
            "--report-json",
            driver,
            "convert",
        ),
        "rank --output": (rank.cli_main, ["--input", clusters, "--method", "tfidf", "--output", "OUT"], "--output"),
        "rank --report": (
            rank.cli_main,
            ["--input", clusters, "--method", "tfidf", "--evaluate", "--report", "OUT"],
            "--report",
        ),
        "synth --out-dir": (
            synthetic.cli_main,
            ["--train", "1", "--out-dir", "OUT"],
            "--out-dir",
            synthetic,
            "write_dataset",
        ),
        "page-importance --output-dir": (
            page_importance.cli_main,
            ["--checkpoint", checkpoint, "--data", str(tmp_path), "--output-dir", "OUT"],
            "--output-dir",
        ),
        "analyze-attention --output-dir": (
            attention_analysis.cli_main,
            ["--checkpoint", checkpoint, "--data", str(tmp_path), "--output-dir", "OUT"],
            "--output-dir",
        ),
    }


COMMAND_OUTPUTS = [
    "convert -o",
    "convert --report-json",
    "rank --output",
    "rank --report",
    "synth --out-dir",
    "page-importance --output-dir",
    "analyze-attention --output-dir",
]


@pytest.mark.parametrize("output", COMMAND_OUTPUTS)
def test_class1_every_command_refuses_an_output_it_cannot_write_before_any_work(output, tmp_path, capsys, monkeypatch):
    """Class 1, library errors reaching users as tracebacks, for the output
    flags of mdsfair-convert, -rank, -synth, -page-importance and
    -analyze-attention: a file output that is a folder or in a missing
    folder the command does not create, and a folder output that is a file,
    are one error line naming the flag and path before any input is read or
    model loaded (they were found at the end, after the work, or as
    IsADirectoryError / FileExistsError)."""
    from mdsfair.preprocess import structure

    def must_not_run(*args, **kwargs):
        raise AssertionError("the output path must be checked before any work")

    monkeypatch.setattr(structure, "read_clusters", must_not_run)  # mdsfair-rank's input
    entry = _command_outputs(tmp_path)[output]
    main, argv, flag = entry[:3]
    if len(entry) == 5:
        monkeypatch.setattr(entry[3], entry[4], must_not_run)
    a_folder = tmp_path / "taken"
    a_folder.mkdir()
    a_file = tmp_path / "taken.txt"
    a_file.write_text("kept\n", encoding="utf-8")
    if flag.endswith("-dir"):
        places = {str(a_file): "is a file, not a folder", str(a_file / "sub"): f"{a_file} is not a folder"}
    else:
        places = {str(a_folder): "is a folder"}
        if flag in ("--report-json", "--report"):  # the folder of -o / --output is created, not of these
            places[str(tmp_path / "nowhere" / "out.json")] = "does not exist"
    for target, reason in places.items():
        with pytest.raises(SystemExit) as exited:
            main([target if arg == "OUT" else arg for arg in argv])
        if isinstance(exited.value.code, str):  # mdsfair-rank exits with its error line (status 1)
            message = exited.value.code
        else:
            assert exited.value.code == 2
            message = capsys.readouterr().err
        assert "Traceback" not in message
        last = message.strip().splitlines()[-1]
        assert flag in last and target in last and reason in last, last
    assert a_file.read_text(encoding="utf-8") == "kept\n" and os.listdir(a_folder) == []


@pytest.mark.parametrize("command", ["compare", "analyze-attention"])
def test_class1_a_negative_seed_is_the_parsers_error(command, tmp_path, capsys):
    """Class 1: ``mdsfair-compare --seed -1`` reached numpy's
    "expected non-negative integer" as a traceback after all the scoring;
    every seed flag is range-checked by its parser."""
    from mdsfair.evaluation import attention_analysis

    if command == "compare":
        main, argv = compare.cli_main, ["--ref", REF, "--fast", "--ci", "--seed", "-1", "a=" + HYP]
    else:
        argv = ["--checkpoint", "m.pt", "--data", str(tmp_path), "--output-dir", str(tmp_path), "--seed", "-1"]
        main = attention_analysis.cli_main
    error = _one_line_error(capsys, main, argv)
    assert "argument --seed: must be at least 0, got -1" in error, error


# ------------------------------------------------------------------ class 3


def test_class3_a_data_bin_other_than_the_logs_is_refused_unless_asked_for(tmp_path, capsys):
    logged = _data_bin(tmp_path, "logged", REFERENCES[:4])
    other = _data_bin(tmp_path, "other", [text.replace("cat", "dog") for text in REFERENCES[:4]])
    log = _generate_log(tmp_path, "gen.log", logged, REFERENCES[:4])
    assert file_scoring.score_files(log, fast=True)["rouge-1"]["f"] == pytest.approx(1.0)
    assert file_scoring.score_files(log, fast=True, data_bin=logged)["info"]["split"] == "test"
    with pytest.raises(RougeInputError, match=f"generated from data-bin {logged} .*but --data-bin is {other}"):
        file_scoring.score_files(log, fast=True, data_bin=other)
    error = _one_line_error(capsys, rouge.cli_main, [log, "--fast", "--data-bin", other])
    assert logged in error and other in error and "--ignore-log-data-bin" in error
    with pytest.raises(RougeInputError, match="generated from split 'test' .* but --split is 'valid'"):
        file_scoring.score_files(log, fast=True, data_bin=logged, split="valid")
    forced = file_scoring.score_files(log, fast=True, data_bin=other, ignore_log_data_bin=True)
    assert forced["rouge-1"]["f"] < 1.0 and forced["info"]["data_bin"] == other


def test_class3_systems_of_different_data_bins_are_not_paired(tmp_path, capsys):
    first = _data_bin(tmp_path, "first", REFERENCES[:4])
    second = _data_bin(tmp_path, "second", REFERENCES[4:8])
    log_a = _generate_log(tmp_path, "a.log", first, REFERENCES[:4])
    log_b = _generate_log(tmp_path, "b.log", second, REFERENCES[4:8])
    error = _one_line_error(capsys, compare.cli_main, ["--fast", "a=" + log_a, "b=" + log_b])
    assert f"a from split 'test' of {first}, b from split 'test' of {second}" in error, error
    assert "--allow-different-data-bins" in error
    valid = _generate_log(tmp_path, "valid.log", first, REFERENCES[:4], split="valid")
    (tmp_path / "first" / "valid.summary.txt").write_text("\n".join(REFERENCES[:4]) + "\n", encoding="utf-8")
    error = _one_line_error(capsys, compare.cli_main, ["--fast", "a=" + log_a, "v=" + valid])
    assert "split 'valid'" in error
    assert compare.cli_main(["--fast", "--allow-different-data-bins", "a=" + log_a, "b=" + log_b]) == 0


def test_class3_a_log_holding_a_cluster_twice_is_refused_with_both_lines(tmp_path, capsys):
    data_bin = _data_bin(tmp_path, "bin", REFERENCES[:3])
    once = _generate_log(tmp_path, "once.log", data_bin, REFERENCES[:3])
    lines = read_lines(once)
    twice = _write(tmp_path, "twice.log", lines + lines)
    with pytest.raises(
        RougeInputError,
        match=rf"twice\.log:{len(lines) + 2}: cluster id 0 again "
        r"\(S-0 also at line 2\)",
    ):
        file_scoring.score_files(twice, fast=True)
    error = _one_line_error(capsys, compare.cli_main, ["--fast", "a=" + twice])
    assert "cluster id 0 again" in error
    # --nbest prints an id's H-/D- lines one after the other; the first is kept
    nbest = [lines[0]]
    for index, text in enumerate(REFERENCES[:3]):
        nbest += [
            f"S-{index}\tsource",
            f"T-{index}\t{text}",
            f"H-{index}\t-0.1\t{text}",
            f"D-{index}\t-0.1\t{text}",
            f"P-{index}\t-0.1",
            f"H-{index}\t-0.9\tworse",
            f"D-{index}\t-0.9\tworse",
            f"P-{index}\t-0.9",
        ]
    result = file_scoring.score_files(_write(tmp_path, "nbest.log", nbest), fast=True)
    assert result["rouge-1"]["f"] == pytest.approx(1.0)
    # a log sorted by line keeps each id's lines together
    assert file_scoring.score_files(_write(tmp_path, "sorted.log", sorted(nbest)), fast=True)["rouge-1"]["f"] == 1.0


def test_class3_one_cluster_gives_no_p_value_and_few_clusters_a_warning(tmp_path, capsys, caplog):
    ref = _write(tmp_path, "ref.txt", REFERENCES[:1])
    gold = _write(tmp_path, "gold.txt", REFERENCES[:1])
    worse = _write(tmp_path, "worse.txt", ["a dog ran somewhere else"])
    out = tmp_path / "one.json"
    assert (
        compare.cli_main(
            ["--ref", ref, "--fast", "--ci", "--baseline", "gold", "--json", str(out), "gold=" + gold, "worse=" + worse]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "p_boot" not in printed and "0.001" not in printed
    assert "note: no intervals or tests: 1 cluster: there is nothing to resample" in printed
    saved = json.loads(out.read_text())
    assert saved["tests"] is None and "ci" not in saved["rows"][0]
    ref = _write(tmp_path, "ref5.txt", REFERENCES[:5])
    gold = _write(tmp_path, "gold5.txt", REFERENCES[:5])
    worse = _write(tmp_path, "worse5.txt", [text.replace("cat sat", "dog ran") for text in REFERENCES[:5]])
    with caplog.at_level(logging.WARNING):
        assert compare.cli_main(["--ref", ref, "--fast", "--baseline", "gold", "gold=" + gold, "worse=" + worse]) == 0
    printed = capsys.readouterr().out
    assert "p_boot" in printed and "note: only 5 clusters: below 30" in printed
    assert "approximate randomization cannot go below p = 0.0625" in caplog.text


# ------------------------------------------------------------------ class 4

WORDS_NFC = ["Le café était très animé à Zürich , près de la gare .", "Une équipe française a gagné le défi à Genève ."]


def _nfd(text):
    return unicodedata.normalize("NFD", text)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "official"])
def test_class4_an_nfd_hypothesis_scores_as_its_nfc_form(fast, tmp_path, capsys):
    if not fast:
        from mdsfair.evaluation import rouge155

        try:
            rouge155.check_perl()
            rouge155.rouge155_home()
        except rouge155.RougeDependencyError as error:
            pytest.skip(str(error))
    assert _nfd(WORDS_NFC[0]) != WORDS_NFC[0]
    ref = _write(tmp_path, "ref.txt", WORDS_NFC)
    nfc = _write(tmp_path, "nfc.txt", [text.replace("gare", "ville") for text in WORDS_NFC])
    nfd = _write(tmp_path, "nfd.txt", [_nfd(text.replace("gare", "ville")) for text in WORDS_NFC])
    expected = file_scoring.score_files(nfc, ref, fast=fast)
    result = file_scoring.score_files(nfd, ref, fast=fast)
    for metric in scoring.METRICS:
        assert result[metric]["f"] == expected[metric]["f"], metric
    assert expected["info"]["nfc_normalized"] == {"hypotheses": 0, "references": 0}
    assert result["info"]["nfc_normalized"] == {"hypotheses": 2, "references": 0}
    assert "scored in Unicode NFC: 2 hypotheses and 0 references were not" in score_table.format_table(result)
    # a paper's convention, through mdsfair-rouge and through the function validation uses
    from mdsfair.evaluation.conventions import get_convention, score_with_convention

    assert (
        file_scoring.score_files(nfd, ref, convention="hierencdec")["rouge-1"]["f"]
        == file_scoring.score_files(nfc, ref, convention="hierencdec")["rouge-1"]["f"]
    )
    assert score_with_convention([_nfd(t) for t in WORDS_NFC], [[t] for t in WORDS_NFC], get_convention("hierencdec"))[
        "rouge-1"
    ]["f"] == pytest.approx(1.0)
    # the strings API and the reference side too
    strings = scoring.score([_nfd(t) for t in WORDS_NFC], [_nfd(t) for t in WORDS_NFC], fast=True)
    assert strings["rouge-1"]["f"] == pytest.approx(1.0)
    assert strings["info"]["nfc_normalized"] == {"hypotheses": 2, "references": 2}


# ------------------------------------------------------------------ class 6


def test_class6_invalid_utf8_is_named_by_file_and_line(tmp_path, capsys):
    path = tmp_path / "hyp.txt"
    path.write_bytes(b"a fine line\nanother\nbad \xe9t\xe9 here\n")
    with pytest.raises(RougeInputError, match=r"hyp\.txt:3: invalid UTF-8 \(byte e9 at byte 5 of the line"):
        read_lines(str(path))
    error = _one_line_error(capsys, rouge.cli_main, [str(path), "--fast", "--expected", "3", "--ref", REF])
    assert f"{path}:3: invalid UTF-8" in error


def test_class6_a_lone_carriage_return_is_a_counted_space_named_by_line(tmp_path, caplog):
    path = tmp_path / "hyp.txt"
    lines = [text.encode() for text in read_lines(HYP)]
    lines[1] = lines[1].replace(b" ", b"\r", 1)
    lines[4] = lines[4].replace(b" ", b"\r", 1)
    path.write_bytes(b"\r\n".join(lines[:2]) + b"\n" + b"\n".join(lines[2:]) + b"\n")
    with caplog.at_level(logging.WARNING):
        result = file_scoring.score_files(str(path), REF, fast=True)
    assert f"{path}:2: a carriage return (CR) inside the line is read as a space (2 of the file's lines" in caplog.text
    assert result["info"]["num_hypotheses"] == 5
    assert result["rouge-1"]["f"] == file_scoring.score_files(HYP, REF, fast=True)["rouge-1"]["f"]


def test_class6_a_confidence_is_printed_with_all_its_digits(capsys):
    assert compare.percent(0.999999999) == "99.9999999" and compare.percent(0.95) == "95"
    assert (
        compare.cli_main(["--ref", REF, "--fast", "--ci", "--samples", "50", "--confidence", "0.999999999", "a=" + HYP])
        == 0
    )
    assert "99.9999999% percentile bootstrap" in capsys.readouterr().out
