"""Tests of the converters for the papers' remaining data sets and of ``mdsfair-convert hf`` (issue 23.1/23.2)."""
import json
from pathlib import Path

import pytest

from mdsfair.preprocess.converters import CONVERTERS, InputFormatError, cli_main, convert

FIXTURES = Path(__file__).parent / "fixtures" / "converters"


def read_jsonl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def run(format_name, inputs, tmp_path, **options):
    """Convert into tmp_path/out.jsonl; return (clusters, report)."""
    output = tmp_path / "out.jsonl"
    report = convert(format_name, inputs, output, **options)
    return read_jsonl(output), report


def assert_accounted(report):
    """Every record read was written, skipped or filtered out."""
    assert report.records_read == report.clusters_written + report.skipped_total + report.filtered_total


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------
# arXiv / PubMed (Cohan et al. 2018)
# ----------------------------------------------------------------------------

def test_scientific_papers_sections_become_titled_documents(tmp_path):
    clusters, report = run("scientific_papers", FIXTURES / "scientific_papers" / "val.txt", tmp_path, split="val")
    assert [c["id"] for c in clusters] == ["1001.0001", "1001.0002"]
    first = clusters[0]
    assert first["documents"] == [
        "introduction\n\nthe model was introduced long ago . we compute its spectrum .",
        "results\n\nthe gap closes .",
        "conclusion\n\nthis ends the paper .",
    ]
    # <S> / </S> removed, sentences on one line.
    assert first["summary"] == "we study the spectrum of a toy model . the gap closes at weak coupling ."
    # Unnamed section kept without a name line; the empty acknowledgments section dropped and counted.
    assert clusters[1]["documents"] == ["first body sentence .", "methods\n\nsecond body sentence ."]
    assert clusters[1]["summary"] == "a second abstract ."
    assert report.records_read == 2 and report.clusters_written == 2 and report.documents_written == 5
    assert dict(report.dropped_documents) == {"empty_section": 1}
    assert dict(report.notes) == {"unnamed_section": 1}
    assert_accounted(report)


def test_scientific_papers_whole_article_and_omitted_names(tmp_path):
    path = FIXTURES / "scientific_papers" / "val.txt"
    clusters, _ = run("scientific_papers", path, tmp_path, split="val", whole_article=True)
    assert clusters[0]["documents"] == ["the model was introduced long ago . we compute its spectrum . "
                                        "the gap closes . this ends the paper ."]
    clusters, _ = run("scientific_papers", path, tmp_path, split="val", omit_section_names=True)
    assert clusters[0]["documents"][1] == "the gap closes ."


def test_scientific_papers_bad_records_are_located_and_counted(tmp_path):
    good = json.loads((FIXTURES / "scientific_papers" / "val.txt").read_text().splitlines()[0])
    mismatched = dict(good, article_id="x2", section_names=["only one"])
    no_sections = {key: value for key, value in good.items() if key != "sections"}
    no_sections["article_id"] = "x3"
    bad_sentence = dict(good, article_id="x4", sections=[["fine ."], [3], ["fine ."]])
    path = write_jsonl(tmp_path / "train.txt", [good, mismatched, no_sections, bad_sentence])
    with pytest.raises(InputFormatError) as caught:
        run("scientific_papers", path, tmp_path)
    assert caught.value.line == 2 and caught.value.reason == "section_mismatch"
    assert "1 section_names but 3 sections" in str(caught.value)
    clusters, report = run("scientific_papers", path, tmp_path, skip_bad=True)
    assert [c["id"] for c in clusters] == ["1001.0001"]
    assert dict(report.skipped) == {"section_mismatch": 1, "missing_key": 1, "wrong_type": 1}
    assert report.skipped_examples[2].startswith(f"{path}:4: wrong type: sections[1][0] must be str")
    assert_accounted(report)
