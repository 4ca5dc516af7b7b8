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


# ----------------------------------------------------------------------------
# GovReport (Huang et al. 2021)
# ----------------------------------------------------------------------------

GOVREPORT = FIXTURES / "govreport" / "gov-report"


def test_govreport_folder_reads_the_split_ids_and_flattens_top_level_sections(tmp_path):
    clusters, report = run("govreport", GOVREPORT, tmp_path, split="test")
    assert [c["id"] for c in clusters] == ["R40001", "GAO-18-101"]
    crs, gao = clusters
    assert crs["documents"] == [
        "This report explains the program.",  # the untitled preamble of the CRS root
        "Introduction\n\nThe program began in 2001.\n\nIt grew quickly.\n\nBackground\n\nCongress acted first.",
        "Funding\n\nFunding rose each year.",
    ]
    assert crs["summary"] == "The program grew. Funding rose."
    assert gao["documents"] == [
        "Letter\n\nWe reviewed the agency.\n\nBackground\n\nThe agency was formed in 1990.\n\nMission\n\n"
        "It inspects ships.\n\nFindings\n\nInspections lag.",
        "Agency Comments\n\nThe agency agreed.",
    ]
    # Highlight paragraphs without their section titles.
    assert gao["summary"] == "Ships matter. Inspections lag. Staff is short."
    assert report.records_read == 2 and report.documents_written == 5
    assert dict(report.dropped_documents) == {"empty_section": 1}  # the CRS "Empty Appendix"
    assert_accounted(report)


def test_govreport_section_depth_two_splits_the_gao_letter(tmp_path):
    clusters, _ = run("govreport", GOVREPORT / "gao" / "GAO-18-101.json", tmp_path, section_depth=2)
    assert clusters[0]["documents"] == [
        "Letter\n\nWe reviewed the agency.",
        "Background\n\nThe agency was formed in 1990.\n\nMission\n\nIt inspects ships.",
        "Findings\n\nInspections lag.",
        "Agency Comments\n\nThe agency agreed.",
    ]
    clusters, report = run("govreport", GOVREPORT, tmp_path, split="test", subset="gao")
    assert [c["id"] for c in clusters] == ["GAO-18-101"] and report.records_read == 1
    # --split val reads split_ids/*_valid.ids, which the fixture does not have.
    with pytest.raises(FileNotFoundError, match="crs_valid.ids"):
        run("govreport", GOVREPORT, tmp_path, split="val", subset="crs")


def test_govreport_missing_and_broken_reports_are_located(tmp_path):
    root = tmp_path / "gov-report"
    (root / "split_ids").mkdir(parents=True)
    (root / "crs").mkdir()
    (root / "gao").mkdir()
    (root / "crs" / "R1.json").write_text((GOVREPORT / "crs" / "R40001.json").read_text().replace("R40001", "R1"))
    (root / "crs" / "R2.json").write_text('{\n  "reports": {\n    "section_title": ""\n    "paragraphs": []\n}\n')
    (root / "crs" / "R3.json").write_text(json.dumps({"reports": {"section_title": "", "paragraphs": [],
                                                                  "subsections": [{"paragraphs": ["x"]}]},
                                                      "summary": ["s"], "id": "R3"}))
    (root / "split_ids" / "crs_train.ids").write_text("R1\nR404\nR2\nR3\n")
    (root / "split_ids" / "gao_train.ids").write_text("")
    with pytest.raises(InputFormatError) as caught:
        run("govreport", root, tmp_path / "out")
    assert (caught.value.path, caught.value.line, caught.value.reason) == (
        str(root / "split_ids" / "crs_train.ids"), 2, "missing_file")
    clusters, report = run("govreport", root, tmp_path, skip_bad=True)
    assert [c["id"] for c in clusters] == ["R1"]
    assert dict(report.skipped) == {"missing_file": 1, "invalid_json": 1, "missing_key": 1}
    # The broken JSON is located in the report file itself, at its line.
    assert report.skipped_examples[1].startswith(f"{root / 'crs' / 'R2.json'}:4: not valid JSON")
    assert "reports.subsections[0]: missing key 'section_title'" in report.skipped_examples[2]
    assert_accounted(report)
