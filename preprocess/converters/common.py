"""What every converter shares: the raw contract, reading, validation, counting and errors.

A format module (one per release format, beside this one) reads its files
with the readers here (:func:`iter_lines`, :func:`iter_json_records`,
:func:`iter_csv_rows`), builds each cluster from one :class:`Record` with the
field helpers (:func:`require_field`, :func:`optional_field`,
:func:`string_list`) and hands it to :meth:`ConversionSession.finish`, which
validates it against the raw contract, applies the error policy and counts
everything in the :class:`ConversionReport`. :func:`build_clusters` turns the
:class:`BadRecord` a builder raises into an error or a counted skip.

The raw contract (see DESIGN.md): one cluster per line, UTF-8,
``{"id": str, "documents": [str, ...], "summary": str}``, with an optional
``"title"`` (WikiSum-style inputs) and an optional ``"summaries": [str, ...]``
when a data set carries several references (``"summary"`` is then the first).
Inside a document, paragraphs are separated by one blank line (``"\\n\\n"``);
inside a paragraph every run of whitespace (newlines included) becomes one
space. Summaries are flattened to a single line (one target per line is what
the binarizer and ROUGE scripts consume). Ids are the data set's own id when it
has one, else ``"{split}-{index}"`` with the 0-based index of the record in the
input stream (stable whether or not bad records are skipped).

Bad input
---------
Invalid UTF-8, a line that is not JSON, a broken CSV row, a missing key or a
value of the wrong type, an empty cluster (no non-empty document), an empty
summary, a duplicate id, an id holding a tab or line break: :class:`InputFormatError` naming the file and the
1-based line (for CSV the first line of the row, for a JSON list the line where
the element starts or the line of the bad byte), or, with ``skip_bad``
(``--skip-bad``), the record is skipped and counted by reason. Empty summaries
are always bad in training splits; elsewhere they are written only with
``allow_empty_summary``. Empty documents inside an otherwise fine cluster are
dropped and counted (``error_on_empty_document`` makes them bad input
instead). Structural problems after which records cannot be told apart (source
and target files of different lengths, a broken JSON list, a CSV header without
the requested columns) are fatal even with ``skip_bad``. Every record read ends
up written, skipped or filtered out, and :class:`ConversionReport` counts each
(``records_read == clusters_written + skipped + filtered``); truncations and
dropped documents are counted too. Output is written to a temporary file and
moved into place only when the conversion succeeds (:func:`~.driver.convert`).
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from mdsfair.raw_contract import (  # noqa: F401  (the reason codes: converters import them from here)
    DUPLICATE_ID,
    EMPTY_CLUSTER,
    EMPTY_DOCUMENT,
    EMPTY_SUMMARY,
    INVALID_JSON,
    INVALID_TABLE,
    INVALID_UTF8,
    LONE_SURROGATE,
    MALFORMED_CSV_ROW,
    MISALIGNED_FILES,
    MISSING_FILE,
    MISSING_KEY,
    REASON_DESCRIPTIONS,
    SECTION_MISMATCH,
    WRONG_TYPE,
    InputFormatError,
    contract_string_problem,
    format_location,
)
from mdsfair.text import PARAGRAPH_SEPARATOR, split_paragraphs

PathLike = Union[str, "os.PathLike[str]"]
Inputs = Union[PathLike, Sequence[PathLike]]

TRAINING_SPLITS = frozenset({"train", "training"})

# Reasons a record is bad (keys of ConversionReport.skipped): the one set of
# codes of mdsfair.raw_contract, shared with mdsfair-preprocess and -baseline.
_MAX_SKIP_EXAMPLES = 20
_SURROGATE_ESCAPES = re.compile("[\udc80-\udcff]")  # bytes surrogateescape could not decode
_ANY_WHITESPACE = re.compile(r"\s+")
_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


@dataclass
class ConversionReport:
    """Counts of one conversion; nothing read is left uncounted.

    ``records_read`` = ``clusters_written`` + ``skipped_total`` +
    ``filtered_total``. ``skipped`` counts bad records by reason (only with
    ``skip_bad``), ``filtered`` records left out on purpose (e.g. another
    split's label), ``dropped_documents`` documents removed from clusters that
    were written (empty ones, reviews without text, ...), ``truncated`` what an
    option cut (e.g. articles beyond ``max_articles``), ``notes`` counted
    normalisations (e.g. stripped summary dashes). ``skipped_examples`` keeps
    the first skipped records as ``FILE:LINE: reason: detail``.
    """

    format_name: str = ""
    split: str = ""
    inputs: List[str] = field(default_factory=list)
    output_path: Optional[str] = None
    records_read: int = 0
    clusters_written: int = 0
    documents_written: int = 0
    skipped: Counter = field(default_factory=Counter)
    filtered: Counter = field(default_factory=Counter)
    dropped_documents: Counter = field(default_factory=Counter)
    truncated: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    skipped_examples: List[str] = field(default_factory=list)

    @property
    def skipped_total(self) -> int:
        """Number of bad records that were skipped."""
        return sum(self.skipped.values())

    @property
    def filtered_total(self) -> int:
        """Number of records left out on purpose."""
        return sum(self.filtered.values())

    def to_dict(self) -> Dict[str, Any]:
        """Plain-dict form, for ``--report-json`` and logging."""
        return {
            "format": self.format_name,
            "split": self.split,
            "inputs": list(self.inputs),
            "output": self.output_path,
            "records_read": self.records_read,
            "clusters_written": self.clusters_written,
            "documents_written": self.documents_written,
            "skipped": dict(self.skipped),
            "filtered": dict(self.filtered),
            "dropped_documents": dict(self.dropped_documents),
            "truncated": dict(self.truncated),
            "notes": dict(self.notes),
            "skipped_examples": list(self.skipped_examples),
        }

    def format(self) -> str:
        """Human-readable report, as printed by the CLI."""
        lines = [
            f"mdsfair-convert {self.format_name} (split {self.split}): "
            f"{', '.join(self.inputs)} -> {self.output_path}",
            f"  records read:         {self.records_read}",
            f"  clusters written:     {self.clusters_written}",
            f"  documents written:    {self.documents_written}",
        ]
        sections = [
            ("clusters skipped", self.skipped),
            ("records filtered out", self.filtered),
            ("documents dropped", self.dropped_documents),
            ("truncated", self.truncated),
            ("normalised", self.notes),
        ]
        for title, counts in sections:
            if title == "clusters skipped" or counts:
                lines.append(f"  {title + ':':21} {sum(counts.values())}")
                for reason, count in sorted(counts.items()):
                    lines.append(f"    {reason}: {count}")
        if self.skipped_examples:
            lines.append("  first skipped records:")
            lines.extend(f"    {example}" for example in self.skipped_examples)
        return "\n".join(lines)


@dataclass
class Record:
    """One input record: where it starts, its 0-based index in the stream, its payload."""

    path: str
    line: int
    index: int
    payload: Any = None


@dataclass
class Document:
    """A normalised document, a description for messages, and the counter key used if it is empty."""

    text: str
    where: str
    empty_reason: str = EMPTY_DOCUMENT


@dataclass
class PendingCounts:
    """Counts that only reach the report if the cluster is written."""

    dropped_documents: Counter = field(default_factory=Counter)
    truncated: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)


class BadRecord(Exception):
    """Raised while building a cluster; turned into an error or a skip by the caller."""

    def __init__(self, reason: str, detail: str, line: Optional[int] = None, path: Optional[str] = None):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.line = line
        self.path = path


class ConversionSession:
    """Shared validation, counting and error policy of one conversion."""

    def __init__(self, report: ConversionReport, split: str, skip_bad: bool,
                 allow_empty_summary: bool, error_on_empty_document: bool):
        self.report = report
        self.split = split
        self.skip_bad = skip_bad
        self.allow_empty_summary = allow_empty_summary
        self.error_on_empty_document = error_on_empty_document
        self.is_training = split.strip().lower() in TRAINING_SPLITS
        self._seen_ids: set = set()

    def start_record(self, path: PathLike, line: int) -> Record:
        """Count a record and give it its stream index."""
        index = self.report.records_read
        self.report.records_read += 1
        return Record(str(path), line, index)

    def bad(self, record: Record, reason: str, detail: str, line: Optional[int] = None,
            path: Optional[str] = None) -> None:
        """Raise for a bad record, or count and skip it with ``skip_bad``.

        ``line`` / ``path`` locate the problem when it is not where the record starts."""
        line = record.line if line is None else line
        path = record.path if path is None else path
        if not self.skip_bad:
            raise InputFormatError.described(path, line, reason, detail)
        self.report.skipped[reason] += 1
        if len(self.report.skipped_examples) < _MAX_SKIP_EXAMPLES:
            self.report.skipped_examples.append(
                f"{format_location(path, line)}: {REASON_DESCRIPTIONS.get(reason, reason)}: {detail}")

    def filter_out(self, reason: str) -> None:
        """Count a record left out on purpose."""
        self.report.filtered[reason] += 1

    def finish(self, record: Record, *, cluster_id: Any, documents: Sequence[Document],
               summary: Optional[str] = None, summaries: Optional[Sequence[str]] = None,
               title: Optional[str] = None, pending: Optional[PendingCounts] = None) -> Optional[Dict[str, Any]]:
        """Validate a built cluster; return its contract dict, or None if it was skipped."""
        pending = pending or PendingCounts()
        if cluster_id is None or (isinstance(cluster_id, str) and not cluster_id.strip()):
            cluster_id = f"{self.split}-{record.index}"
        cluster_id = str(cluster_id).strip()

        kept = [doc.text for doc in documents if doc.text]
        empty = [doc for doc in documents if not doc.text]
        if not kept:
            detail = "no document" if not documents else f"all {len(documents)} documents are empty"
            self.bad(record, EMPTY_CLUSTER, f"cluster {cluster_id!r}: {detail}")
            return None
        if empty and self.error_on_empty_document:
            names = ", ".join(doc.where for doc in empty)
            self.bad(record, EMPTY_DOCUMENT, f"cluster {cluster_id!r}: empty {names}")
            return None

        references: List[str] = []
        if summaries is not None:
            references = [ref for ref in summaries if ref]
            if len(references) < len(summaries):
                pending.notes["empty_reference_dropped"] += len(summaries) - len(references)
            summary = references[0] if references else ""
        summary = summary or ""
        if not summary:
            if self.is_training:
                self.bad(record, EMPTY_SUMMARY,
                         f"cluster {cluster_id!r} has an empty summary in training split {self.split!r}")
                return None
            if not self.allow_empty_summary:
                self.bad(record, EMPTY_SUMMARY,
                         f"cluster {cluster_id!r} has an empty summary (allowed in split "
                         f"{self.split!r} only with --allow-empty-summary)")
                return None

        cluster: Dict[str, Any] = {"id": cluster_id}
        if title:
            cluster["title"] = title
        cluster["documents"] = kept
        cluster["summary"] = summary
        if summaries is not None and len(references) > 1:
            cluster["summaries"] = references
        problem = contract_string_problem(cluster)  # a lone surrogate, an id with a line break
        if problem is not None:
            reason, detail = problem
            self.bad(record, reason, f"cluster {cluster_id!r}: {detail}" if reason == LONE_SURROGATE else detail)
            return None
        if cluster_id in self._seen_ids:
            self.bad(record, DUPLICATE_ID, f"id {cluster_id!r} was already written")
            return None
        self._seen_ids.add(cluster_id)

        for doc in empty:
            pending.dropped_documents[doc.empty_reason] += 1
        self.report.dropped_documents.update(pending.dropped_documents)
        self.report.truncated.update(pending.truncated)
        self.report.notes.update(pending.notes)
        self.report.clusters_written += 1
        self.report.documents_written += len(kept)
        return cluster


# --------------------------------------------------------------------------
# Text normalisation
# --------------------------------------------------------------------------

def normalize_paragraph(text: str) -> str:
    """Collapse every run of whitespace (newlines included) to one space and strip."""
    return _ANY_WHITESPACE.sub(" ", text).strip()


def normalize_document(text: str, paragraph_separator: Optional[str] = None) -> str:
    """Normalise a document: paragraphs split at blank lines (or at ``paragraph_separator``),
    whitespace inside each paragraph collapsed, empty paragraphs removed, paragraphs
    joined by one blank line (:func:`mdsfair.text.split_paragraphs`, after line
    endings, U+2029 and ``paragraph_separator`` become newlines and blank lines)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u2029", "\n\n")
    if paragraph_separator:
        text = text.replace(paragraph_separator, "\n\n")
    return PARAGRAPH_SEPARATOR.join(split_paragraphs(text))


def normalize_summary(text: str) -> str:
    """A summary is one line: all whitespace collapsed to single spaces."""
    return normalize_paragraph(text)


# --------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------

def as_paths(inputs: Inputs) -> List[Path]:
    """One path or a sequence of paths -> list of Path."""
    if isinstance(inputs, (str, os.PathLike)):
        return [Path(inputs)]
    paths = [Path(p) for p in inputs]
    if not paths:
        raise ValueError("no input file given")
    return paths


def _open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently un-gzipping it (by magic number)."""
    handle = open(path, "rb")
    magic = handle.read(2)
    handle.seek(0)
    if magic == b"\x1f\x8b":
        handle.close()
        return gzip.open(path, "rb")
    return handle


def iter_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """Yield (1-based line number, text) with bytes that are not UTF-8 kept as surrogate escapes."""
    with _open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            text = raw.decode("utf-8", "surrogateescape")
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield number, text


def _read_text(path: Path) -> str:
    """Whole file as text, bytes that are not UTF-8 kept as surrogate escapes, BOM removed."""
    with _open_binary(path) as handle:
        text = handle.read().decode("utf-8", "surrogateescape")
    return text[1:] if text.startswith("\ufeff") else text


def invalid_utf8_detail(text: str) -> Optional[Tuple[int, str]]:
    """(character offset, message) of the first undecodable byte in ``text``, or None."""
    match = _SURROGATE_ESCAPES.search(text)
    if match is None:
        return None
    byte = ord(match.group()) - 0xDC00
    return match.start(), f"byte 0x{byte:02x} is not valid UTF-8"


def _first_invalid_utf8_error(path: Path, text: str) -> Optional[InputFormatError]:
    """Error for the first undecodable byte of a whole-file text, with its line and column."""
    found = invalid_utf8_detail(text)
    if found is None:
        return None
    offset, message = found
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return InputFormatError.described(path, line, INVALID_UTF8, f"{message} (column {column})")


class _LineCounter:
    """1-based line of a character offset, computed incrementally for increasing offsets."""

    def __init__(self, text: str):
        self._text = text
        self._offset = 0
        self._line = 1

    def line_at(self, offset: int) -> int:
        if offset < self._offset:
            self._offset, self._line = 0, 1
        self._line += self._text.count("\n", self._offset, offset)
        self._offset = offset
        return self._line


def _starts_with_json_list(path: Path) -> bool:
    """True when the first non-whitespace character of the file is ``[``."""
    with _open_binary(path) as handle:
        first = True
        while True:
            chunk = handle.read(65536)
            if not chunk:
                return False
            if first and chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
            first = False
            stripped = chunk.lstrip(b" \t\r\n")
            if stripped:
                return stripped[:1] == b"["


def _iter_jsonl(path: Path, session: ConversionSession) -> Iterator[Record]:
    """Records of a JSON-lines file; blank lines are not records."""
    for line_number, text in iter_lines(path):
        if not text.strip():
            continue
        record = session.start_record(path, line_number)
        bad_bytes = invalid_utf8_detail(text)
        if bad_bytes is not None:
            offset, message = bad_bytes
            session.bad(record, INVALID_UTF8, f"{message} (column {offset + 1})")
            continue
        try:
            record.payload = json.loads(text)
        except json.JSONDecodeError as err:
            session.bad(record, INVALID_JSON, f"{err.msg} (column {err.colno})")
            continue
        yield record


def _iter_json_list(path: Path, session: ConversionSession) -> Iterator[Record]:
    """Records of a file holding one JSON list, each located at the line where it starts.

    A syntax error in the list itself is fatal: element boundaries cannot be
    recovered after it."""
    text = _read_text(path)
    if not session.skip_bad:
        error = _first_invalid_utf8_error(path, text)
        if error is not None:
            raise error
    lines = _LineCounter(text)
    decoder = json.JSONDecoder()
    length = len(text)

    def fatal(offset: int, detail: str) -> InputFormatError:
        return InputFormatError.described(path, lines.line_at(offset), INVALID_JSON,
                                detail + " (the JSON list cannot be resynchronised after this)",
                                skippable=False)

    position = _JSON_WHITESPACE.match(text, 0).end() + 1  # past "["
    position = _JSON_WHITESPACE.match(text, position).end()
    if position < length and text[position] == "]":
        position = _JSON_WHITESPACE.match(text, position + 1).end()
        if position != length:
            raise fatal(position, "unexpected data after the top-level list")
        return
    while True:
        if position >= length:
            raise fatal(position, "file ends inside the top-level list")
        start_line = lines.line_at(position)
        try:
            payload, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as err:
            raise InputFormatError.described(path, err.lineno, INVALID_JSON,
                                   f"{err.msg} (column {err.colno}; the JSON list cannot be "
                                   "resynchronised after this)", skippable=False) from None
        record = session.start_record(path, start_line)
        bad_bytes = invalid_utf8_detail(text[position:end])
        if bad_bytes is not None:
            offset, message = bad_bytes
            session.bad(record, INVALID_UTF8, message,
                        line=start_line + text.count("\n", position, position + offset))
        else:
            record.payload = payload
            yield record
        position = _JSON_WHITESPACE.match(text, end).end()
        if position < length and text[position] == ",":
            position = _JSON_WHITESPACE.match(text, position + 1).end()
            continue
        if position < length and text[position] == "]":
            position = _JSON_WHITESPACE.match(text, position + 1).end()
            if position != length:
                raise fatal(position, "unexpected data after the top-level list")
            return
        raise fatal(position, "expected ',' or ']' after a list element")


def iter_json_records(paths: Sequence[Path], session: ConversionSession) -> Iterator[Record]:
    """Records of JSON-lines files or files holding one JSON list (detected per file; .gz ok)."""
    for path in paths:
        if _starts_with_json_list(path):
            yield from _iter_json_list(path, session)
        else:
            yield from _iter_jsonl(path, session)


def read_json_file_record(path: Path, session: ConversionSession, *, listed_at: Optional[Tuple[str, int]] = None
                          ) -> Optional[Record]:
    """One record holding a whole file's JSON value (a report per file, e.g. GovReport).

    The record is located at ``listed_at`` (file, line of a list that named the
    file) when given, else at line 1 of ``path``; invalid UTF-8 or JSON is
    located at its own line in ``path``. A missing file is bad input
    (``missing_file``) at the listing line. Returns None when the record was
    skipped (``skip_bad``)."""
    where_path, where_line = listed_at if listed_at is not None else (str(path), 1)
    record = session.start_record(where_path, where_line)
    if not path.is_file():
        session.bad(record, MISSING_FILE, f"{path} does not exist")
        return None
    text = _read_text(path)
    bad_bytes = invalid_utf8_detail(text)
    if bad_bytes is not None:
        offset, message = bad_bytes
        session.bad(record, INVALID_UTF8, message, line=text.count("\n", 0, offset) + 1, path=str(path))
        return None
    try:
        record.payload = json.loads(text)
    except json.JSONDecodeError as err:
        session.bad(record, INVALID_JSON, f"{err.msg} (column {err.colno})", line=err.lineno, path=str(path))
        return None
    return record


def _raise_csv_field_limit() -> None:
    """Allow CSV fields as long as a full set of reviews (the default limit is 128 KiB)."""
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def iter_csv_rows(path: Path, session: ConversionSession, delimiter: str
                  ) -> Tuple[List[str], Iterator[Tuple[Record, List[str]]]]:
    """Header and (record, row) pairs of a CSV file; each record is located at its row's first line."""
    _raise_csv_field_limit()
    text = _read_text(path)
    if not session.skip_bad:
        error = _first_invalid_utf8_error(path, text)
        if error is not None:
            raise error
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        return [], iter(())
    except csv.Error as err:
        raise InputFormatError.described(path, 1, MALFORMED_CSV_ROW, f"header: {err}", skippable=False) from None

    def rows() -> Iterator[Tuple[Record, List[str]]]:
        previous_end = reader.line_num
        while True:
            start_line = previous_end + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                previous_end = reader.line_num
                record = session.start_record(path, start_line)
                session.bad(record, MALFORMED_CSV_ROW, str(err))
                continue
            previous_end = reader.line_num
            if not row:
                continue  # a blank line is not a record
            record = session.start_record(path, start_line)
            if len(row) != len(header):
                session.bad(record, MALFORMED_CSV_ROW,
                            f"{len(row)} fields, but the header has {len(header)}")
                continue
            for column, value in enumerate(row):
                bad_bytes = invalid_utf8_detail(value)
                if bad_bytes is not None:
                    offset, message = bad_bytes
                    line = start_line + sum(v.count("\n") for v in row[:column]) + value.count("\n", 0, offset)
                    session.bad(record, INVALID_UTF8, f"{message} (column {header[column]!r})", line=line)
                    break
            else:
                yield record, row

    return header, rows()


# HierEncDec's data files (github.com/DAMO-NLP-SG/HierEncDec run_summarization.py): read with
# ``load_dataset(extension)`` for extension "csv" or "json", documents joined by " <REVBREAK> ".
HIERENCDEC_SEPARATOR = "<REVBREAK>"
HIERENCDEC_EXTENSIONS = (".csv", ".json", ".jsonl")


def hierencdec_columns(example: Any, text_column: Optional[str], summary_column: Optional[str]) -> Tuple[str, str]:
    """Text and summary column of one example of a HierEncDec data file, as
    ``run_summarization.py`` picks them: the named ones, else the
    second-to-last and the last column."""
    if not isinstance(example, dict):
        raise BadRecord(WRONG_TYPE, f"expected a JSON object, got {type(example).__name__}")
    keys = list(example)
    if (text_column is None or summary_column is None) and len(keys) < 2:
        raise BadRecord(MISSING_KEY, f"columns {keys}: HierEncDec takes text and summary from the last two "
                                     "columns, and there are fewer than two")
    return (text_column or keys[-2], summary_column or keys[-1])


def add_hierencdec_column_arguments(parser, text: str, summary: str, ids: str, prefix: str = "") -> None:
    """``--text-column``, ``--summary-column`` and ``--id-column`` of a
    HierEncDec-format converter: ``text`` / ``summary`` say what the columns
    hold, ``ids`` the ids used without an id column, ``prefix`` (e.g.
    ``"HierEncDec files: "``) when the format also reads another layout."""
    parser.add_argument("--text-column", default=None,
                        help=f"{prefix}column of the {text} (default: the second-to-last, as HierEncDec's "
                             "run_summarization.py takes it)")
    parser.add_argument("--summary-column", default=None,
                        help=f"{prefix}column of the {summary} (default: the last column)")
    parser.add_argument("--id-column", default=None,
                        help=f"{prefix}column of the id (default: none, ids are {ids})")


def hierencdec_cluster(session: ConversionSession, record: Record, *, text_column: Optional[str] = None,
                       summary_column: Optional[str] = None, id_column: Optional[str] = None,
                       paragraph_separator: Optional[str] = None, document_name: str = "document",
                       empty_reason: str = EMPTY_DOCUMENT, default_id: Optional[str] = None
                       ) -> Optional[Dict[str, Any]]:
    """The cluster of one HierEncDec example: the text split on ``<REVBREAK>``
    (whitespace around it ignored; HierEncDec splits on ``" <REVBREAK> "`` and
    drops empty documents, here dropped and counted as ``empty_reason``),
    paragraphs inside a document split on ``paragraph_separator``; the summary
    on one line. Id: ``id_column`` when given, else ``default_id``, else
    ``{split}-{index}``."""
    example = record.payload
    text_key, summary_key = hierencdec_columns(example, text_column, summary_column)
    text = require_field(example, text_key, str)
    summary = require_field(example, summary_key, str)
    cluster_id = require_field(example, id_column, (str, int)) if id_column else default_id
    documents = [Document(normalize_document(piece, paragraph_separator), f"{document_name} {number}",
                          empty_reason=empty_reason)
                 for number, piece in enumerate(text.split(HIERENCDEC_SEPARATOR), start=1)]
    return session.finish(record, cluster_id=cluster_id, documents=documents, summary=normalize_summary(summary))


def iter_hierencdec_records(paths: Sequence[Path], session: ConversionSession, delimiter: str = ","
                            ) -> Iterator[Record]:
    """Records of HierEncDec data files, each payload a dict column -> value.

    ``.csv`` files are read as CSV (a header row, then one example per row),
    ``.json`` / ``.jsonl`` files as JSON lines or one JSON list of objects (the
    two layouts ``load_dataset("json")`` reads); a ``.gz`` suffix is looked
    through. Another extension is refused, as ``run_summarization.py`` does."""
    for path in paths:
        name = path.name[:-3] if path.name.endswith(".gz") else path.name
        extension = os.path.splitext(name)[1].lower()
        if extension not in HIERENCDEC_EXTENSIONS:
            raise ValueError(f"{path}: HierEncDec data files are .csv or .json (got {extension or 'no extension'})")
        if extension == ".csv":
            header, rows = iter_csv_rows(path, session, delimiter)
            for record, row in rows:
                record.payload = dict(zip(header, row))
                yield record
        else:
            yield from iter_json_records([path], session)


# --------------------------------------------------------------------------
# Tables (Parquet, Arrow, datasets.save_to_disk) read with pyarrow
# --------------------------------------------------------------------------

# Names a split goes by in Hugging Face layouts (parquet-converter folders, save_to_disk dictionaries).
SPLIT_ALIASES = {"val": ("val", "validation", "valid", "dev"), "validation": ("validation", "val", "valid", "dev"),
                 "valid": ("valid", "validation", "val", "dev"), "dev": ("dev", "validation", "valid", "val")}
_KNOWN_SPLITS = frozenset({"train", "test"} | set(SPLIT_ALIASES))
_TABLE_BATCH_ROWS = 1024


def _pyarrow():
    """pyarrow, imported on first use (a dependency of mdsfair; only the table readers need it)."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as err:  # pragma: no cover - pyarrow is in install_requires
        raise ImportError("reading Parquet / Arrow / save_to_disk data needs pyarrow: pip install pyarrow") from err
    return pyarrow


def _split_names(split: str) -> Tuple[str, ...]:
    split = split.strip().lower()
    return SPLIT_ALIASES.get(split, (split,))


def _matches_split(relative: Path, names: Sequence[str]) -> bool:
    """A Parquet file belongs to a split when a folder is named after it (``default/train/0000.parquet``)
    or its name starts with it (``data/train-00000-of-00001.parquet``, ``test.parquet``)."""
    parts = [part.lower() for part in relative.parts]
    return any(name in parts[:-1] or re.match(rf"{re.escape(name)}(?:[-._]|$)", parts[-1]) for name in names)


def table_files(path: Path, split: str) -> List[Path]:
    """The Parquet / Arrow files that hold ``split`` of the input ``path``.

    A file is itself. A folder with ``state.json`` is a ``Dataset.save_to_disk``
    folder: its ``_data_files`` in order (``dataset_info.json``'s features,
    when present, must be the Arrow files' columns). A folder with
    ``dataset_dict.json`` is a ``DatasetDict.save_to_disk`` folder: the
    sub-folder of ``split`` (or an alias: val / validation / valid / dev). Any
    other folder is searched for ``*.parquet`` files: those of ``split`` when
    some file names or folders name it, else all of them, unless they name other
    splits only (then ``split`` is not there: an error)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist")
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
        for name in _split_names(split):
            if name in splits:
                return table_files(path / name, split)
        raise ValueError(f"{path / 'dataset_dict.json'}: no split {split!r}; its splits are {splits} (--split)")
    if (path / "state.json").is_file():
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        files = [path / entry["filename"] for entry in state.get("_data_files", [])]
        missing = [str(f) for f in files if not f.is_file()]
        if not files or missing:
            raise FileNotFoundError(f"{path / 'state.json'} lists data files {missing or 'none'} that are not there")
        return files
    found = sorted(p for p in path.rglob("*.parquet") if p.is_file())
    if not found:
        raise FileNotFoundError(f"{path}: no .parquet file, state.json or dataset_dict.json in this folder")
    names = _split_names(split)
    chosen = [p for p in found if _matches_split(p.relative_to(path), names)]
    if chosen:
        return chosen
    others = sorted({name for p in found for name in _KNOWN_SPLITS if _matches_split(p.relative_to(path), [name])})
    if others:
        raise ValueError(f"{path}: its Parquet files are of splits {others}, none of split {split!r} (--split)")
    return found


def _expected_features(arrow_file: Path) -> Optional[List[str]]:
    """Column names of the ``dataset_info.json`` beside a save_to_disk Arrow file, if there is one."""
    info = arrow_file.parent / "dataset_info.json"
    if not (arrow_file.parent / "state.json").is_file() or not info.is_file():
        return None
    features = json.loads(info.read_text(encoding="utf-8")).get("features")
    return list(features) if isinstance(features, dict) else None


def iter_table_batches(path: Path) -> Tuple[List[str], Iterator[Any]]:
    """Column names and record batches of a Parquet file or an Arrow IPC stream / file.

    ``datasets`` writes its Arrow files as IPC streams; an IPC file (Feather
    v2) is read too. Anything else is refused naming the file."""
    pa = _pyarrow()
    if path.suffix.lower() == ".parquet":
        try:
            parquet = pa.parquet.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise InputFormatError.described(path, None, INVALID_TABLE, f"not a Parquet file ({err})", skippable=False) from None
        return list(parquet.schema_arrow.names), parquet.iter_batches(batch_size=_TABLE_BATCH_ROWS)
    source = pa.memory_map(str(path))
    try:
        reader = pa.ipc.open_stream(source)
        names, batches = list(reader.schema.names), iter(reader)
    except pa.ArrowInvalid:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid as err:
            raise InputFormatError.described(path, None, INVALID_TABLE, f"neither a Parquet file nor an Arrow IPC "
                                   f"stream or file ({err})", skippable=False) from None
        names, batches = list(reader.schema.names), (reader.get_batch(i) for i in range(reader.num_record_batches))
    expected = _expected_features(path)
    if expected is not None and sorted(expected) != sorted(names):
        raise InputFormatError.described(path, None, INVALID_TABLE, f"columns {names} differ from the features {expected} "
                               f"of {path.parent / 'dataset_info.json'}", skippable=False)
    return names, batches


def _struct_field(value: Any, part: str, column: str) -> Any:
    """Field ``part`` of a struct value (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRecord(WRONG_TYPE, f"column {column!r}: {part!r} is looked up in a {type(value).__name__}")
    if part not in value:
        raise BadRecord(MISSING_KEY, f"column {column!r}: no field {part!r} (fields: {sorted(value)})")
    return value[part]


def table_column_value(row: Dict[str, Any], column: str) -> Any:
    """``row[column]``, following ``a.b`` into struct column ``a`` -- or into every struct of a list
    column ``a`` (WCEP's ``articles.text``); None when a struct on the way is null."""
    value: Any = row
    for part in column.split("."):
        if isinstance(value, list):
            value = [_struct_field(item, part, column) for item in value]
        else:
            value = _struct_field(value, part, column)
    return value


def iter_table_records(paths: Sequence[Path], session: ConversionSession, split: str,
                       check_columns: Callable[[Path, List[str]], None]) -> Iterator[Record]:
    """Records of tables, one per row, located at the 1-based row number of their file as the "line";
    payload: the row as a dict (struct columns as dicts, list columns as lists).
    ``check_columns(file, column names)`` runs before a file's first row."""
    for path in paths:
        for table_file in table_files(path, split):
            names, batches = iter_table_batches(table_file)
            check_columns(table_file, names)
            row = 0
            for batch in batches:
                for payload in batch.to_pylist():
                    row += 1
                    record = session.start_record(table_file, row)
                    record.payload = payload
                    yield record


# --------------------------------------------------------------------------
# Record helpers
# --------------------------------------------------------------------------

def _type_name(types: Union[type, Tuple[type, ...]]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


def require_field(obj: Any, key: str, types: Union[type, Tuple[type, ...]], where: str = "") -> Any:
    """``obj[key]``, checked to exist and to have one of ``types``."""
    prefix = f"{where}: " if where else ""
    if not isinstance(obj, dict):
        raise BadRecord(WRONG_TYPE, f"{prefix}expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise BadRecord(MISSING_KEY, f"{prefix}missing key {key!r} (keys: {sorted(obj)})")
    value = obj[key]
    if not isinstance(value, types):
        raise BadRecord(WRONG_TYPE, f"{prefix}{key!r} must be {_type_name(types)}, "
                                    f"got {type(value).__name__}")
    return value


def optional_field(obj: Dict[str, Any], key: str, types: Union[type, Tuple[type, ...]], where: str = "") -> Any:
    """``obj[key]`` if present and not null, checked to have one of ``types``; else None."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, types):
        prefix = f"{where}: " if where else ""
        raise BadRecord(WRONG_TYPE, f"{prefix}{key!r} must be {_type_name(types)}, got {type(value).__name__}")
    return value


def string_list(values: Any, name: str) -> List[str]:
    """Check that ``values`` is a list of strings."""
    if not isinstance(values, list):
        raise BadRecord(WRONG_TYPE, f"{name!r} must be a list, got {type(values).__name__}")
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise BadRecord(WRONG_TYPE, f"{name}[{position}] must be str, got {type(value).__name__}")
    return values


def build_clusters(records: Iterator[Record], session: ConversionSession,
                   build: Callable[[Record], Optional[Dict[str, Any]]]) -> Iterator[Dict[str, Any]]:
    """Run ``build`` on every record, turning ``BadRecord`` into an error or a counted skip."""
    for record in records:
        try:
            cluster = build(record)
        except BadRecord as err:
            session.bad(record, err.reason, err.detail, line=err.line, path=err.path)
            continue
        if cluster is not None:
            yield cluster


def make_session(report: Optional[ConversionReport], format_name: str, split: str, skip_bad: bool,
                 allow_empty_summary: bool, error_on_empty_document: bool,
                 paths: Sequence[Path]) -> ConversionSession:
    """Session over ``report`` (a new one when None), with the report's header filled in."""
    if report is None:
        report = ConversionReport()
    report.format_name = report.format_name or format_name
    report.split = report.split or split
    if not report.inputs:
        report.inputs = [str(p) for p in paths]
    return ConversionSession(report, split, skip_bad, allow_empty_summary, error_on_empty_document)

