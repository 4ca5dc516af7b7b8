"""mdsfair-human-eval (mdsfair.evaluation.human_eval, human_eval_sheets,
human_eval_scores): sheets exported for 4 systems, filled in by a script that
judges deterministically, and scored back to values worked by hand; the
sheets' blindness and seeded order; the refusals of badly filled sheets, by
FILE:LINE; the protocols' facts read from the papers."""

import csv
import json
import os
import re

import pytest

from mdsfair.evaluation import human_eval
from tests.utils import paper_text

#: The judge's preference (best first); hidden from the sheets as the names are.
PREFERENCE = ["hiertransformer", "tdmca", "flat", "lead"]
CLUSTERS = 6


@pytest.fixture()
def inputs(tmp_path):
    """Four systems' summaries (texts that name no system), references and questions."""
    systems = []
    for number, name in enumerate(PREFERENCE):
        path = tmp_path / f"{name}.txt"
        path.write_text("".join(f"summary {number} of cluster {cluster}\n" for cluster in range(CLUSTERS)))
        systems.append(f"{name}={path}")
    references = tmp_path / "ref.txt"
    references.write_text("".join(f"gold {cluster}\n" for cluster in range(CLUSTERS)))
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        json.dumps(
            {"cluster": 1, "questions": [{"question": "Who?", "answer": "A"}, {"question": "When?", "answer": "B"}]}
        )
        + "\n"
        + json.dumps({"cluster": 4, "questions": [{"question": "Where?", "answer": "C"}]})
        + "\n"
    )
    return systems, str(references), str(questions)


def export(inputs, out, *extra):
    systems, references, questions = inputs
    argv = ["export", *systems, "--references", references, "--out", str(out), "--clusters", "4", *extra]
    assert human_eval.cli_main(argv) == 0
    with open(os.path.join(out, "key.json"), encoding="utf-8") as handle:
        return json.load(handle)


def rewrite_sheet(path, fill):
    """Fill each row of a sheet in place: ``fill(row) -> row`` (dicts by column)."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
        header = list(rows[0])
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, header)
        writer.writeheader()
        writer.writerows(fill(row) for row in rows)


def judge_best_worst(key, folder):
    """The scripted judge: best = the most preferred system of the item, worst = the least."""
    for name, items in key["sheets"].items():
        by_item = {item["item"]: item for item in items}

        def fill(row, by_item=by_item):
            letters = by_item[row["item"]]["systems"]
            ranked = sorted(letters, key=lambda letter: PREFERENCE.index(letters[letter]))
            return dict(row, best_overall=ranked[0], worst_overall=ranked[-1])

        rewrite_sheet(os.path.join(folder, name), fill)


def score(folder, tmp_path, *extra):
    out = tmp_path / "scores.json"
    assert human_eval.cli_main(["score", str(folder), "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_best_worst_scores_of_a_scripted_judge_are_the_hand_computed_ones(inputs, tmp_path, capsys):
    folder = tmp_path / "sheets"
    key = export(inputs, folder, "--annotators", "3")
    assert len(key["sheets"]) == 3 and key["tuple_size"] == 3
    judge_best_worst(key, folder)
    report = score(folder, tmp_path)
    systems = report["best-worst"]["overall"]["systems"]
    # Each system is in 3 of a cluster's 4 triples. hiertransformer: best in all 3;
    # tdmca: best only without hiertransformer (1 of 3); flat: worst only with both
    # better ones (1 of 3); lead: worst in all 3.
    expected = {"hiertransformer": 1.0, "tdmca": 1 / 3, "flat": -1 / 3, "lead": -1.0}
    assert {name: entry["score"] for name, entry in systems.items()} == pytest.approx(expected, abs=1e-12)
    judgments = 4 * 3 * 3  # clusters x triples holding the system x sheets
    assert systems["hiertransformer"]["best"] == judgments and systems["hiertransformer"]["judgments"] == judgments
    assert systems["tdmca"]["best"] == judgments // 3 and systems["tdmca"]["worst"] == 0
    # the same preference in every cluster: every resample gives the same score
    assert systems["tdmca"]["low"] == pytest.approx(1 / 3) and systems["tdmca"]["high"] == pytest.approx(1 / 3)
    assert report["incomplete"] == {}
    printed = capsys.readouterr().out
    assert re.search(r"hiertransformer\s+1\.000\s+\[1\.000, 1\.000\]\s+36\s+0\s+36", printed), printed


def test_sheets_are_blind_and_the_key_maps_each_summary_to_its_system(inputs, tmp_path):
    folder = tmp_path / "sheets"
    key = export(inputs, folder, "--annotators", "2", "--questions", inputs[2])
    summaries = {
        name: [f"summary {number} of cluster {c}" for c in range(CLUSTERS)] for number, name in enumerate(PREFERENCE)
    }
    for name in list(key["sheets"]) + list(key["qa_sheets"]):
        text = (folder / name).read_text()
        assert not any(system in text for system in PREFERENCE), name
    for name, items in key["sheets"].items():
        with open(folder / name, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert [row["item"] for row in rows] == [item["item"] for item in items]
        for row, item in zip(rows, items):
            assert row["reference"] == f"gold {item['cluster']}"
            for letter, system in item["systems"].items():
                assert row[f"summary_{letter}"] == summaries[system][item["cluster"]]
    # every cluster drawn meets each of the 4 triples once per sheet
    items = key["sheets"]["best-worst/sheet-01.csv"]
    assert sorted((item["cluster"], tuple(sorted(item["systems"].values()))) for item in items) == sorted(
        (cluster, triple)
        for cluster in key["clusters"]
        for triple in [tuple(sorted(set(PREFERENCE) - {left_out})) for left_out in PREFERENCE]
    )
    # the order differs between the two annotators' sheets
    assert key["sheets"]["best-worst/sheet-01.csv"] != key["sheets"]["best-worst/sheet-02.csv"]


def test_the_seed_reproduces_the_sheets_and_another_seed_changes_them(inputs, tmp_path):
    first = export(inputs, tmp_path / "first", "--seed", "7")
    again = export(inputs, tmp_path / "again", "--seed", "7")
    other = export(inputs, tmp_path / "other", "--seed", "8")
    assert first == again
    sheet = "best-worst/sheet-01.csv"
    assert (tmp_path / "first" / sheet).read_bytes() == (tmp_path / "again" / sheet).read_bytes()
    assert (first["clusters"], first["sheets"]) != (other["clusters"], other["sheets"])


def test_qa_scores_are_the_mean_question_score_in_percent(inputs, tmp_path):
    folder = tmp_path / "sheets"
    key = export(inputs, folder, "--questions", inputs[2])
    grades = {"hiertransformer": ["1", "1", "1"], "tdmca": ["1", "0.5", "0"], "flat": ["partial", "0", "0"]}
    items = {item["item"]: item for item in key["qa_sheets"]["qa/sheet-01.csv"]}

    def fill(row):
        item = items[row["item"]]
        if item["system"] == "lead":  # left blank: incomplete, not scored
            return row
        # cluster 1 holds questions 1 and 2 of the hand list, cluster 4 its third
        index = int(row["question_number"]) - 1 + (2 if item["cluster"] == 4 else 0)
        return dict(row, response="an answer", score=grades[item["system"]][index])

    rewrite_sheet(folder / "qa" / "sheet-01.csv", fill)
    judge_best_worst(key, folder)
    report = score(folder, tmp_path)
    qa = report["qa"]["systems"]
    assert qa["hiertransformer"]["score"] == pytest.approx(100.0)
    assert qa["tdmca"]["score"] == pytest.approx(50.0)  # (1 + 0.5 + 0) / 3
    assert qa["flat"]["score"] == pytest.approx(100 / 6)  # (0.5 + 0 + 0) / 3
    assert "lead" not in qa and qa["tdmca"]["judgments"] == 3
    lead_items = sorted(item["item"] for item in items.values() if item["system"] == "lead")
    assert report["incomplete"] == {"qa/sheet-01.csv": lead_items}
    answers = (folder / "qa" / "sheet-01.answers.csv").read_text()
    assert "Who?,A" in answers and not any(system in answers for system in PREFERENCE)


def test_rating_protocol_means_per_criterion(inputs, tmp_path):
    folder = tmp_path / "sheets"
    key = export(inputs, folder, "--protocol", "rating", "--annotators", "2")
    assert key["criteria"] == ["fluency", "conciseness", "informativeness"]
    for name, items in key["sheets"].items():
        by_item = {item["item"]: item for item in items}

        def fill(row, by_item=by_item, sheet=name):
            rank = PREFERENCE.index(by_item[row["item"]]["system"])
            # fluency 5..2 by preference; conciseness 3 everywhere; informativeness differs per sheet
            return dict(
                row, fluency=str(5 - rank), conciseness="3", informativeness="4" if sheet.endswith("1.csv") else "2"
            )

        rewrite_sheet(folder / name, fill)
    report = score(folder, tmp_path, "--no-ci")
    rating = report["rating"]
    assert {name: entry["score"] for name, entry in rating["fluency"]["systems"].items()} == {
        "hiertransformer": 5.0,
        "tdmca": 4.0,
        "flat": 3.0,
        "lead": 2.0,
    }
    assert all(entry["score"] == 3.0 for entry in rating["conciseness"]["systems"].values())
    assert all(
        entry["score"] == 3.0 and entry["judgments"] == 8 for entry in rating["informativeness"]["systems"].values()
    )
    assert "low" not in rating["fluency"]["systems"]["lead"]


def fill_first_row(folder, key, **values):
    """Judge every item with the script, then overwrite the first data row's columns."""
    judge_best_worst(key, folder)
    path = folder / "best-worst" / "sheet-01.csv"
    first = key["sheets"]["best-worst/sheet-01.csv"][0]["item"]
    rewrite_sheet(path, lambda row: dict(row, **values) if row["item"] == first else row)
    return str(path), first


@pytest.mark.parametrize(
    "values, message",
    [
        ({"best_overall": "A", "worst_overall": "A"}, r"summary A chosen both best and worst"),
        ({"best_overall": "Z"}, r"best_overall: 'Z' is not a summary of this item"),
        ({"worst_overall": ""}, r"worst_overall: no choice"),
        ({"item": "999"}, r"item '999' is not an item of this sheet"),
    ],
)
def test_badly_filled_rows_are_refused_by_file_and_line(inputs, tmp_path, capsys, values, message):
    folder = tmp_path / "sheets"
    key = export(inputs, folder)
    path, _ = fill_first_row(folder, key, **values)
    assert human_eval.cli_main(["score", str(folder)]) == 1
    error = capsys.readouterr().err
    assert re.search(re.escape(path) + r":2: .*" + message, error), error


def test_a_duplicate_item_names_both_lines_and_a_blank_row_is_incomplete(inputs, tmp_path, capsys):
    folder = tmp_path / "sheets"
    key = export(inputs, folder)
    path, first = fill_first_row(folder, key, best_overall="", worst_overall="")
    report = score(folder, tmp_path)
    assert report["incomplete"] == {"best-worst/sheet-01.csv": [first]}
    blank_item = key["sheets"]["best-worst/sheet-01.csv"][0]
    # 4 clusters x 3 triples holding the system, less the blank item if it holds it
    expected = 4 * 3 - int("hiertransformer" in blank_item["systems"].values())
    assert report["best-worst"]["overall"]["systems"]["hiertransformer"]["judgments"] == expected
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines + [lines[2]]) + "\n")
    assert human_eval.cli_main(["score", str(folder)]) == 1
    second = key["sheets"]["best-worst/sheet-01.csv"][1]["item"]
    assert f"{path}:{len(lines) + 1}: item {second} again (first on line 3)" in capsys.readouterr().err


def test_export_refuses_a_folder_with_a_key_and_a_bad_tuple_size(inputs, tmp_path, capsys):
    folder = tmp_path / "sheets"
    export(inputs, folder)
    systems, references, _ = inputs
    with pytest.raises(SystemExit):
        human_eval.cli_main(["export", *systems, "--references", references, "--out", str(folder)])
    assert "holds a key.json already" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        human_eval.cli_main(
            ["export", *systems, "--references", references, "--out", str(tmp_path / "n"), "--tuple-size", "5"]
        )
    assert "--tuple-size 5: best-worst needs 2..4" in capsys.readouterr().err


def test_the_protocols_as_the_papers_describe_them():
    ht = paper_text("hiertransformer-liu-lapata2019.txt")
    assert "judgments on 20 randomly se- lected test instances" in ht
    assert "summaries generated from 3 out of 4 systems" in ht
    assert "correct answers are marked with 1, partially correct ones with 0.5, and 0 otherwise" in ht
    assert "percentage of times it was chosen as best minus the times it was selected as worst" in ht
    assert "Ratings range from −1 (worst) to 1 (best)" in ht
    assert "with 5 responses per hit" in ht
    assert "Informativeness" in ht and "Fluency" in ht and "Succinctness" in ht
    dape = paper_text("dape-linguistic-ma2022.txt")
    assert "We randomly sample 10 examples from the Multi-News dataset" in dape
    assert "Three experienced researcher are invited to score summaries (from 4 models)" in dape
    assert "The score range is 1-5" in dape


def test_paired_test_against_a_baseline_with_a_holm_correction(inputs, tmp_path, capsys):
    folder = tmp_path / "sheets"
    key = export(inputs, folder)
    judge_best_worst(key, folder)
    report = score(folder, tmp_path, "--baseline", "lead", "--samples", "99", "--correction", "holm")
    systems = report["best-worst"]["overall"]["systems"]
    assert systems["tdmca"]["delta"] == pytest.approx(1 / 3 + 1, abs=1e-12)
    # one preference in every cluster: every resample repeats the observed
    # difference, so no resample is as far from it as 0 is: p = 1 / (99 + 1)
    assert [systems[name]["p"] for name in ("hiertransformer", "tdmca", "flat")] == pytest.approx([0.01] * 3)
    # Holm over 3 equal p-values: 3p, 2p, p made monotone: 3p each
    assert [systems[name]["p_adjusted"] for name in ("hiertransformer", "tdmca", "flat")] == pytest.approx([0.03] * 3)
    assert "p" not in systems["lead"]
    assert "against lead, paired bootstrap over clusters (99 resamples); correction holm" in capsys.readouterr().out


def test_the_ratio_tests_are_the_mean_tests_when_every_cluster_has_one_judgment():
    import numpy as np

    from mdsfair.evaluation import human_eval_scores, significance

    scores = np.random.default_rng(3).normal(size=(3, 40))
    ones = np.ones_like(scores)
    delta, p = human_eval_scores.paired_ratio_bootstrap(scores, ones, 2, 500, 5)
    expected_delta, expected_p = significance.paired_bootstrap(scores[:2], np.stack([scores[2]] * 2), 500, 5)
    assert delta[:2] == pytest.approx(expected_delta, abs=1e-12) and delta[2] == 0
    assert list(p[:2]) == list(expected_p)
    bounds = human_eval_scores.ratio_bootstrap_ci(scores, ones, 500, 5, 0.9)
    assert bounds == pytest.approx(significance.bootstrap_ci(scores, 500, 5, 0.9), abs=1e-12)


def test_a_fairseq_generate_log_is_read_by_its_ids_and_a_short_file_is_refused(inputs, tmp_path, capsys):
    systems, references, _ = inputs
    log = tmp_path / "model.out"
    order = [3, 0, 5, 1, 4, 2]  # fairseq-generate writes clusters as its batches finish
    log.write_text(
        "".join(
            f"S-{cluster}\tsource {cluster}\nH-{cluster}\t-0.5\tlogged {cluster}\nD-{cluster}\t-0.5\tlogged {cluster}\n"
            for cluster in order
        )
    )
    folder = tmp_path / "sheets"
    argv = ["export", systems[0], f"model={log}", "--references", references, "--out", str(folder)]
    assert human_eval.cli_main([*argv, "--protocol", "rating"]) == 0
    key = json.loads((folder / "key.json").read_text())
    with open(folder / "rating" / "sheet-01.csv", encoding="utf-8", newline="") as handle:
        rows = {row["item"]: row["summary"] for row in csv.DictReader(handle)}
    logged = [item for item in key["sheets"]["rating/sheet-01.csv"] if item["system"] == "model"]
    assert [rows[item["item"]] for item in logged] == [f"logged {item['cluster']}" for item in logged]
    assert sorted(item["cluster"] for item in logged) == list(range(CLUSTERS))
    short = tmp_path / "short.txt"
    short.write_text("one\ntwo\n")
    with pytest.raises(SystemExit):
        human_eval.cli_main(["export", f"short={short}", "--references", references, "--out", str(tmp_path / "x")])
    assert "best-worst needs at least 2 systems" in capsys.readouterr().err
    argv = [
        "export",
        f"short={short}",
        "--references",
        references,
        "--out",
        str(tmp_path / "x"),
        "--protocol",
        "rating",
    ]
    assert human_eval.cli_main(argv) == 1
    assert f"{short} has 2 hypotheses but {references} has {CLUSTERS} references" in capsys.readouterr().err
