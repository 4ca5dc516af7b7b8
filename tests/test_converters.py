"""Tests of mdsfair.preprocess.converters: each release format on its fixture, bad input, skip mode, CLI."""

import argparse
import ast
import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from mdsfair.preprocess import converters
from mdsfair.preprocess.converters import (
    CONVERTERS,
    ConversionOptions,
    ConversionReport,
    InputFormatError,
    cli_main,
    convert,
    iter_multinews,
    iter_wcep,
    normalize_document,
)

FIXTURES = Path(__file__).parent / "fixtures" / "converters"
PEERSUM_SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "peersum_sample" / "jsonl"
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


def write_lines(path, lines):
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n" for line in lines))
    return path


def wcep_event(event_id, summary="A summary.", texts=("Article one.", "Article two.")):
    return json.dumps(
        {"id": event_id, "summary": summary, "articles": [{"title": f"t{i}", "text": t} for i, t in enumerate(texts)]}
    )


# ----------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------


def test_registry_names_every_format():
    assert set(CONVERTERS) == {
        "multinews",
        "wcep",
        "multixscience",
        "csv",
        "mred",
        "wikisum",
        "wikisum_hiersumm",
        "peersum",
        "scientific_papers",
        "govreport",
        "rottentomatoes",
        "wikidomains",
        "mred_plus",
        "cnn_dailymail",
        "hf",
    }


CONVERTERS_PACKAGE = Path(converters.__file__).parent
#: lines of a format module as ruff formats it (ruff.toml: one argument a line once a call passes 120 columns)
FORMAT_MODULE_MAX_LINES = 250


def _format_module_files():
    """The package's format modules: every public .py file that is not infrastructure."""
    return sorted(
        path
        for path in CONVERTERS_PACKAGE.glob("*.py")
        if not path.stem.startswith("_") and path.stem not in converters.INFRASTRUCTURE_MODULES
    )


def test_every_format_module_is_small_self_contained_and_registered():
    registered_by = {}
    for name, function in CONVERTERS.items():
        package, _, module = function.__module__.rpartition(".")
        assert package == converters.__name__, (name, function.__module__)
        registered_by.setdefault(module, []).append(name)
        # A format's CLI flags live in its own module, next to the generator they feed.
        add_arguments = converters.CONVERTER_ARGUMENTS[name]
        assert add_arguments is None or add_arguments.__module__ == function.__module__, name
    files = _format_module_files()
    assert {path.stem for path in files} == set(registered_by)
    assert registered_by["hierencdec_csv"] == ["csv", "mred"]
    assert all(len(formats) == 1 for module, formats in registered_by.items() if module != "hierencdec_csv")
    for path in files:
        source = path.read_text(encoding="utf-8")
        assert source.count("\n") <= FORMAT_MODULE_MAX_LINES, f"{path.name} has {source.count(chr(10))} lines"
        tree = ast.parse(source)
        relative = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
        absolute = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level}
        absolute |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        # Only the shared machinery (common, registry, the readers) and the torch-free foundation modules whose
        # names it uses (the raw contract's codes and error, the paragraph separator, flag types), never another
        # format module (nor mdsfair at large).
        assert all(module in {"common", "registry"} or module.startswith("readers.") for module in relative), (
            path.name,
            relative,
        )
        foundation = {"mdsfair.raw_contract", "mdsfair.text", "mdsfair.argument_types"}
        assert not any(module.split(".")[0] in ("mdsfair", "preprocess") for module in absolute - foundation), (
            path.name,
            absolute,
        )


@pytest.fixture
def toy_format():
    """Register a throw-away format for one test, and remove it afterwards."""

    def add_arguments(parser):
        parser.add_argument("--shout", action="store_true", help="upper-case the summary")

    received_options = []

    @converters.register_converter("toy_lines", add_arguments=add_arguments)
    def iter_toy_lines(inputs, split="train", *, shout=False, options=ConversionOptions()):
        """Toy: one document per line, the summary is the first word of each line."""
        received_options.append(options)
        for index, path in enumerate(converters.common.as_paths(inputs)):
            lines = Path(path).read_text(encoding="utf-8").split("\n")
            summary = " ".join(line.split()[0] for line in lines if line.strip())
            options.report.records_read += 1
            options.report.clusters_written += 1
            yield {
                "id": f"{split}-{index}",
                "documents": [line for line in lines if line.strip()],
                "summary": summary.upper() if shout else summary,
            }

    iter_toy_lines.received_options = received_options
    yield iter_toy_lines
    del converters.CONVERTERS["toy_lines"]
    del converters.CONVERTER_ARGUMENTS["toy_lines"]


def test_cli_formats_are_read_from_the_registry(toy_format, tmp_path, capsys):
    parser = converters.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(subparsers.choices) == list(CONVERTERS)
    assert "toy_lines" in subparsers.choices
    assert converters.format_options("toy_lines") == ["shout"]
    source = tmp_path / "toy.txt"
    source.write_text("alpha one\nbeta two\n", encoding="utf-8")
    output = tmp_path / "toy.jsonl"
    assert cli_main(["toy_lines", str(source), "-o", str(output), "--shout", "--split", "dev"]) == 0
    assert read_jsonl(output) == [{"id": "dev-0", "documents": ["alpha one", "beta two"], "summary": "ALPHA BETA"}]
    assert "clusters written:     1" in capsys.readouterr().out


def test_cli_hands_the_common_flags_to_the_format_as_one_options_object(toy_format, tmp_path, capsys):
    source = tmp_path / "toy.txt"
    source.write_text("alpha one\n", encoding="utf-8")
    output = tmp_path / "toy.jsonl"
    assert cli_main(["toy_lines", str(source), "-o", str(output), "--skip-bad", "--error-on-empty-document"]) == 0
    assert cli_main(["toy_lines", str(source), "-o", str(output), "--allow-empty-summary", "--shout"]) == 0
    first, second = toy_format.received_options
    assert (first.skip_bad, first.allow_empty_summary, first.error_on_empty_document) == (True, False, True)
    assert (second.skip_bad, second.allow_empty_summary, second.error_on_empty_document) == (False, True, False)
    assert first.report is not second.report and second.report.output_path == str(output)
    assert "clusters written:     1" in capsys.readouterr().out
    # The policy is no format option: convert() takes it only as ``options``.
    with pytest.raises(TypeError, match=r"format 'toy_lines' does not take \['skip_bad'\]; it takes \['shout'\]"):
        convert("toy_lines", source, output, skip_bad=True)


def test_an_options_report_is_counted_into_by_convert(tmp_path):
    path = write_lines(tmp_path / "test.jsonl", [wcep_event(1), b"{oops", wcep_event(3, summary="")])
    report = ConversionReport()
    options = ConversionOptions(skip_bad=True, allow_empty_summary=True, report=report)
    assert convert("wcep", path, tmp_path / "out.jsonl", split="test", options=options) is report
    assert (report.format_name, report.split, report.output_path) == ("wcep", "test", str(tmp_path / "out.jsonl"))
    assert (report.clusters_written, dict(report.skipped)) == (2, {"invalid_json": 1})
    assert options == ConversionOptions(skip_bad=True, allow_empty_summary=True)  # the report is not compared


def test_registry_rejects_duplicates_bad_names_and_incomplete_generators(toy_format):
    def iter_other(inputs, split="train", *, options=ConversionOptions()):
        """Other."""
        yield from ()

    with pytest.raises(ValueError, match="'toy_lines' registered twice"):
        converters.register_converter("toy_lines")(iter_other)
    with pytest.raises(ValueError, match="lower-case identifier"):
        converters.register_converter("Toy-Lines")
    with pytest.raises(ValueError, match=r"lacks the parameters \['options'\]"):
        converters.register_converter("toy_incomplete")(lambda inputs, split, skip_bad=False: iter(()))
    assert "toy_incomplete" not in CONVERTERS


def test_unknown_format_gives_a_clear_error(tmp_path, capsys):
    source = write_lines(tmp_path / "in.jsonl", [wcep_event(1)])
    with pytest.raises(ValueError, match=r"unknown format 'nosuch'; choose from \['cnn_dailymail', 'csv', 'govreport'"):
        convert("nosuch", source, tmp_path / "out.jsonl")
    with pytest.raises(ValueError, match="unknown format 'nosuch'"):
        converters.format_options("nosuch")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["nosuch", str(source), "-o", str(tmp_path / "out.jsonl")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nosuch'" in err and "'multinews'" in err and "'peersum'" in err
    assert not (tmp_path / "out.jsonl").exists()


# ----------------------------------------------------------------------------
# Multi-News
# ----------------------------------------------------------------------------


def test_multinews_preprocessed_release(tmp_path):
    clusters, report = run("multinews", FIXTURES / "multinews" / "train.src.cleaned", tmp_path)
    assert clusters == [
        {
            "id": "train-0",
            "documents": [
                "Police said Tuesday that the bridge will reopen .\n\n"
                "Officials expect heavy traffic during the morning .",
                "The bridge closed in May after a crack was found .\n\nRepairs cost $ 2 million .",
            ],
            "summary": "The Elm Street bridge reopens this week after a four-month closure , officials say .",
        },
        {
            "id": "train-1",
            "documents": ["A storm hit the coast .", "Thousands lost power .\n\nCrews worked overnight ."],
            "summary": "A storm knocked out power to thousands along the coast .",
        },
        {
            "id": "train-2",
            "documents": ["The museum opened a new wing . It features modern art ."],
            "summary": "The museum 's new wing showcases modern art .",
        },
    ]
    assert report.clusters_written == 3 and report.documents_written == 5
    assert report.dropped_documents == Counter({"empty_document": 1})
    assert report.notes == Counter({"summary_dash_prefix_stripped": 3})
    assert report.inputs[-1].endswith("train.tgt")
    assert_accounted(report)


def test_multinews_raw_release_with_trailing_separators(tmp_path):
    clusters, report = run("multinews", FIXTURES / "multinews" / "val.src", tmp_path, split="valid")
    assert clusters == [
        {
            "id": "valid-0",
            "documents": ["First story, line one.\n\nFirst story, line two.", "Second story."],
            "summary": "Two stories were told.",
        },
        {"id": "valid-1", "documents": ["Only story. Still the only story."], "summary": "One story was told."},
    ]
    # The "|||||" the raw release appends to every story is not an empty document.
    assert report.dropped_documents == Counter()


def test_multinews_generator_with_explicit_targets(tmp_path):
    source = write_lines(tmp_path / "a.source", ["Doc one . story_separator_special_tag Doc two ."])
    target = write_lines(tmp_path / "b.target", ["- A hyphen-led summary ."])
    report = ConversionReport()
    clusters = list(iter_multinews([source], "test", targets=[target], options=ConversionOptions(report=report)))
    assert clusters == [{"id": "test-0", "documents": ["Doc one .", "Doc two ."], "summary": "A hyphen-led summary ."}]
    assert report.clusters_written == 1 and report.format_name == "multinews"


def test_multinews_missing_target_file(tmp_path):
    source = write_lines(tmp_path / "train.src", ["Doc ."])
    with pytest.raises(FileNotFoundError, match="train.tgt"):
        list(iter_multinews(source))


@pytest.mark.parametrize("skip_bad", [False, True])
def test_multinews_misaligned_files_are_fatal_and_leave_no_output(tmp_path, skip_bad):
    source = write_lines(tmp_path / "train.src", ["Doc one .", "Doc two .", "Doc three ."])
    write_lines(tmp_path / "train.tgt", ["– One .", "– Two ."])
    output = tmp_path / "out.jsonl"
    with pytest.raises(InputFormatError) as info:
        convert("multinews", source, output, options=ConversionOptions(skip_bad=skip_bad))
    assert info.value.reason == converters.MISALIGNED_FILES
    assert info.value.line == 3 and info.value.path == str(source)
    assert not info.value.skippable
    assert not output.exists() and not [path for path in tmp_path.iterdir() if path.name.endswith(".partial")]


def test_multinews_invalid_utf8_in_target_names_target_and_line(tmp_path):
    source = write_lines(tmp_path / "train.src", ["Doc one .", "Doc two ."])
    target = write_lines(tmp_path / "train.tgt", ["– One .", b"\xe2\x80\x93 Tw\xffo ."])
    with pytest.raises(InputFormatError) as info:
        list(iter_multinews(source))
    assert info.value.path == str(target) and info.value.line == 2
    assert info.value.reason == converters.INVALID_UTF8
    assert f"{target}:2: invalid UTF-8: byte 0xff" in str(info.value)


# ----------------------------------------------------------------------------
# WCEP
# ----------------------------------------------------------------------------

WCEP_DEFAULT = [
    {
        "id": "7421",
        "documents": [
            "An earthquake struck north-western Tanzania on Saturday. At least 16 people died.\n\n"
            "The quake was felt in Uganda and Rwanda.",
            "Rescue teams reached Bukoba, the worst-hit town.",
        ],
        "summary": "A magnitude 5.7 earthquake strikes the Kagera Region of Tanzania, killing at least 16 people.",
    },
    {
        "id": "7422",
        "documents": [
            "Croatians voted on Sunday for the second time in a year.",
            "Turnout was lower than in 2015.",
            "The HDZ party claimed victory late on Sunday.",
        ],
        "summary": "Voters in Croatia go to the polls in a snap parliamentary election.",
    },
]


def test_wcep_release(tmp_path):
    clusters, report = run("wcep", FIXTURES / "wcep" / "val.jsonl", tmp_path, split="val")
    assert clusters == WCEP_DEFAULT
    assert report.dropped_documents == Counter({"empty_document": 1})
    assert report.documents_written == 5
    assert_accounted(report)


def test_wcep_gzipped_with_titles_and_max_articles(tmp_path):
    gz = tmp_path / "val.jsonl.gz"
    with gzip.open(gz, "wb") as handle:
        handle.write((FIXTURES / "wcep" / "val.jsonl").read_bytes())
    clusters, report = run("wcep", gz, tmp_path, split="val", prepend_titles=True, max_articles=2)
    assert clusters[0]["documents"] == [
        "Tanzania earthquake kills 16\n\nAn earthquake struck north-western Tanzania on Saturday. "
        "At least 16 people died.\n\nThe quake was felt in Uganda and Rwanda."
    ]
    assert clusters[1]["documents"] == [
        "Croatia votes again\n\nCroatians voted on Sunday for the second time in a year.",
        "Turnout low in Croatian election\n\nTurnout was lower than in 2015.",
    ]
    assert report.truncated == Counter({"articles_beyond_max_articles": 2})


# ----------------------------------------------------------------------------
# Multi-XScience
# ----------------------------------------------------------------------------


def test_multixscience_release(tmp_path):
    clusters, report = run("multixscience", FIXTURES / "multixscience" / "test.json", tmp_path, split="test")
    assert clusters == [
        {
            "id": "math9912167",
            "documents": [
                "We give a purely topological definition of the perturbative quantum invariants of "
                "links and 3-manifolds. Our definition is as close as possible to one given by "
                "Kontsevich.",
                "This note is a sequel to our earlier paper of the same title.",
                "We calculate the Casson-Walker invariant of the 2-fold cyclic branched cover.",
            ],
            "summary": "Two other generalizations can be considered @cite_16 . Among other things, there "
            "should be a general relation @cite_26 .",
        },
        {
            "id": "1710.01234",
            "documents": ["We study sparse attention for long documents.", "We propose a sparse transformer."],
            "summary": "Sparse attention has been studied widely @cite_3 .",
        },
    ]
    assert report.dropped_documents == Counter({"empty_cited_abstract": 1})


def test_multixscience_huggingface_columnar_layout(tmp_path):
    paper = {
        "aid": "x1",
        "mid": "1",
        "abstract": "Main.",
        "related_work": "Related @cite_1 .",
        "ref_abstract": {"cite_N": ["@cite_1", "@cite_2"], "mid": ["2", "3"], "abstract": ["Cited.", ""]},
    }
    path = tmp_path / "hf.jsonl"
    path.write_text(json.dumps(paper) + "\n", encoding="utf-8")
    clusters, report = run("multixscience", path, tmp_path)
    assert clusters == [{"id": "x1", "documents": ["Main.", "Cited."], "summary": "Related @cite_1 ."}]
    assert report.dropped_documents == Counter({"empty_cited_abstract": 1})


def test_multixscience_missing_key_reports_line_where_list_element_starts(tmp_path):
    papers = json.loads((FIXTURES / "multixscience" / "test.json").read_text(encoding="utf-8"))
    del papers[1]["related_work"]
    path = tmp_path / "test.json"
    path.write_text(json.dumps(papers, indent=2), encoding="utf-8")
    element_starts = [
        number for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line == "  {"
    ]
    start_line = element_starts[1]
    with pytest.raises(InputFormatError) as info:
        run("multixscience", path, tmp_path, split="test")
    assert info.value.reason == converters.MISSING_KEY and info.value.line == start_line
    assert "'related_work'" in str(info.value)

    clusters, report = run("multixscience", path, tmp_path, split="test", options=SKIP_BAD)
    assert [c["id"] for c in clusters] == ["math9912167"]
    assert report.skipped == Counter({"missing_key": 1})
    assert f"{path}:{start_line}: missing key" in report.skipped_examples[0]


def test_broken_json_list_is_fatal_even_when_skipping(tmp_path):
    path = tmp_path / "test.json"
    path.write_text(
        '[\n  {"aid": "a", "abstract": "A.", "related_work": "R.", "ref_abstract": {}},\n'
        '  {"aid": "b", "abstract": "B." "related_work": "R."}\n]\n',
        encoding="utf-8",
    )
    with pytest.raises(InputFormatError) as info:
        run("multixscience", path, tmp_path, options=SKIP_BAD)
    assert info.value.reason == converters.INVALID_JSON and info.value.line == 3
    assert not info.value.skippable


@pytest.mark.parametrize(
    "text, line, detail",
    [
        ("[] x\n", 1, "unexpected data after the top-level list"),
        ('[\n  {"aid": "a"}\n]\n\nmore\n', 5, "unexpected data after the top-level list"),
        ('[\n  {"aid": "a"}\n  {"aid": "b"}\n]\n', 3, "expected ',' or ']' after a list element"),
        ('[\n  {"aid": "a"},\n', 3, "file ends inside the top-level list"),
    ],
)
def test_a_json_list_that_does_not_close_is_fatal_at_its_line(tmp_path, text, line, detail):
    path = tmp_path / "test.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFormatError) as info:
        run("multixscience", path, tmp_path, options=SKIP_BAD)
    assert (info.value.reason, info.value.line, info.value.skippable) == (converters.INVALID_JSON, line, False)
    assert str(info.value).startswith(f"{path}:{line}: ") and detail in str(info.value)


def test_an_empty_json_list_is_no_record(tmp_path):
    path = tmp_path / "test.json"
    path.write_text("  [ \n ]  \n", encoding="utf-8")
    clusters, report = run("multixscience", path, tmp_path)
    assert clusters == [] and report.records_read == 0


def test_invalid_utf8_inside_json_list_element(tmp_path):
    path = tmp_path / "test.json"
    path.write_bytes(
        b'[\n  {"aid": "a", "abstract": "A.", "related_work": "R.",\n'
        b'   "ref_abstract": {"@cite_1": {"mid": "1", "abstract": "Bad \xff byte."}}},\n'
        b'  {"aid": "b", "abstract": "B.", "related_work": "R.", "ref_abstract": {}}\n]\n'
    )
    with pytest.raises(InputFormatError) as info:
        run("multixscience", path, tmp_path)
    assert (info.value.reason, info.value.line) == (converters.INVALID_UTF8, 3)
    clusters, report = run("multixscience", path, tmp_path, options=SKIP_BAD)
    assert [c["id"] for c in clusters] == ["b"]
    assert report.skipped == Counter({"invalid_utf8": 1})
    assert ":3: invalid UTF-8" in report.skipped_examples[0]


# ----------------------------------------------------------------------------
# MReD and HierEncDec-style CSV
# ----------------------------------------------------------------------------


def test_mred_release_csv(tmp_path):
    clusters, report = run("mred", FIXTURES / "mred" / "val_concat.csv", tmp_path, split="val")
    assert clusters == [
        {
            "id": "val-0",
            "documents": [
                'This paper proposes spectral normalization for GANs.\n\nThe experiments are "very good".',
                "The idea is not new, but it is applied well.\n\nMinor: fix Figure 4.",
            ],
            "summary": "The reviewers agree the paper is strong. Accept.",
        },
        {
            "id": "val-1",
            "documents": ["The paper studies goal exploration.\n\nPros: clear abstract.", "Too many metrics."],
            "summary": "An interesting direction; the authors improved the paper. Accept.",
        },
        {"id": "val-2", "documents": ["Review one.", "Review three."], "summary": "Mixed reviews; reject."},
    ]
    assert report.notes == Counter({"control_prefix_stripped": 1})
    assert report.dropped_documents == Counter({"empty_document": 1})


def test_mred_control_prefix_can_be_kept(tmp_path):
    clusters, _ = run("mred", FIXTURES / "mred" / "val_concat.csv", tmp_path, split="val", control_prefix="keep")
    assert clusters[1]["documents"][0] == (
        "abstract | strength | decision ==> The paper studies goal exploration.\n\nPros: clear abstract."
    )


def test_csv_named_columns_and_last_two_columns(tmp_path):
    path = FIXTURES / "csv" / "hierencdec_style.csv"
    expected = [
        {
            "id": "film-001",
            "documents": ["Review A of the film.", "Review B of the film."],
            "summary": "A film that critics liked.",
        },
        {"id": "film-002", "documents": ["Only one review here."], "summary": "A single-review cluster."},
    ]
    named, _ = run("csv", path, tmp_path, text_column="source", summary_columns=["target"], id_column="paper_id")
    assert named == expected
    positional, _ = run("csv", path, tmp_path, last_two_columns=True, id_column="paper_id")
    assert positional == expected


def test_csv_missing_column_is_fatal(tmp_path):
    with pytest.raises(InputFormatError) as info:
        run("csv", FIXTURES / "csv" / "hierencdec_style.csv", tmp_path, options=SKIP_BAD)
    assert info.value.line == 1 and not info.value.skippable
    assert "--last-two-columns" in str(info.value)


def test_csv_several_summary_columns_give_summaries(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text("text,ref1,ref2\nDoc a <REVBREAK> Doc b,First ref.,Second ref.\n", encoding="utf-8")
    clusters, _ = run("csv", path, tmp_path, summary_columns=["ref1", "ref2"])
    assert clusters == [
        {
            "id": "train-0",
            "documents": ["Doc a", "Doc b"],
            "summary": "First ref.",
            "summaries": ["First ref.", "Second ref."],
        }
    ]


def test_csv_broken_row_reports_its_first_line(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text(
        'text,summary\n"Doc one,\nspanning lines <REVBREAK> Doc two",Sum one.\n'
        'Doc three,Sum three.,extra field\n"Doc four",Sum four.\n',
        encoding="utf-8",
    )
    with pytest.raises(InputFormatError) as info:
        run("csv", path, tmp_path)
    assert (info.value.reason, info.value.line) == (converters.MALFORMED_CSV_ROW, 4)
    assert f"{path}:4: malformed CSV row" in str(info.value)

    clusters, report = run("csv", path, tmp_path, options=SKIP_BAD)
    assert [c["id"] for c in clusters] == ["train-0", "train-2"]
    assert clusters[0]["documents"] == ["Doc one, spanning lines", "Doc two"]
    assert report.skipped == Counter({"malformed_csv_row": 1})
    assert_accounted(report)


def test_csv_unterminated_quote(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('text,summary\nDoc one,Sum one.\n"Doc two,Sum two.\n', encoding="utf-8")
    with pytest.raises(InputFormatError) as info:
        run("csv", path, tmp_path)
    assert (info.value.reason, info.value.line) == (converters.MALFORMED_CSV_ROW, 3)


def test_csv_invalid_utf8_line(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes(b'text,summary\n"Doc one\nstill doc one",Sum.\n"Doc \xfe two",Sum two.\n')
    with pytest.raises(InputFormatError) as info:
        run("csv", path, tmp_path)
    assert (info.value.reason, info.value.line) == (converters.INVALID_UTF8, 4)
    clusters, report = run("csv", path, tmp_path, options=SKIP_BAD)
    assert len(clusters) == 1 and report.skipped == Counter({"invalid_utf8": 1})


# ----------------------------------------------------------------------------
# WikiSum
# ----------------------------------------------------------------------------


def test_wikisum_paragraph_per_document(tmp_path):
    clusters, report = run("wikisum", FIXTURES / "wikisum" / "test.jsonl", tmp_path, split="test")
    assert clusters == [
        {
            "id": "Eiffel_Tower",
            "title": "eiffel tower",
            "documents": [
                "the tower is 330 metres tall .",
                "it was built for the 1889 world 's fair .",
                "gustave eiffel 's company designed it .",
            ],
            "summary": "the eiffel tower is a wrought-iron lattice tower in paris . it was completed in 1889 .",
        },
        {
            "id": "test-1",
            "title": "river thames",
            "documents": ["the thames flows through london .", "it is 346 km long ."],
            "summary": "the river thames is a river in southern england .",
        },
    ]
    assert report.dropped_documents == Counter({"empty_document": 1})


def test_wikisum_one_document_and_sentence_markers(tmp_path):
    clusters, report = run(
        "wikisum",
        FIXTURES / "wikisum" / "test.jsonl",
        tmp_path,
        split="test",
        paragraphs_as_one_document=True,
        keep_sentence_markers=True,
    )
    assert clusters[0]["documents"] == [
        "the tower is 330 metres tall .\n\nit was built for the 1889 world "
        "'s fair .\n\ngustave eiffel 's company designed it ."
    ]
    assert clusters[0]["summary"].count("<q>") == 1
    assert report.dropped_documents == Counter({"empty_paragraph": 1})


def test_wikisum_needs_summary_or_target(tmp_path):
    path = write_lines(tmp_path / "w.jsonl", [json.dumps({"title": "t", "paragraphs": ["p ."]})])
    with pytest.raises(InputFormatError, match="needs 'summary' or 'target'") as info:
        run("wikisum", path, tmp_path)
    assert info.value.line == 1


# ----------------------------------------------------------------------------
# PeerSum
# ----------------------------------------------------------------------------

PEERSUM_TRAIN_PAPER = {
    "id": "iclr_2021_abc123",
    "title": "A Paper",
    "documents": [
        "We propose a method. It works well.\n\nCode is available.",
        "The method is novel.\n\nExperiments are limited.",
        "We added experiments.",
        "Nice work!",
    ],
    "summary": "The reviewers agree the method is useful. Accept.",
}


def test_peersum_release_all_labels(tmp_path):
    clusters, report = run("peersum", FIXTURES / "peersum" / "peersum_all.json", tmp_path, split="all")
    assert clusters == [
        PEERSUM_TRAIN_PAPER,
        {
            "id": "nips_2021_def456",
            "title": "Another Paper",
            "documents": ["We study a problem.", "Unclear writing."],
            "summary": "The paper is not ready.",
        },
        {
            "id": "iclr_2022_ghi789",
            "title": "Third Paper",
            "documents": ["We prove a bound.", "The bound is tight."],
            "summary": "A strong theoretical paper.",
        },
    ]
    assert report.dropped_documents == Counter({"review_without_text": 1, "empty_document": 1})
    assert_accounted(report)


def test_peersum_label_writers_and_abstract_options(tmp_path):
    clusters, report = run(
        "peersum",
        FIXTURES / "peersum" / "peersum_all.json",
        tmp_path,
        select_label="train",
        writers=["official_reviewer"],
        include_abstract=False,
    )
    assert clusters == [
        {
            "id": "iclr_2021_abc123",
            "title": "A Paper",
            "documents": ["The method is novel.\n\nExperiments are limited."],
            "summary": PEERSUM_TRAIN_PAPER["summary"],
        },
        {
            "id": "iclr_2022_ghi789",
            "title": "Third Paper",
            "documents": ["The bound is tight."],
            "summary": "A strong theoretical paper.",
        },
    ]
    assert report.filtered == Counter({"label_not_selected": 1})
    assert report.dropped_documents == Counter({"writer_not_selected": 2, "review_without_text": 1})
    assert_accounted(report)


def test_peersum_other_layouts(tmp_path):
    crawler = {
        "paper_id": "p1",
        "title": "Crawled\n title",
        "abstract": "Abs.",
        "meta_review": "Meta.",
        "reviews": [{"writer": "official_reviewer", "content": {"comment": "Nested review."}}],
    }
    huggingface = {
        "paper_id": "p2",
        "paper_title": "Hub Title",
        "paper_abstract": "Abs two.",
        "meta_review": "Meta two.",
        "review_writers": ["official_reviewer", "author"],
        "review_contents": ["R1.", "R2."],
        "label": "test",
    }
    prepared = {"paper_id": "p3", "source_documents": ["S1.", "S2."], "summary": "Meta three.", "label": "val"}
    untitled = {"paper_id": "p4", "paper_title": " ", "paper_abstract": "Abs four.", "meta_review": "M.", "reviews": []}
    path = write_lines(tmp_path / "mixed.jsonl", [json.dumps(r) for r in (crawler, huggingface, prepared, untitled)])
    clusters, _ = run("peersum", path, tmp_path)
    assert clusters == [
        {"id": "p1", "title": "Crawled title", "documents": ["Abs.", "Nested review."], "summary": "Meta."},
        {"id": "p2", "title": "Hub Title", "documents": ["Abs two.", "R1.", "R2."], "summary": "Meta two."},
        {"id": "p3", "documents": ["S1.", "S2."], "summary": "Meta three."},
        {"id": "p4", "documents": ["Abs four."], "summary": "M."},
    ]


def test_peersum_title_is_the_tfidf_rankers_query(tmp_path):
    """``paper_title`` is the cluster's title, so ``mdsfair-rank --method tfidf`` (tf-idf
    cosine to the title) runs on converted PeerSum and ranks the paragraph that shares
    the title's rarest words first."""
    from mdsfair.preprocess.rank import run as rank_main

    paper = {
        "paper_id": "iclr_2022_xyz",
        "paper_title": "Contrastive Fine-Tuning of Language Models",
        "paper_abstract": "We study optimisation.\n\nContrastive fine-tuning helps language models.",
        "meta_review": "Contrastive fine-tuning is a solid idea.",
        "reviews": [{"writer": "official_reviewer", "comment": "The experiments are small."}],
        "label": "test",
    }
    path = write_lines(tmp_path / "peersum_all.json", [json.dumps(paper)])
    raw = tmp_path / "test.jsonl"
    assert cli_main(["peersum", str(path), "-o", str(raw), "--split", "test"]) == 0
    assert read_jsonl(raw)[0]["title"] == "Contrastive Fine-Tuning of Language Models"
    ranked = tmp_path / "ranked" / "test.jsonl"
    rank_main(["--input", str(raw), "--output", str(ranked), "--method", "tfidf"])
    [cluster] = read_jsonl(ranked)
    assert cluster["title"] == "Contrastive Fine-Tuning of Language Models"
    assert cluster["ranked_paragraphs"][0] == [0, 1]
    assert cluster["paragraph_scores"][0] > 0 and cluster["paragraph_scores"][1:] == [0.0, 0.0]


@pytest.mark.skipif(not PEERSUM_SAMPLE.exists(), reason="shared PeerSum sample not available")
def test_peersum_real_sample_round_trip(tmp_path):
    """Real PeerSum clusters, re-laid in PeerSum's prepared layout, come back with the same ids and documents."""
    originals = read_jsonl(PEERSUM_SAMPLE / "valid.jsonl")
    prepared = [
        {"paper_id": c["id"], "source_documents": c["documents"], "summary": c["summary"], "label": "val"}
        for c in originals
    ]
    path = write_lines(tmp_path / "peersum.json", [json.dumps(r, ensure_ascii=False) for r in prepared])
    clusters, report = run("peersum", path, tmp_path, split="valid", select_label="val")
    assert [c["id"] for c in clusters] == [c["id"] for c in originals]
    for converted, original in zip(clusters, originals):
        expected_documents = [normalize_document(d) for d in original["documents"] if normalize_document(d)]
        assert converted["documents"] == expected_documents
        assert all("\n" not in p for d in converted["documents"] for p in d.split("\n\n"))
    assert report.clusters_written == len(originals)


# ----------------------------------------------------------------------------
# Generic bad input (JSONL formats share the reader and the validation)
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_line, reason, message",
    [
        (b'{"id": 2, "summary": "S\xff", "articles": [{"text": "T."}]}', "invalid_utf8", "byte 0xff"),
        (b'{"id": 2, "summary": "S", "articles": [', "invalid_json", "not valid JSON"),
        (b'{"id": 2, "articles": [{"text": "T."}]}', "missing_key", "'summary'"),
        (b'{"id": 2, "summary": "S", "articles": [{"title": "no text"}]}', "missing_key", "articles[0]"),
        (b'{"id": 2, "summary": "S", "articles": "not a list"}', "wrong_type", "'articles' must be list"),
        (b'["not", "an", "object"]', "wrong_type", "expected a JSON object"),
        (b'{"id": 2, "summary": "S", "articles": [{"text": " "}, {"text": ""}]}', "empty_cluster", "all 2"),
        (b'{"id": 2, "summary": "S", "articles": []}', "empty_cluster", "no document"),
        (b'{"id": 2, "summary": "  ", "articles": [{"text": "T."}]}', "empty_summary", "training split"),
        (b'{"id": 1, "summary": "S", "articles": [{"text": "T."}]}', "duplicate_id", "'1'"),
        # a lone surrogate escape and an id with a line break: mdsfair-preprocess's codes (mdsfair.raw_contract)
        (b'{"id": 2, "summary": "S \\ud800", "articles": [{"text": "T."}]}', "lone_surrogate", "U+D800"),
        (b'{"id": "2\\nb", "summary": "S", "articles": [{"text": "T."}]}', "bad_id", "tab or line break"),
    ],
)
def test_bad_jsonl_record_names_file_and_line(tmp_path, bad_line, reason, message):
    path = write_lines(tmp_path / "train.jsonl", [wcep_event(1), bad_line, wcep_event(3)])
    with pytest.raises(InputFormatError) as info:
        list(iter_wcep(path))
    assert (info.value.path, info.value.line, info.value.reason) == (str(path), 2, reason)
    assert str(info.value).startswith(f"{path}:2: ")
    assert message in str(info.value)

    report = ConversionReport()
    clusters = list(iter_wcep(path, options=ConversionOptions(skip_bad=True, report=report)))
    assert [c["id"] for c in clusters] == ["1", "3"]
    assert report.skipped == Counter({reason: 1})
    assert report.skipped_examples[0].startswith(f"{path}:2: ")
    assert_accounted(report)


def test_empty_summary_rules_by_split(tmp_path):
    path = write_lines(tmp_path / "test.jsonl", [wcep_event(1, summary="")])
    with pytest.raises(InputFormatError, match="--allow-empty-summary"):
        list(iter_wcep(path, "test"))
    allow_empty_summary = ConversionOptions(allow_empty_summary=True)
    assert list(iter_wcep(path, "test", options=allow_empty_summary)) == [
        {"id": "1", "documents": ["Article one.", "Article two."], "summary": ""}
    ]
    with pytest.raises(InputFormatError, match="training split 'train'"):
        list(iter_wcep(path, "train", options=allow_empty_summary))


def test_empty_document_dropped_and_counted_or_error(tmp_path):
    path = write_lines(tmp_path / "train.jsonl", [wcep_event(1, texts=("One.", "\n \t", "Three."))])
    report = ConversionReport()
    assert [c["documents"] for c in iter_wcep(path, options=ConversionOptions(report=report))] == [["One.", "Three."]]
    assert report.dropped_documents == Counter({"empty_document": 1})
    with pytest.raises(InputFormatError, match="empty article 2") as info:
        list(iter_wcep(path, options=ConversionOptions(error_on_empty_document=True)))
    assert info.value.reason == converters.EMPTY_DOCUMENT and info.value.line == 1


def test_skip_mode_counts_every_reason(tmp_path):
    path = write_lines(
        tmp_path / "train.jsonl",
        [
            wcep_event(1),
            b"not json at all",
            b'{"id": 3, "summary": "S", "articles": [{"text": "T\xc3"}]}',
            b"",
            wcep_event(4, summary=""),
            wcep_event(5, texts=("", " ")),
            wcep_event(1),
            json.dumps({"id": 7, "articles": []}),
            wcep_event(8, texts=("Kept.", "")),
        ],
    )
    clusters, report = run("wcep", path, tmp_path, options=SKIP_BAD)
    assert [c["id"] for c in clusters] == ["1", "8"]
    assert report.skipped == Counter(
        {
            "invalid_json": 1,
            "invalid_utf8": 1,
            "empty_summary": 1,
            "empty_cluster": 1,
            "duplicate_id": 1,
            "missing_key": 1,
        }
    )
    assert report.records_read == 8  # the blank line is not a record
    assert report.dropped_documents == Counter({"empty_document": 1})
    assert [e[: e.index(":", len(str(path)) + 1)] for e in report.skipped_examples] == [
        f"{path}:{n}" for n in (2, 3, 5, 6, 7, 8)
    ]
    assert_accounted(report)


def test_byte_order_mark_and_crlf_are_accepted(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + wcep_event(1).encode() + b"\r\n" + wcep_event(2).encode() + b"\r\n")
    assert [c["id"] for c in iter_wcep(path)] == ["1", "2"]


def test_normalize_document_whitespace():
    text = "  First\tline\r\ncontinues.\r\n \r\n\r\n\u00a0Second paragraph.\n\n\n"
    assert normalize_document(text) == "First line continues.\n\nSecond paragraph."
    assert normalize_document("a <sep> b <sep>  <sep> c", "<sep>") == "a\n\nb\n\nc"
    assert normalize_document(" \n\n ") == ""


# ----------------------------------------------------------------------------
# Python API and CLI
# ----------------------------------------------------------------------------


def test_convert_rejects_unknown_format_and_options(tmp_path):
    with pytest.raises(ValueError, match="unknown format"):
        convert("duc", FIXTURES / "wcep" / "val.jsonl", tmp_path / "o.jsonl")
    with pytest.raises(TypeError, match="max_articles"):
        convert("multixscience", FIXTURES / "multixscience" / "test.json", tmp_path / "o.jsonl", max_articles=3)


def test_cli_converts_and_prints_report(tmp_path, capsys):
    output = tmp_path / "sub" / "val.jsonl"
    report_json = tmp_path / "report.json"
    status = cli_main(
        [
            "wcep",
            str(FIXTURES / "wcep" / "val.jsonl"),
            "-o",
            str(output),
            "--split",
            "val",
            "--max-articles",
            "2",
            "--report-json",
            str(report_json),
        ]
    )
    assert status == 0
    assert [c["id"] for c in read_jsonl(output)] == ["7421", "7422"]
    printed = capsys.readouterr().out
    assert "clusters written:     2" in printed and "articles_beyond_max_articles: 2" in printed
    assert json.loads(report_json.read_text())["truncated"] == {"articles_beyond_max_articles": 2}


def test_cli_format_specific_flags(tmp_path):
    output = tmp_path / "out.jsonl"
    assert (
        cli_main(
            [
                "csv",
                str(FIXTURES / "csv" / "hierencdec_style.csv"),
                "-o",
                str(output),
                "--text-column",
                "source",
                "--summary-column",
                "target",
                "--id-column",
                "paper_id",
            ]
        )
        == 0
    )
    assert [c["id"] for c in read_jsonl(output)] == ["film-001", "film-002"]
    assert (
        cli_main(
            [
                "peersum",
                str(FIXTURES / "peersum" / "peersum_all.json"),
                "-o",
                str(output),
                "--writers",
                "official_reviewer,public",
                "--no-abstract",
                "--select-label",
                "train",
            ]
        )
        == 0
    )
    assert read_jsonl(output)[0]["documents"] == ["The method is novel.\n\nExperiments are limited.", "Nice work!"]
    source = tmp_path / "multinews" / "x.src"
    source.parent.mkdir()
    shutil.copy(FIXTURES / "multinews" / "val.src", source)
    assert (
        cli_main(
            [
                "multinews",
                str(source),
                "--targets",
                str(FIXTURES / "multinews" / "val.tgt"),
                "-o",
                str(output),
                "--split",
                "valid",
            ]
        )
        == 0
    )
    assert len(read_jsonl(output)) == 2


def test_cli_bad_input_exit_status_message_and_skip(tmp_path, capsys):
    path = write_lines(tmp_path / "train.jsonl", [wcep_event(1), b"{broken"])
    output = tmp_path / "out.jsonl"
    assert cli_main(["wcep", str(path), "-o", str(output)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2: not valid JSON" in err and "--skip-bad" in err
    assert not output.exists()

    assert cli_main(["wcep", str(path), "-o", str(output), "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "clusters skipped:     1" in out and "invalid_json: 1" in out
    assert len(read_jsonl(output)) == 1


def test_cli_every_flag_has_help():
    parser = converters.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subparsers.choices) == set(CONVERTERS)
    for name, subparser in subparsers.choices.items():
        for action in subparser._actions:
            assert action.help, f"{name}: {action.option_strings or action.dest} has no help"
        # Every format option of the Python API is reachable from the command line.
        dests = {action.dest for action in subparser._actions}
        assert set(converters.format_options(name)) <= dests, name
