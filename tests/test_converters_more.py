"""Tests of the converters for the papers' remaining data sets and of ``mdsfair-convert hf`` (issue 23.1/23.2)."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as pa_ipc
import pyarrow.parquet as pa_parquet
import pytest

from mdsfair.preprocess.converters import CONVERTERS, ConversionOptions, InputFormatError, cli_main, convert

FIXTURES = Path(__file__).parent / "fixtures" / "converters"
SKIP_BAD = ConversionOptions(skip_bad=True)


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


NEW_FORMATS = {
    "scientific_papers": ["--whole-article", "--omit-section-names"],
    "govreport": ["--section-depth", "--subset"],
    "rottentomatoes": ["--text-column", "--summary-column", "--id-column"],
    "wikidomains": ["--text-column", "--summary-column", "--id-column"],
    "mred_plus": ["--text-column", "--summary-column", "--id-column", "--paragraph-separator"],
    "cnn_dailymail": ["--delimiter"],
    "hf": ["--preset", "--documents-column", "--summary-column", "--id-column", "--document-separator"],
}


@pytest.mark.parametrize("format_name", sorted(NEW_FORMATS))
def test_new_formats_are_registered_with_their_flags(format_name, capsys):
    assert format_name in CONVERTERS
    with pytest.raises(SystemExit) as exited:
        cli_main([format_name, "--help"])
    assert exited.value.code == 0
    help_text = capsys.readouterr().out
    for flag in NEW_FORMATS[format_name] + ["--skip-bad", "--split"]:
        assert flag in help_text, (format_name, flag)


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
    assert clusters[0]["documents"] == [
        "the model was introduced long ago . we compute its spectrum . the gap closes . this ends the paper ."
    ]
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
    clusters, report = run("scientific_papers", path, tmp_path, options=SKIP_BAD)
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
    (root / "crs" / "R3.json").write_text(
        json.dumps(
            {
                "reports": {"section_title": "", "paragraphs": [], "subsections": [{"paragraphs": ["x"]}]},
                "summary": ["s"],
                "id": "R3",
            }
        )
    )
    (root / "split_ids" / "crs_train.ids").write_text("R1\nR404\nR2\nR3\n")
    (root / "split_ids" / "gao_train.ids").write_text("")
    with pytest.raises(InputFormatError) as caught:
        run("govreport", root, tmp_path / "out")
    assert (caught.value.path, caught.value.line, caught.value.reason) == (
        str(root / "split_ids" / "crs_train.ids"),
        2,
        "missing_file",
    )
    clusters, report = run("govreport", root, tmp_path, options=SKIP_BAD)
    assert [c["id"] for c in clusters] == ["R1"]
    assert dict(report.skipped) == {"missing_file": 1, "invalid_json": 1, "missing_key": 1}
    # The broken JSON is located in the report file itself, at its line.
    assert report.skipped_examples[1].startswith(f"{root / 'crs' / 'R2.json'}:4: not valid JSON")
    assert "missing key: 'section_title' in reports.subsections[0]" in report.skipped_examples[2]
    assert_accounted(report)


# ----------------------------------------------------------------------------
# HierEncDec's Table 1 data sets: Rotten Tomatoes, WikiDomains, MReD+
# ----------------------------------------------------------------------------


def test_rottentomatoes_original_release_reviews_to_consensus(tmp_path):
    path = FIXTURES / "rottentomatoes" / "opinion_abstracts" / "rottentomatoes.json"
    clusters, report = run("rottentomatoes", path, tmp_path)
    assert clusters == [
        {
            "id": "m/a_quiet_film",
            "documents": ["Gentle and wise.", "A bit slow, but rewarding."],
            "summary": "A gentle, rewarding drama.",
        },
        {"id": "m/loud", "documents": ["Too loud by half."], "summary": "Loud."},
    ]
    assert dict(report.dropped_documents) == {"empty_review": 1}
    assert report.records_read == 2 and report.documents_written == 3
    assert_accounted(report)


def test_rottentomatoes_hierencdec_csv_takes_the_last_two_columns(tmp_path):
    path = FIXTURES / "rottentomatoes" / "hierencdec" / "test.csv"
    clusters, report = run("rottentomatoes", path, tmp_path, split="test")
    assert clusters[0] == {
        "id": "test-0",
        "documents": ["Great fun.", "Dull.", "Charming cast."],
        "summary": "Fun, charming.",
    }
    assert clusters[1]["documents"] == ["Only review."]
    assert dict(report.dropped_documents) == {"empty_review": 1}
    clusters, _ = run("rottentomatoes", path, tmp_path, split="test", id_column="movie")
    assert [c["id"] for c in clusters] == ["m/x", "m/y"]
    # Named columns win over the last two.
    clusters, _ = run("rottentomatoes", path, tmp_path, split="test", text_column="summary", summary_column="movie")
    assert clusters[0]["documents"] == ["Fun, charming."] and clusters[0]["summary"] == "m/x"


def test_wikidomains_reads_json_and_csv_and_prefixes_the_domain(tmp_path):
    root = FIXTURES / "wikidomains"
    clusters, report = run(
        "wikidomains", [root / "Film" / "test.json", root / "Town" / "test.csv"], tmp_path, split="test"
    )
    assert clusters == [
        {
            "id": "Film-test-0",
            "documents": ["Plot text.", "Cast text.\n\nMore cast.", "Reception text."],
            "summary": "X is a 1999 film.",
        },
        {"id": "Film-test-1", "documents": ["Only one section."], "summary": "Y is a film."},
        {"id": "Town-test-2", "documents": ["History text.", "Geography text."], "summary": "Z is a town."},
    ]
    assert report.documents_written == 6 and not report.dropped_documents
    assert_accounted(report)


def test_wikidomains_empty_sections_are_dropped_and_counted(tmp_path):
    """An empty section text (two <REVBREAK>s with only spaces between, or a trailing one) is dropped and
    counted as empty_section, the rest of the article kept; an article of only empty sections is bad input;
    --error-on-empty-document makes an empty section bad input too."""
    (tmp_path / "Software").mkdir()
    path = write_jsonl(
        tmp_path / "Software" / "test.json",
        [
            {"source": "Overview text. <REVBREAK>   <REVBREAK> History text.", "target": "S is software."},
            {"source": "Lone section. <REVBREAK> ", "target": "T is software."},
            {"source": " <REVBREAK> ", "target": "U is software."},
        ],
    )
    with pytest.raises(InputFormatError) as caught:
        run("wikidomains", path, tmp_path, split="test")
    assert (caught.value.line, caught.value.reason) == (3, "empty_cluster")
    assert "all 2 documents are empty" in str(caught.value)
    clusters, report = run("wikidomains", path, tmp_path, split="test", options=SKIP_BAD)
    assert clusters == [
        {"id": "Software-test-0", "documents": ["Overview text.", "History text."], "summary": "S is software."},
        {"id": "Software-test-1", "documents": ["Lone section."], "summary": "T is software."},
    ]
    assert dict(report.dropped_documents) == {"empty_section": 2}
    assert dict(report.skipped) == {"empty_cluster": 1} and report.documents_written == 3
    assert_accounted(report)
    clusters, report = run(
        "wikidomains",
        path,
        tmp_path,
        split="test",
        options=ConversionOptions(skip_bad=True, error_on_empty_document=True),
    )
    assert clusters == []
    assert dict(report.skipped) == {"empty_document": 2, "empty_cluster": 1}
    assert "empty section 2" in report.skipped_examples[0] and "empty section 2" in report.skipped_examples[1]
    assert not report.dropped_documents
    assert_accounted(report)


def test_mred_plus_splits_reviews_rebuttals_and_paragraphs(tmp_path):
    clusters, report = run("mred_plus", FIXTURES / "mred_plus" / "mred" / "test_rebuttal.json", tmp_path, split="test")
    assert clusters[0]["documents"] == [
        "Review one para one.\n\nReview one para two.",
        "Review two.",
        "We thank the reviewers.\n\nWe fixed it.",
    ]
    assert clusters[0]["summary"] == "The paper is accepted."
    assert clusters[1]["documents"] == ["Short review."]
    assert dict(report.dropped_documents) == {"empty_document": 1}
    assert_accounted(report)


def test_hierencdec_files_bad_rows_and_extensions(tmp_path):
    path = tmp_path / "train_rebuttal.json"
    path.write_text(
        "\n".join(
            [
                json.dumps({"text": "Review.", "summary": "Meta."}),
                json.dumps({"text": ["not", "a", "string"], "summary": "Meta."}),
                json.dumps({"only": "one column"}),
                "{broken",
                json.dumps({"text": " <REVBREAK> ", "summary": "Meta."}),
                json.dumps({"text": "Review.", "summary": ""}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(InputFormatError) as caught:
        run("mred_plus", path, tmp_path)
    assert (caught.value.line, caught.value.reason) == (2, "wrong_type")
    clusters, report = run("mred_plus", path, tmp_path, options=SKIP_BAD)
    assert [c["id"] for c in clusters] == ["train-0"]
    assert dict(report.skipped) == {
        "wrong_type": 1,
        "missing_key": 1,
        "invalid_json": 1,
        "empty_cluster": 1,
        "empty_summary": 1,
    }
    assert [example.split(": ")[0] for example in report.skipped_examples] == [f"{path}:{n}" for n in range(2, 7)]
    assert_accounted(report)
    other = tmp_path / "train.tsv"
    other.write_text("text\tsummary\n", encoding="utf-8")
    with pytest.raises(ValueError, match="HierEncDec data files are .csv or .json"):
        run("wikidomains", other, tmp_path)


# ----------------------------------------------------------------------------
# CNN/DailyMail
# ----------------------------------------------------------------------------

CNNDM_EXPECTED = [
    {
        "id": "0001d1afc246a7964130f43ae940af6bc6c57f01",
        "documents": ["By . Staff Reporter . PUBLISHED: . 12:00 . The council voted on Monday.\n\nResidents cheered."],
        "summary": "Council votes on Monday . Residents cheer .",
    },
    {
        "id": "0002095e55fcbd3a2f366d9bf92a95433dc305ef",
        "documents": ["(CNN) -- A storm hit the coast."],
        "summary": "Storm hits coast .",
    },
]


def test_cnn_dailymail_csv_and_jsonl_give_single_document_clusters(tmp_path):
    for name in ("test.csv", "validation.jsonl"):
        clusters, report = run("cnn_dailymail", FIXTURES / "cnn_dailymail" / name, tmp_path, split="test")
        assert clusters == CNNDM_EXPECTED, name
        assert report.records_read == 2 and report.documents_written == 2
        assert_accounted(report)


def test_cnn_dailymail_bad_rows_are_located(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text(
        'id,article,highlights\na,"Text one.",Sum one.\nb,"  ",Sum two.\nc,Text three.\nd,"Text four.",""\n',
        encoding="utf-8",
    )
    with pytest.raises(InputFormatError) as caught:
        run("cnn_dailymail", path, tmp_path)
    assert (caught.value.line, caught.value.reason) == (3, "empty_cluster")
    clusters, report = run("cnn_dailymail", path, tmp_path, options=SKIP_BAD)
    assert [c["id"] for c in clusters] == ["a"]
    assert dict(report.skipped) == {"empty_cluster": 1, "malformed_csv_row": 1, "empty_summary": 1}
    assert_accounted(report)
    jsonl = write_jsonl(tmp_path / "train.jsonl", [{"id": "x", "article": "A."}])
    with pytest.raises(InputFormatError, match="train.jsonl:1: missing key: 'highlights' "):
        run("cnn_dailymail", jsonl, tmp_path)


# ----------------------------------------------------------------------------
# mdsfair-convert hf: Parquet, Arrow, save_to_disk
# ----------------------------------------------------------------------------


MULTI_NEWS_ROWS = {
    "document": [
        "Story one.\nSecond line. ||||| Story two. ||||| ",
        "Only story |||||   |||||  Third story.",
        "Lone story without separator.",
    ],
    "summary": ["– Summary one.", "Summary two.", "Summary three."],
}


def write_parquet(path, columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pa_parquet.write_table(pa.table(columns), path)
    return path


def write_arrow_stream(path, columns):
    """An Arrow IPC stream, as datasets' ArrowWriter writes its data-*.arrow files."""
    table = pa.table(columns)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa_ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def write_save_to_disk(folder, columns, split="train"):
    """The layout of datasets' Dataset.save_to_disk: data-00000-of-00001.arrow, dataset_info.json, state.json."""
    write_arrow_stream(folder / "data-00000-of-00001.arrow", columns)
    features = {name: {"dtype": "string", "_type": "Value"} for name in columns}
    (folder / "dataset_info.json").write_text(
        json.dumps({"citation": "", "description": "", "features": features, "homepage": "", "license": ""}),
        encoding="utf-8",
    )
    (folder / "state.json").write_text(
        json.dumps(
            {
                "_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                "_fingerprint": "0123456789abcdef",
                "_format_columns": None,
                "_format_kwargs": {},
                "_format_type": None,
                "_output_all_columns": False,
                "_split": split,
            }
        ),
        encoding="utf-8",
    )
    return folder


def test_hf_multi_news_preset_on_parquet(tmp_path):
    path = write_parquet(tmp_path / "default" / "train" / "0000.parquet", MULTI_NEWS_ROWS)
    clusters, report = run("hf", tmp_path, tmp_path, preset="multi_news")
    assert clusters == [
        {"id": "train-0", "documents": ["Story one. Second line.", "Story two."], "summary": "Summary one."},
        {"id": "train-1", "documents": ["Only story", "Third story."], "summary": "Summary two."},
        {"id": "train-2", "documents": ["Lone story without separator."], "summary": "Summary three."},
    ]
    assert report.records_read == 3 and report.documents_written == 5
    # HF's multi_news.py keeps the en dash ("– ".lstrip("- ") is unchanged); the preset strips and counts it.
    assert "\u2013 Summary one.".lstrip("- ") == "\u2013 Summary one."
    assert dict(report.notes) == {"trailing_separator": 1, "summary_dash_prefix_stripped": 1}
    assert dict(report.dropped_documents) == {"empty_document": 1}
    assert_accounted(report)
    # Without the preset the summary is left as it is.
    clusters, _ = run("hf", path, tmp_path, document_separator="|||||")
    assert clusters[0]["summary"] == "\u2013 Summary one."
    # The file itself reads the same; an explicit separator overrides the preset's.
    clusters, _ = run("hf", path, tmp_path, preset="multi_news", document_separator="NONE")
    assert [len(c["documents"]) for c in clusters] == [1, 1, 1]


# ccdv/arxiv-summarization and ccdv/pubmed-summarization (their dataset cards): columns article, abstract; the
# pre-tokenized text of Cohan et al. 2018 joined with spaces, "\n" between paragraphs; no id column. The Hub's
# Parquet has one folder per config ("section", the default, and "document"), a folder per split in it.
SCIENTIFIC_PAPERS_ROWS = {
    "article": [
        "we study a toy model .\nits spectrum is computed exactly .\nthe gap closes .",
        "  \n ",
        "patients were enrolled in 2001 .\n\noutcomes improved .",
    ],
    "abstract": [
        "we study the spectrum of a toy model .\nthe gap closes at weak coupling .",
        "an abstract without a body .",
        "outcomes of a trial .",
    ],
}


@pytest.mark.parametrize("preset", ["arxiv", "pubmed"])
def test_hf_arxiv_and_pubmed_presets_on_the_ccdv_parquet_layout(preset, tmp_path):
    section_config = tmp_path / "section"
    write_parquet(section_config / "validation" / "0000.parquet", SCIENTIFIC_PAPERS_ROWS)
    write_parquet(
        section_config / "train" / "0000.parquet", {"article": ["a train paper ."], "abstract": ["train abstract ."]}
    )
    # The second paper's article is only whitespace (PubMed has such papers): an empty cluster, bad input.
    with pytest.raises(InputFormatError) as caught:
        run("hf", section_config, tmp_path, split="val", preset=preset)
    assert (caught.value.path, caught.value.line, caught.value.reason) == (
        str(section_config / "validation" / "0000.parquet"),
        2,
        "empty_cluster",
    )
    clusters, report = run("hf", section_config, tmp_path, split="val", preset=preset, options=SKIP_BAD)
    # The article is one document (single newlines are not paragraph breaks; a blank line is); the abstract
    # is one line; ids are SPLIT-ROW since the layout has no id column.
    assert clusters == [
        {
            "id": "val-0",
            "documents": ["we study a toy model . its spectrum is computed exactly . the gap closes ."],
            "summary": "we study the spectrum of a toy model . the gap closes at weak coupling .",
        },
        {
            "id": "val-2",
            "documents": ["patients were enrolled in 2001 .\n\noutcomes improved ."],
            "summary": "outcomes of a trial .",
        },
    ]
    assert report.records_read == 3 and report.clusters_written == 2 and report.documents_written == 2
    assert dict(report.skipped) == {"empty_cluster": 1} and not report.dropped_documents
    assert_accounted(report)
    clusters, _ = run("hf", section_config, tmp_path, split="train", preset=preset)
    assert clusters == [{"id": "train-0", "documents": ["a train paper ."], "summary": "train abstract ."}]


def test_hf_cnn_dailymail_preset_on_the_hub_parquet_layout(tmp_path):
    """abisee/cnn_dailymail's Parquet (config folder 3.0.0/, files SPLIT-0000N-of-0000M.parquet; columns
    article, highlights, id) gives the clusters that mdsfair-convert cnn_dailymail gives for the CSV export."""
    config = tmp_path / "3.0.0"
    rows = read_jsonl(FIXTURES / "cnn_dailymail" / "validation.jsonl")
    columns = {name: [row[name] for row in rows] for name in ("article", "highlights", "id")}
    write_parquet(config / "test-00000-of-00001.parquet", columns)
    write_parquet(
        config / "train-00000-of-00001.parquet",
        {"article": ["Train story."], "highlights": ["Train ."], "id": ["0003"]},
    )
    clusters, report = run("hf", config, tmp_path, split="test", preset="cnn_dailymail")
    assert clusters == CNNDM_EXPECTED
    # The highlights' newline-separated sentences are one summary line; the article's blank line is kept.
    assert "\n" in columns["highlights"][0] and "\n\n" in clusters[0]["documents"][0]
    assert report.records_read == 2 and report.clusters_written == 2 and report.documents_written == 2
    assert not report.skipped and not report.dropped_documents
    assert_accounted(report)
    clusters, _ = run("hf", config, tmp_path, split="train", preset="cnn_dailymail")
    assert clusters == [{"id": "0003", "documents": ["Train story."], "summary": "Train ."}]
    # Without the preset the default columns (document, summary) are not there: named in the error.
    with pytest.raises(
        InputFormatError,
        match=r"column\(s\) \['document', 'summary'\] not in the table's columns "
        r"\['article', 'highlights', 'id'\]",
    ):
        run("hf", config, tmp_path, split="test")


def test_hf_folder_of_splits_picks_the_split(tmp_path):
    write_parquet(tmp_path / "data" / "train-00000-of-00001.parquet", {"document": ["a"], "summary": ["s"]})
    write_parquet(
        tmp_path / "data" / "validation-00000-of-00001.parquet", {"document": ["v1", "v2"], "summary": ["t1", "t2"]}
    )
    clusters, _ = run("hf", tmp_path, tmp_path / "out", split="val")
    assert [c["documents"] for c in clusters] == [["v1"], ["v2"]]
    clusters, _ = run("hf", tmp_path, tmp_path / "out", split="train")
    assert clusters == [{"id": "train-0", "documents": ["a"], "summary": "s"}]
    with pytest.raises(ValueError, match=r"splits \['train', 'validation'\], none of split 'test'"):
        run("hf", tmp_path, tmp_path / "out", split="test")


def test_hf_multi_x_science_preset_reads_struct_and_list_columns(tmp_path):
    columns = {
        "aid": ["1234.5678", "1234.9999"],
        "mid": ["m1", "m2"],
        "abstract": ["Our abstract.", "Second abstract."],
        "related_work": ["Prior work @cite_1 did x.", "Related."],
        "ref_abstract": [
            {"cite_N": ["@cite_1", "@cite_2"], "mid": ["a", "b"], "abstract": ["Cited one.", ""]},
            {"cite_N": [], "mid": [], "abstract": []},
        ],
    }
    path = write_parquet(tmp_path / "test.parquet", columns)
    clusters, report = run("hf", path, tmp_path, split="test", preset="multi_x_science")
    assert clusters == [
        {"id": "1234.5678", "documents": ["Our abstract.", "Cited one."], "summary": "Prior work @cite_1 did x."},
        {"id": "1234.9999", "documents": ["Second abstract."], "summary": "Related."},
    ]
    assert dict(report.dropped_documents) == {"empty_document": 1}
    assert_accounted(report)


def test_hf_list_column_arrow_file_and_save_to_disk(tmp_path):
    columns = {
        "document": [["Article one.", "Article two."], ["Only article."]],
        "summary": ["Event one.", "Event two."],
        "id": ["e1", "e2"],
    }
    expected = [
        {"id": "e1", "documents": ["Article one.", "Article two."], "summary": "Event one."},
        {"id": "e2", "documents": ["Only article."], "summary": "Event two."},
    ]
    arrow = write_arrow_stream(tmp_path / "wcep.arrow", columns)
    clusters, _ = run("hf", arrow, tmp_path, preset="wcep10")  # ccdv/WCEP-10's card: id, document, summary
    assert clusters == expected
    # An Arrow IPC *file* (Feather v2) reads the same.
    table = pa.table(columns)
    with pa.OSFile(str(tmp_path / "wcep.feather"), "wb") as sink, pa_ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    clusters, _ = run("hf", tmp_path / "wcep.feather", tmp_path, preset="wcep10")
    assert clusters == expected
    # save_to_disk: a Dataset folder, and a DatasetDict folder with a split per sub-folder.
    # WCEP-10's newline config: '\\n' on the command line means a newline.
    newline = write_parquet(tmp_path / "newline.parquet", {"document": ["A.\nB."], "summary": ["S."]})
    clusters, _ = run("hf", newline, tmp_path, preset="wcep10", document_separator="\\n", id_column="")
    assert clusters[0]["documents"] == ["A.", "B."]
    saved = write_save_to_disk(tmp_path / "saved", {"document": ["A. </s> B.", "C."], "summary": ["S1.", "S2."]})
    with pytest.raises(InputFormatError, match=r"column\(s\) \['id'\] not in the table's columns"):
        run("hf", saved, tmp_path, preset="wcep10")
    clusters, _ = run("hf", saved, tmp_path, preset="wcep10", id_column="")  # '' = no id column
    assert [c["documents"] for c in clusters] == [["A.", "B."], ["C."]]
    assert [c["id"] for c in clusters] == ["train-0", "train-1"]
    dictionary = tmp_path / "dict"
    write_save_to_disk(dictionary / "train", {"document": ["T."], "summary": ["ST."]})
    write_save_to_disk(dictionary / "validation", {"document": ["V."], "summary": ["SV."]}, split="validation")
    (dictionary / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation"]}))
    clusters, _ = run("hf", dictionary, tmp_path, split="val")
    assert clusters == [{"id": "val-0", "documents": ["V."], "summary": "SV."}]
    with pytest.raises(ValueError, match=r"no split 'test'; its splits are \['train', 'validation'\]"):
        run("hf", dictionary, tmp_path, split="test")
    # A save_to_disk folder whose Arrow columns are not the features of dataset_info.json is refused.
    info = json.loads((saved / "dataset_info.json").read_text())
    info["features"]["extra"] = {"dtype": "string", "_type": "Value"}
    (saved / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(InputFormatError, match="differ from the features"):
        run("hf", saved, tmp_path)


def test_hf_field_of_a_list_of_structs(tmp_path):
    """WCEP's own layout as a table: articles = list of {title, text}; articles.text reads every text."""
    columns = {
        "id": [7, 8],
        "summary": ["Event.", "Other."],
        "articles": [[{"title": "T1", "text": "Text one."}, {"title": "T2", "text": None}], None],
    }
    path = write_parquet(tmp_path / "val.parquet", columns)
    hf_options = dict(documents_columns=["articles.text"], id_column="id", split="val")
    with pytest.raises(InputFormatError) as caught:
        run("hf", path, tmp_path, **hf_options)
    assert (caught.value.line, caught.value.reason) == (2, "empty_cluster")
    clusters, report = run("hf", path, tmp_path, options=SKIP_BAD, **hf_options)
    assert clusters == [{"id": "7", "documents": ["Text one."], "summary": "Event."}]
    assert dict(report.dropped_documents) == {"empty_document": 1} and dict(report.skipped) == {"empty_cluster": 1}
    with pytest.raises(
        InputFormatError,
        match=r"val.parquet:1: missing key: column 'articles.body': no field 'body' "
        r"\(fields: \['text', 'title'\]\)",
    ):
        run("hf", path, tmp_path, documents_columns=["articles.body"], split="val")


def test_hf_bad_rows_are_located_by_row_number_and_counted(tmp_path):
    columns = {
        "text": ["Good.", None, "Fine.", "Also fine.", "x ||| y"],
        "target": ["S.", "S.", "", None, "S5."],
        "key": ["a", "b", "c", "d", "a"],
    }
    path = write_parquet(tmp_path / "train.parquet", columns)
    hf_options = dict(documents_columns=["text"], summary_column="target", id_column="key", document_separator="|||")
    with pytest.raises(InputFormatError) as caught:
        run("hf", path, tmp_path, **hf_options)
    assert (caught.value.path, caught.value.line, caught.value.reason) == (str(path), 2, "empty_cluster")
    clusters, report = run("hf", path, tmp_path, options=SKIP_BAD, **hf_options)
    assert clusters == [{"id": "a", "documents": ["Good."], "summary": "S."}]
    assert dict(report.skipped) == {"empty_cluster": 1, "empty_summary": 2, "duplicate_id": 1}
    assert [example.split(": ")[0] for example in report.skipped_examples] == [f"{path}:{row}" for row in (2, 3, 4, 5)]
    assert not report.notes  # the null text's note goes with its skipped cluster
    assert_accounted(report)
    # A column that is not in the table is fatal even with --skip-bad, naming the columns there are.
    missing = r"column\(s\) \['document', 'summary'\] not in the table's columns \['text', 'target', 'key'\]"
    with pytest.raises(InputFormatError, match=missing):
        run("hf", path, tmp_path, options=SKIP_BAD)
    wrong = write_parquet(tmp_path / "wrong" / "train.parquet", {"document": [1, 2], "summary": ["s", "t"]})
    with pytest.raises(InputFormatError, match=r"train.parquet:1: wrong type: column 'document' must be a string"):
        run("hf", wrong, tmp_path)
    not_a_table = tmp_path / "broken.parquet"
    not_a_table.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(InputFormatError, match="not a Parquet file"):
        run("hf", not_a_table, tmp_path)


def test_hf_cli_with_preset_and_repeated_columns(tmp_path, capsys):
    path = write_parquet(tmp_path / "test.parquet", {"abstract": ["Abs."], "ref": [["R1.", "R2."]], "rw": ["Related."]})
    output = tmp_path / "cli.jsonl"
    assert (
        cli_main(
            [
                "hf",
                str(path),
                "-o",
                str(output),
                "--split",
                "test",
                "--documents-column",
                "abstract",
                "--documents-column",
                "ref",
                "--summary-column",
                "rw",
            ]
        )
        == 0
    )
    assert read_jsonl(output) == [{"id": "test-0", "documents": ["Abs.", "R1.", "R2."], "summary": "Related."}]
    assert "documents written:    3" in capsys.readouterr().out
    assert cli_main(["hf", str(path), "-o", str(output), "--preset", "arxiv"]) == 1
    assert "column(s) ['article'] not in the table's columns ['abstract', 'ref', 'rw']" in (capsys.readouterr().err)
