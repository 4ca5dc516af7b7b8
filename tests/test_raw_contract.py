"""One raw-contract and text layer: every reader of a raw cluster refuses the
same bad line with the same error type and reason code, and the shared text
helpers are what they say (rouge_score's tokenizer, one LexRank)."""

import json
import pickle

import pytest

from mdsfair import raw_contract, text
from mdsfair.evaluation import extractive_baselines
from mdsfair.lexrank import lexrank_scores, tfidf_cosine_matrix
from mdsfair.preprocess import converters, structure
from mdsfair.preprocess.converters import common as converter_common
from mdsfair.preprocess.converters.common import ConversionOptions
from mdsfair.preprocess.converters.driver import convert
from mdsfair.raw_contract import REASON_DESCRIPTIONS, InputFormatError

GOOD = {"id": "c0", "documents": ["The storm hit Calden on Monday."], "summary": "A storm hit Calden."}

#: bad line -> the code every reader gives it
BAD_LINES = [
    (b"{not json\n", "invalid_json"),
    (b'{"id": "a", "documents": ["caf\xe9"], "summary": "s"}\n', "invalid_utf8"),
    (b"[1, 2]\n", "not_an_object"),
    (b'{"id": "a", "summary": "s"}\n', "missing_key"),
    (b'{"id": "a", "documents": "x", "summary": "s"}\n', "wrong_type"),
    (b'{"id": "a", "documents": ["x"], "summary": "s", "title": 3}\n', "wrong_type"),
    (b'{"id": "a", "documents": ["\\ud800 x"], "summary": "s"}\n', "lone_surrogate"),
    (b'{"id": "a\\tb", "documents": ["x"], "summary": "s"}\n', "bad_id"),
]


def write_raw(tmp_path, bad_line: bytes) -> str:
    path = tmp_path / "test.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + bad_line)
    return str(path)


@pytest.mark.parametrize("bad_line, code", BAD_LINES)
def test_preprocess_and_baselines_refuse_a_bad_line_with_one_error_and_code(tmp_path, bad_line, code):
    path = write_raw(tmp_path, bad_line)
    errors = []
    for read in (lambda: list(structure.read_clusters(path)), lambda: extractive_baselines.read_clusters(path)):
        with pytest.raises(InputFormatError) as info:
            read()
        errors.append(info.value)
    assert [(e.reason, e.path, e.line) for e in errors] == [(code, path, 2)] * 2
    assert str(errors[0]) == str(errors[1]) and str(errors[0]).startswith(f"{path}:2: ")
    assert structure.InputFormatError is InputFormatError
    assert code in raw_contract.CLUSTER_LINE_REASONS


@pytest.mark.parametrize(
    "converter_line, contract_line, code",
    [
        (b"{not json\n", b"{not json\n", "invalid_json"),
        (b'{"id": 1, "text": "\xff"}\n', b'{"id": 1, "text": "\xff"}\n', "invalid_utf8"),
        # JSON escapes of half a UTF-16 pair, in a summary, an article and an id
        (
            b'{"id": "e2", "summary": "S \\ud800.", "articles": [{"text": "A."}]}\n',
            b'{"id": "e2", "documents": ["A."], "summary": "S \\ud800."}\n',
            "lone_surrogate",
        ),
        (
            b'{"id": "e2", "summary": "S.", "articles": [{"text": "A \\udfff"}]}\n',
            b'{"id": "e2", "documents": ["A \\udfff"], "summary": "S."}\n',
            "lone_surrogate",
        ),
        (
            b'{"id": "e\\udc80", "summary": "S.", "articles": [{"text": "A."}]}\n',
            b'{"id": "e\\udc80", "documents": ["A."], "summary": "S."}\n',
            "lone_surrogate",
        ),
        (
            b'{"id": "e\\t2", "summary": "S.", "articles": [{"text": "A."}]}\n',
            b'{"id": "e\\t2", "documents": ["A."], "summary": "S."}\n',
            "bad_id",
        ),
    ],
)
def test_a_converter_gives_the_same_code_as_preprocess_for_the_same_bad_line(
    tmp_path, converter_line, contract_line, code
):
    """mdsfair-convert (a wcep event) and mdsfair-preprocess (a raw cluster)
    refuse the same problem with the same error type and reason code, and
    with --skip-bad the converter counts it under that code."""
    source = tmp_path / "wcep.jsonl"
    event = {"id": "e1", "summary": "S.", "articles": [{"text": "A."}]}
    source.write_bytes(json.dumps(event).encode() + b"\n" + converter_line)
    with pytest.raises(InputFormatError) as converted:
        convert("wcep", [source], tmp_path / "out.jsonl")
    assert type(converted.value) is raw_contract.InputFormatError
    assert (converted.value.reason, converted.value.line) == (code, 2)
    with pytest.raises(InputFormatError) as preprocessed:
        list(structure.read_clusters(write_raw(tmp_path, contract_line)))
    assert (preprocessed.value.reason, preprocessed.value.line) == (code, 2)
    report = convert("wcep", [source], tmp_path / "skipped.jsonl", options=ConversionOptions(skip_bad=True))
    assert (report.clusters_written, dict(report.skipped)) == (1, {code: 1})
    # the converters' codes are the raw contract's constants
    assert (converters.INVALID_JSON, converters.INVALID_UTF8) == (raw_contract.INVALID_JSON, raw_contract.INVALID_UTF8)
    assert converters.REASON_DESCRIPTIONS is REASON_DESCRIPTIONS


def test_the_error_type_refuses_unknown_codes_and_survives_pickling():
    with pytest.raises(ValueError, match="unknown bad-input reason 'not_json'"):
        InputFormatError("f.jsonl", 3, "not_json", "x")
    for error in (
        InputFormatError("f.jsonl", 3, "invalid_json", "not valid JSON (x)", skippable=False),
        InputFormatError.described("g.json", 4, "duplicate_id", "id 'a' again"),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), copy.reason, copy.line, copy.skippable) == (
            type(error),
            str(error),
            error.reason,
            error.line,
            error.skippable,
        )
    # the converters' form: the reason's description, then the detail
    assert str(InputFormatError.described("g.json", 4, "duplicate_id", "id 'a' again")) == (
        "g.json:4: duplicate id: id 'a' again"
    )
    assert converter_common.InputFormatError is InputFormatError


def test_rouge_tokens_are_rouge_scores_tokens():
    from rouge_score import tokenize

    for sample in ["The U.S. economy grew 3.5% in Q2 -- CEO's view_point!", "Ça coûte 12€, naïve café ÉTÉ", ""]:
        assert text.rouge_tokens(sample) == tokenize.tokenize(sample, None)
    assert text.words("Ça coûte 12€, snake_case") == ["ça", "coûte", "12", "snake_case"]
    assert (text.has_word("…!?"), text.has_word("東京")) == (False, True)


def test_one_lexrank_serves_the_baseline_and_the_synthetic_gap_check():
    from mdsfair.preprocess import synthetic_report

    sentences = ["The storm hit Calden.", "Power failed in Calden.", "The storm cut power.", "Cats sleep."]
    matrix = tfidf_cosine_matrix(sentences)
    assert [matrix[i][i] for i in range(4)] == [1.0, 1.0, 1.0, 1.0]
    assert matrix[0][3] == matrix[3][0] == 0.0 and matrix[0][2] == pytest.approx(matrix[2][0]) and matrix[0][2] > 0
    scores = lexrank_scores(sentences, threshold=0.0, weighted=True)
    assert sum(scores) == pytest.approx(1.0)
    top_two = sorted(sorted(range(4), key=lambda i: (-scores[i], i))[:2])
    assert synthetic_report.lexrank_summary(
        ["The storm hit Calden. Power failed in Calden.", "The storm cut power. Cats sleep."], num_sentences=2
    ) == " ".join(sentences[i] for i in top_two)
    assert 3 not in top_two  # the unconnected sentence is least central
    assert extractive_baselines.lexrank_scores is lexrank_scores and synthetic_report.lexrank_scores is lexrank_scores


def test_preprocessing_paragraphs_are_the_text_layers_on_cleaned_text():
    """preprocess/structure.py used its own paragraph splitter until issue 24;
    on cleaned text (what it is called on) the text layer's gives the same
    paragraphs. Its former definition, verbatim, against random documents."""
    import random
    import re

    former_break = re.compile(r"\n[ \t]*\n\s*")

    def former_split_paragraphs(document):
        return [" ".join(block.split()) for block in former_break.split(document) if " ".join(block.split())]

    # clean_text turns every white-space character but the line break into a
    # space (issue 34 item 2; it kept U+2028, U+0085, U+202F, ..., which the
    # former rule did not count as blank), so on cleaned text the rules agree;
    # on raw text such a blank line is a break, as in mdsfair-convert
    rng = random.Random(0)
    pieces = ["a", "Bb", " ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u2028", "\x0c", "\u3000", ".", "\x85"]
    for _ in range(3000):
        document = structure.clean_text("".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))))
        assert structure.split_paragraphs(document) == former_split_paragraphs(document), repr(document)
    assert structure.split_paragraphs("One\n\u2028\ntwo.") == ["One", "two."]
    assert structure.split_paragraphs(structure.clean_text("One\n\u2028\ntwo.")) == ["One", "two."]
    assert structure.split_paragraphs is text.split_paragraphs


def test_converter_documents_split_paragraphs_with_the_text_layer_as_before():
    """mdsfair-convert had its own paragraph regex until issue 24; its
    documents, now split by mdsfair.text.split_paragraphs, are what its former
    normalize_document (verbatim) wrote, for random documents of every kind
    of whitespace and line ending."""
    import random
    import re

    former_break = re.compile(r"\n[^\S\n]*\n\s*")

    def former_normalize_document(document, paragraph_separator=None):
        document = document.replace("\r\n", "\n").replace("\r", "\n").replace("\u2029", "\n\n")
        if paragraph_separator:
            document = document.replace(paragraph_separator, "\n\n")
        paragraphs = (re.sub(r"\s+", " ", part).strip() for part in former_break.split(document))
        return "\n\n".join(p for p in paragraphs if p)

    rng = random.Random(1)
    pieces = [
        "a",
        "Bb",
        " ",
        "\t",
        "\n",
        "\n\n",
        "\r\n",
        "\r",
        "\u00a0",
        "\u2028",
        "\u2029",
        "\x0c",
        "\u3000",
        "\x85",
        "\x1e",
        "\u202f",
        ".",
        "<p>",
    ]
    for _ in range(4000):
        document = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        for separator in (None, "<p>"):
            assert converter_common.normalize_document(document, separator) == former_normalize_document(
                document, separator
            ), repr(document)
    assert converter_common.PARAGRAPH_SEPARATOR is text.PARAGRAPH_SEPARATOR
    assert structure.split_sentences_rule is text.split_sentences_rule
