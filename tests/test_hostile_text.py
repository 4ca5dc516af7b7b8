"""A lone surrogate in any string of a cluster, and an id that is empty,
holds a tab or line break, or is neither a string nor an integer, stop
mdsfair-preprocess and mdsfair-baseline with FILE:LINE and the field;
--skip-bad skips and counts them; no partial output. Issue 47, class 6
(errors that do not say where, silent changes): a converter's id column of
booleans (Parquet, JSON ``true``) is refused naming the file, row and column,
never written as the ids "True" / "False"."""

import json
import os
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT

GOOD = {
    "id": "c1",
    "documents": ["The council approved the budget. Critics objected."],
    "summary": "The budget passed.",
}


def line(**changes):
    record = {**GOOD, **changes}
    return json.dumps(record)  # ensure_ascii: a lone surrogate is written as the JSON escape \\ud800


CASES = {
    "surrogate_in_document": (line(documents=["Fine text \ud800 here."]), "documents[0] holds a lone surrogate"),
    "surrogate_in_summary": (line(summary="Sum \udfff."), "summary holds a lone surrogate"),
    "surrogate_in_id": (line(id="c\ud800"), "id holds a lone surrogate"),
    "id_with_newline": (line(id="c1\nc2"), "ids may not contain tabs or line breaks"),
    "id_with_tab": (line(id="c1\tx"), "ids may not contain tabs or line breaks"),
    "empty_id": (line(id=""), "is empty"),
    "boolean_id": (line(id=True), "id must be a string or an integer, got bool True"),
    "float_id": (line(id=2.5), "id must be a string or an integer, got float 2.5"),
}


def run(module, args, cwd):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )


def write_split(path, bad_line, good_count=3):
    lines = [json.dumps({**GOOD, "id": f"g{i}"}) for i in range(good_count)]
    lines.insert(1, bad_line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("case", sorted(CASES))
def test_baseline_names_file_line_and_field_and_leaves_no_output(tmp_path, case):
    bad_line, message = CASES[case]
    source = tmp_path / "test.jsonl"
    write_split(source, bad_line)
    out = tmp_path / "lead.txt"
    result = run("mdsfair.evaluation.baselines", [str(source), "--method", "lead", "-o", str(out)], str(tmp_path))
    assert result.returncode != 0
    assert f"{source}:2:" in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["surrogate_in_document", "id_with_newline", "empty_id"])
def test_preprocess_refuses_then_skips_and_counts(tmp_path, case):
    bad_line, message = CASES[case]
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        write_split(
            raw / f"{split}.jsonl", bad_line if split == "test" else json.dumps({**GOOD, "id": "v0"}), good_count=8
        )
    dest = tmp_path / "bin"
    args = ["--input-dir", str(raw), "--destdir", str(dest), "--vocab-size", "60", "--no-progress-bar"]
    refused = run("mdsfair.preprocess.binarize", args, str(tmp_path))
    assert refused.returncode != 0
    assert f"{raw / 'test.jsonl'}:2:" in refused.stderr + refused.stdout and message in refused.stderr + refused.stdout
    assert "Traceback" not in refused.stderr
    skipped = run("mdsfair.preprocess.binarize", args + ["--skip-bad", "--overwrite"], str(tmp_path))
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    ids = (dest / "test.ids.txt").read_text(encoding="utf-8").splitlines()
    assert len(ids) == 8 and all(i.startswith("g") for i in ids)
    assert f"{raw / 'test.jsonl'}:2" in (dest / "test.skipped.txt").read_text(encoding="utf-8")


def test_atomic_text_file_leaves_old_content_on_error_or_interrupt(tmp_path):
    """What every mdsfair output file is written through (baseline -o,
    mdsfair-rank -o, analysis tables, manifests): a failure half-way, Ctrl-C
    included, leaves the old file as it was and no temporary file."""
    from mdsfair.data.manifest import atomic_text_file

    target = tmp_path / "out.txt"
    target.write_text("old\n", encoding="utf-8")
    for error in (ValueError("bad cluster"), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            with atomic_text_file(str(target)) as handle:
                handle.write("half of the new\n")
                raise error
        assert target.read_text(encoding="utf-8") == "old\n"
        assert os.listdir(tmp_path) == ["out.txt"]
    with atomic_text_file(str(target)) as handle:
        handle.write("new\n")
    assert target.read_text(encoding="utf-8") == "new\n" and os.listdir(tmp_path) == ["out.txt"]


def test_baseline_keeps_an_existing_output_when_input_is_bad(tmp_path):
    source = tmp_path / "test.jsonl"
    write_split(source, CASES["surrogate_in_summary"][0])
    out = tmp_path / "lead.txt"
    out.write_text("an earlier run's summaries\n", encoding="utf-8")
    result = run("mdsfair.evaluation.baselines", [str(source), "--method", "lead", "-o", str(out)], str(tmp_path))
    assert result.returncode != 0 and f"{source}:2:" in result.stderr
    assert out.read_text(encoding="utf-8") == "an earlier run's summaries\n"
    assert sorted(os.listdir(tmp_path)) == ["lead.txt", "test.jsonl"]


@pytest.mark.parametrize("case", ["surrogate_in_document", "surrogate_in_summary"])
def test_preprocess_training_sentencepiece_on_a_lone_surrogate_is_one_line(tmp_path, case):
    """Issue 34 item 4: a lone surrogate in the training split, which
    SentencePiece trains on, crashed mdsfair-preprocess with a pybind11
    traceback, with or without --skip-bad. The training text now holds only
    lines the raw contract accepts: without --skip-bad the line is one
    FILE:LINE error and nothing is written; with it, skipped and counted."""
    bad_line, message = CASES[case]
    raw = tmp_path / "raw"
    raw.mkdir()
    write_split(raw / "train.jsonl", bad_line, good_count=8)
    write_split(raw / "valid.jsonl", json.dumps({**GOOD, "id": "v0"}), good_count=2)
    dest = tmp_path / "bin"
    args = ["--input-dir", str(raw), "--destdir", str(dest), "--vocab-size", "60", "--no-progress-bar"]
    refused = run("mdsfair.preprocess.binarize", args, str(tmp_path))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    errors = [line for line in refused.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(f"mdsfair-preprocess: error: {raw / 'train.jsonl'}:2: {message}")
    assert not dest.exists()
    skipped = run("mdsfair.preprocess.binarize", args + ["--skip-bad"], str(tmp_path))
    assert skipped.returncode == 0 and "Traceback" not in skipped.stderr, skipped.stderr[-3000:]
    with open(dest / "mdsfair.json", encoding="utf-8") as f:
        assert json.load(f)["splits"]["train"]["skipped"] == {"lone_surrogate": 1}
    assert len((dest / "train.ids.txt").read_text(encoding="utf-8").splitlines()) == 8
    assert f"{raw / 'train.jsonl'}:2: skipped (lone_surrogate)" in (dest / "train.skipped.txt").read_text("utf-8")


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_class6_a_parquet_id_column_of_another_type_is_refused_naming_file_row_and_column(tmp_path, kind):
    """Class 6: a Parquet id column of booleans became the ids "True" and
    "False" without a word. An id column must hold strings or integers;
    any other type stops mdsfair-convert at FILE:ROW naming the column."""
    import pyarrow as pa
    import pyarrow.parquet as pa_parquet

    ids = {"bool": [True, False], "float": [1.5, 2.0]}[kind]
    table = tmp_path / "test.parquet"
    documents = ["The council approved the budget.", "Critics objected to it."]
    pa_parquet.write_table(pa.table({"document": documents, "summary": ["Passed.", "Objected."], "key": ids}), table)
    out = tmp_path / "test.jsonl"
    result = run("mdsfair.preprocess.converters", ["hf", str(table), "-o", str(out), "--id-column", "key"], tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{table}:1: " in result.stderr and f"id column 'key' must be a string or an integer, got {kind}" in (
        result.stderr
    )
    assert not out.exists()
    integers = tmp_path / "integers.parquet"
    pa_parquet.write_table(
        pa.table({"document": documents, "summary": ["Passed.", "Objected."], "key": [7, 8]}), integers
    )
    written = run(
        "mdsfair.preprocess.converters", ["hf", str(integers), "-o", str(out), "--id-column", "key"], tmp_path
    )
    assert written.returncode == 0, written.stderr
    assert [json.loads(row)["id"] for row in out.read_text(encoding="utf-8").splitlines()] == ["7", "8"]


def test_class6_a_json_id_of_true_is_refused_by_the_converters(tmp_path):
    """Class 6 for the JSON formats: ``"id": true`` is a wrong type at
    FILE:LINE naming the key, not the id "True"."""
    source = tmp_path / "stories.jsonl"
    story = {"id": True, "article": "The council approved the budget.", "highlights": "Passed."}
    source.write_text(json.dumps(story) + "\n", encoding="utf-8")
    out = tmp_path / "cnn.jsonl"
    result = run("mdsfair.preprocess.converters", ["cnn_dailymail", str(source), "-o", str(out)], tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{source}:1: " in result.stderr and "'id' must be str or int, got bool" in result.stderr
    assert not out.exists()
