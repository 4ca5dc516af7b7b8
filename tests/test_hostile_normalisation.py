"""Issue 47, class 4 (checks that ran before normalisation): a document or
summary made only of characters the normalisation removes, or that carry no
content (format and bidirectional-text controls, zero-width characters), is
empty, refused or skipped and counted as a zero-width-space one is; the
bidirectional-text controls are all removed alike and counted; and the hub
names the cluster of a document that is not a string."""

import json

import pytest

from mdsfair.preprocess.structure import BIDI_CONTROLS, SentenceSplitter, clean_text, parse_cluster
from mdsfair.raw_contract import EMPTY_DOCUMENT, EMPTY_SUMMARY, WRONG_TYPE, InputFormatError
from mdsfair.text import has_content

#: Every bidirectional-text control, one by one.
BIDI = [
    "\u061c",
    "\u200e",
    "\u200f",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
]
#: Characters without content that are not bidirectional controls: zero-width space and joiners, word
#: joiner, byte-order mark, soft hyphen, an invisible operator, a tag character.
OTHER_EMPTY = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u2062", "\U000e0041"]
GOOD = "The council approved the budget. Critics objected."


def parse(record, normalization="clean", skip_bad=False):
    raw = json.dumps(record, ensure_ascii=False).encode("utf-8")
    return parse_cluster(
        raw,
        "split.jsonl",
        7,
        SentenceSplitter("rule"),
        require_summary=True,
        drop_empty_documents=skip_bad,
        normalization=normalization,
    )


def test_class4_bidi_controls_are_the_characters_of_the_issue():
    assert sorted(BIDI) == sorted(
        c for c in map(chr, range(0x110000)) if __import__("re").fullmatch(f"[{BIDI_CONTROLS}]", c)
    )


@pytest.mark.parametrize("normalization", ["clean", "whitespace"])
@pytest.mark.parametrize("char", BIDI + OTHER_EMPTY, ids=lambda c: f"U+{ord(c):04X}")
def test_class4_a_document_of_only_invisible_characters_is_refused_then_skipped_and_counted(char, normalization):
    record = {"id": "c1", "documents": [GOOD, char * 3 + "\n\n" + char], "summary": "The budget passed."}
    with pytest.raises(InputFormatError) as refused:
        parse(record, normalization)
    assert refused.value.reason == EMPTY_DOCUMENT and str(refused.value).startswith("split.jsonl:7: document 1 of")
    structure, dropped = parse(record, normalization, skip_bad=True)
    assert dropped == 1 and structure.dropped_documents == [1] and len(structure.documents) == 1


@pytest.mark.parametrize("char", BIDI + OTHER_EMPTY, ids=lambda c: f"U+{ord(c):04X}")
def test_class4_a_summary_of_only_invisible_characters_is_empty(char):
    with pytest.raises(InputFormatError) as refused:
        parse({"id": "c1", "documents": [GOOD], "summary": f" {char}{char} "})
    assert refused.value.reason == EMPTY_SUMMARY


def test_class4_bidi_controls_are_all_removed_and_counted():
    for char in BIDI:
        assert clean_text(f"left{char} right{char}") == "left right", f"U+{ord(char):04X}"
    text = "Der Rat \u202bstimmte\u202c zu. \u2067Kritiker\u2069 widersprachen.\u200f"
    structure, _ = parse(
        {"id": "c1", "documents": [text, GOOD], "summary": "Budget \u200epassed.", "title": "\u2066Budget\u2069"}
    )
    assert structure.documents[0] == [["Der Rat stimmte zu.", "Kritiker widersprachen."]]
    assert structure.summary == "Budget passed." and structure.title == "Budget"
    assert structure.bidi_controls_removed == 8
    # text without them is unchanged, and nothing is counted
    plain, _ = parse({"id": "c1", "documents": [GOOD], "summary": "The budget passed."})
    assert plain.documents == [[["The council approved the budget.", "Critics objected."]]]
    assert plain.bidi_controls_removed == 0


def test_class4_whitespace_normalisation_removes_nothing_it_only_refuses_empty_text():
    """The ``whitespace`` normalisation gives an imported tokenizer the text
    as its own pipeline does: a control inside a sentence stays."""
    structure, _ = parse({"id": "c1", "documents": ["Left \u200fright."], "summary": "Sum."}, "whitespace")
    assert structure.documents == [[["Left \u200fright."]]] and structure.bidi_controls_removed == 0


def test_class4_content_is_anything_visible():
    assert not has_content(" \u200b\u200f\u202e\u2066\ufeff\u00ad\t\u3000\x07")
    for text in ("a", "7", ".", "\u0301", "\u4e00", "\U0001f600", "\ue000"):
        assert has_content(text), ascii(text)


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    """A tiny SentencePiece data-bin whose training split holds documents of
    only U+200F and only U+202E, preprocessed with --skip-bad."""
    from mdsfair.preprocess.binarize import run

    root = tmp_path_factory.mktemp("hostile")
    raw = root / "raw"
    raw.mkdir()
    plain = [
        "The council approved the budget on Tuesday.",
        "Critics said it cuts too much from schools.",
        "A storm hit the coast overnight.",
        "Thousands of homes lost power and roads were closed.",
    ]
    clusters = [{"id": f"p{i}", "documents": plain[i:] + plain[:i], "summary": plain[i]} for i in range(4)]
    clusters.insert(1, {"id": "rlm", "documents": [plain[0], "\u200f\u200f"], "summary": plain[1]})
    clusters.insert(2, {"id": "rlo", "documents": ["\u202e", plain[2] + " \u202eWeather\u202c."], "summary": plain[3]})
    with open(raw / "train.jsonl", "w", encoding="utf-8") as f:
        for cluster in clusters:
            f.write(json.dumps(cluster, ensure_ascii=False) + "\n")
    dest = root / "bin"
    args = ["--input-dir", str(raw), "--destdir", str(dest), "--vocab-size", "120", "--no-progress-bar"]
    with pytest.raises(SystemExit):
        run(args)
    refused = not dest.exists()
    reports = run(args + ["--skip-bad"])
    return str(dest), reports, refused, str(raw / "train.jsonl")


def test_class4_preprocessing_refuses_then_drops_and_counts(data_bin, capsys):
    dest, reports, refused, _ = data_bin
    assert refused  # without --skip-bad: a FILE:LINE error and nothing written
    train = reports["train"]
    assert train["clusters"] == 6 and train["empty_documents_dropped"] == 2
    assert train["bidi_controls_removed"] == 5
    with open(f"{dest}/mdsfair.json", encoding="utf-8") as f:
        assert json.load(f)["splits"]["train"]["bidi_controls_removed"] == 5
    assert train["unknown_tokens"] == 0  # U+202E no longer becomes <unk>


def test_class4_hub_encoder_refuses_empty_and_non_string_documents_naming_the_cluster(data_bin):
    from mdsfair.preprocess.pipeline import ClusterEncoder

    dest, _, _, _ = data_bin
    with open(f"{dest}/mdsfair.json", encoding="utf-8") as f:
        encoder = ClusterEncoder.from_data_bin(dest, json.load(f))
    for documents, reason, message in [
        ([GOOD, None], WRONG_TYPE, "cluster 3: document 1 is NoneType, not a string"),
        ([b"bytes"], WRONG_TYPE, "cluster 3: document 0 is bytes, not a string (decode bytes to str first)"),
        ([GOOD, "\u200f\u2066"], EMPTY_DOCUMENT, "document 1 of cluster '3' is empty"),
    ]:
        with pytest.raises(InputFormatError) as error:
            encoder.encode(documents, 3)
        assert error.value.reason == reason and message in str(error.value), str(error.value)
    with pytest.raises(InputFormatError, match="cluster 3: 'summary' is bytes"):
        encoder.encode({"documents": [GOOD], "summary": b"x"}, 3)
    with pytest.raises(TypeError, match="cluster 3 is NoneType"):
        encoder.encode(None, 3)
    encoded = encoder.encode([GOOD + " \u202eThe storm\u202c hit."], 3)
    plain = encoder.encode([GOOD + " The storm hit."], 3)
    assert encoded.bidi_controls_removed == 2 and plain.bidi_controls_removed == 0
    assert encoded.tokens.tolist() == plain.tokens.tolist() and encoded.num_unknown == plain.num_unknown
