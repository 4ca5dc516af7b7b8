"""What every converter shares: the raw contract, validation, counting and errors.

A format module (one per release format, beside this one) reads its files
with a reader of :mod:`.readers` (:func:`~.readers.text.iter_lines`,
:func:`~.readers.json_files.iter_json_records`, :func:`~.readers.csv_files.iter_csv_rows`,
:func:`~.readers.hierencdec_files.iter_hierencdec_records`,
:func:`~.readers.tables.iter_table_records`) into the records of its
:class:`ConversionSession`, builds each cluster from one :class:`Record` with the
field helpers (:func:`require_field`, :func:`optional_field`,
:func:`string_list`) and hands it to :meth:`ConversionSession.finish`, which
validates it against the raw contract, applies the error policy of the
conversion's :class:`ConversionOptions` and counts everything in the
:class:`ConversionReport`. :meth:`ConversionSession.clusters` runs the builder
over the records and turns the :class:`BadRecord` it raises into an error or a
counted skip, so that a format is, besides its flags::

    session = ConversionSession(options, "wcep", split, inputs)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        ...  # the format's fields -> session.finish(record, cluster_id=..., documents=..., summary=...)

    yield from session.clusters(iter_json_records(session.paths, session), build)

The raw contract (:mod:`mdsfair.raw_contract`; docs/data.md, "The raw format"):
one cluster per line, UTF-8,
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
the element starts or the line of the bad byte), or, with
:attr:`ConversionOptions.skip_bad` (``--skip-bad``), the record is skipped and
counted by reason. Empty summaries are always bad in training splits;
elsewhere they are written only with ``allow_empty_summary``. Empty documents
inside an otherwise fine cluster are dropped and counted
(``error_on_empty_document`` makes them bad input instead). Structural
problems after which records cannot be told apart (source and target files of
different lengths, a broken JSON list, a CSV header without the requested
columns) are fatal even with ``skip_bad``. Every record read ends
up written, skipped or filtered out, and :class:`ConversionReport` counts each
(``records_read == clusters_written + skipped + filtered``); truncations and
dropped documents are counted too. Output is written to a temporary file and
moved into place only when the conversion succeeds (:func:`~.driver.convert`).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from mdsfair.raw_contract import (
    DUPLICATE_ID,
    EMPTY_CLUSTER,
    EMPTY_DOCUMENT,
    EMPTY_SUMMARY,
    LONE_SURROGATE,
    MISSING_KEY,
    REASON_DESCRIPTIONS,
    WRONG_TYPE,
    InputFormatError,
    contract_string_problem,
    format_location,
)
from mdsfair.text import PARAGRAPH_SEPARATOR, split_paragraphs

PathLike = Union[str, "os.PathLike[str]"]
Inputs = Union[PathLike, Sequence[PathLike]]

TRAINING_SPLITS = frozenset({"train", "training"})

# How many skipped records ConversionReport.skipped_examples keeps (ConversionReport.skipped
# counts by the reason codes of mdsfair.raw_contract, shared with mdsfair-preprocess and -baseline).
_MAX_SKIP_EXAMPLES = 20
_ANY_WHITESPACE = re.compile(r"\s+")
_SUMMARY_DASH_PREFIX = re.compile(r"^[\u2013\u2014-]\s+")


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
            f"mdsfair-convert {self.format_name} (split {self.split}): {', '.join(self.inputs)} -> {self.output_path}",
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

    def strip_counted(self, pattern: re.Pattern, text: str, note: str) -> str:
        """``text`` without the first match of ``pattern`` (a prefix the format's release adds),
        the removal counted under ``note``."""
        stripped = pattern.sub("", text, count=1)
        if stripped != text:
            self.notes[note] += 1
        return stripped


class BadRecord(Exception):
    """Raised while building a cluster; turned into an error or a skip by the caller."""

    def __init__(self, reason: str, detail: str, line: Optional[int] = None, path: Optional[str] = None):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.line = line
        self.path = path


@dataclass(frozen=True)
class ConversionOptions:
    """What every format takes besides its inputs, its split and its own options: the
    bad-input policy of one conversion and the report it counts into.

    ``mdsfair-convert`` builds it once from its common flags and
    :func:`~.driver.convert` hands it to the format's generator, which opens its
    :class:`ConversionSession` with it."""

    skip_bad: bool = False
    """Skip a bad record and count it by reason (``--skip-bad``) instead of raising
    :class:`InputFormatError` at its file and line."""

    allow_empty_summary: bool = False
    """Write a cluster whose summary is empty in a split that is not a training split
    (``--allow-empty-summary``); in a training split it is always bad input."""

    error_on_empty_document: bool = False
    """Make an empty document inside a cluster bad input (``--error-on-empty-document``)
    instead of dropping it and counting it under its ``empty_reason``."""

    report: Optional[ConversionReport] = field(default=None, compare=False)
    """The report the conversion counts into (its format, split and inputs filled in when
    empty); None: the session starts a new one (:attr:`ConversionSession.report`)."""


class ConversionSession:
    """Shared validation, counting and error policy of one conversion.

    Opened by a format's generator with its :class:`ConversionOptions`, its format name,
    its split and its inputs, one path or several (:attr:`paths`, the report's ``inputs``
    when it has none yet)."""

    def __init__(self, options: ConversionOptions, format_name: str, split: str, inputs: Inputs):
        self.paths = as_paths(inputs)
        report = ConversionReport() if options.report is None else options.report
        report.format_name = report.format_name or format_name
        report.split = report.split or split
        if not report.inputs:
            report.inputs = [str(p) for p in self.paths]
        self.report = report
        self.options = options
        self.split = split
        self.is_training = split.strip().lower() in TRAINING_SPLITS
        self._seen_ids: set = set()

    def start_record(self, path: PathLike, line: int) -> Record:
        """Count a record and give it its stream index."""
        index = self.report.records_read
        self.report.records_read += 1
        return Record(str(path), line, index)

    def bad(
        self, record: Record, reason: str, detail: str, line: Optional[int] = None, path: Optional[str] = None
    ) -> None:
        """Raise for a bad record, or count and skip it with ``skip_bad``.

        ``line`` / ``path`` locate the problem when it is not where the record starts."""
        line = record.line if line is None else line
        path = record.path if path is None else path
        if not self.options.skip_bad:
            raise InputFormatError.described(path, line, reason, detail)
        self.report.skipped[reason] += 1
        if len(self.report.skipped_examples) < _MAX_SKIP_EXAMPLES:
            self.report.skipped_examples.append(
                f"{format_location(path, line)}: {REASON_DESCRIPTIONS.get(reason, reason)}: {detail}"
            )

    def filter_out(self, reason: str) -> None:
        """Count a record left out on purpose."""
        self.report.filtered[reason] += 1

    def clusters(
        self, records: Iterable[Record], build: Callable[[Record], Optional[Dict[str, Any]]]
    ) -> Iterator[Dict[str, Any]]:
        """Run ``build`` on every record, turning ``BadRecord`` into an error or a counted skip."""
        for record in records:
            try:
                cluster = build(record)
            except BadRecord as err:
                self.bad(record, err.reason, err.detail, line=err.line, path=err.path)
                continue
            if cluster is not None:
                yield cluster

    def finish(
        self,
        record: Record,
        *,
        cluster_id: Any,
        documents: Sequence[Document],
        summary: Optional[str] = None,
        summaries: Optional[Sequence[str]] = None,
        title: Optional[str] = None,
        pending: Optional[PendingCounts] = None,
    ) -> Optional[Dict[str, Any]]:
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
        if empty and self.options.error_on_empty_document:
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
                self.bad(
                    record,
                    EMPTY_SUMMARY,
                    f"cluster {cluster_id!r} has an empty summary in training split {self.split!r}",
                )
                return None
            if not self.options.allow_empty_summary:
                self.bad(
                    record,
                    EMPTY_SUMMARY,
                    f"cluster {cluster_id!r} has an empty summary (allowed in split "
                    f"{self.split!r} only with --allow-empty-summary)",
                )
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


def strip_summary_dash(summary: str, pending: PendingCounts) -> str:
    """A Multi-News summary without the en dash it starts with in the release (``"– "``, which the
    Hugging Face loader's ``lstrip("- ")`` leaves), counted as ``summary_dash_prefix_stripped``:
    ``mdsfair-convert multinews`` and ``hf --preset multi_news`` read the same summaries."""
    return pending.strip_counted(_SUMMARY_DASH_PREFIX, summary, "summary_dash_prefix_stripped")


# --------------------------------------------------------------------------
# Inputs (the readers are the modules of .readers)
# --------------------------------------------------------------------------


def as_paths(inputs: Inputs) -> List[Path]:
    """One path or a sequence of paths -> list of Path."""
    if isinstance(inputs, (str, os.PathLike)):
        return [Path(inputs)]
    paths = [Path(p) for p in inputs]
    if not paths:
        raise ValueError("no input file given")
    return paths


# --------------------------------------------------------------------------
# Record helpers
# --------------------------------------------------------------------------


def _type_name(types: Union[type, Tuple[type, ...]]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


def has_type(value: Any, types: Union[type, Tuple[type, ...]]) -> bool:
    """``isinstance(value, types)``, except that a bool (JSON ``true``, a Parquet
    bool column) is not an ``int`` unless ``bool`` itself is asked for: an id
    column of booleans would otherwise become the ids ``"True"`` and ``"False"``."""
    if isinstance(value, bool):
        return bool in (types if isinstance(types, tuple) else (types,))
    return isinstance(value, types)


def require_field(obj: Any, key: str, types: Union[type, Tuple[type, ...]], where: str = "") -> Any:
    """``obj[key]``, checked to exist and to have one of ``types``."""
    prefix = f"{where}: " if where else ""
    if not isinstance(obj, dict):
        raise BadRecord(WRONG_TYPE, f"{prefix}expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        # the reason's description ("missing key: ") comes first in the message
        location = f" in {where}" if where else ""
        raise BadRecord(MISSING_KEY, f"{key!r}{location} (keys: {sorted(obj)})")
    value = obj[key]
    if not has_type(value, types):
        raise BadRecord(WRONG_TYPE, f"{prefix}{key!r} must be {_type_name(types)}, got {type(value).__name__}")
    return value


def optional_field(obj: Dict[str, Any], key: str, types: Union[type, Tuple[type, ...]], where: str = "") -> Any:
    """``obj[key]`` if present and not null, checked to have one of ``types``; else None."""
    value = obj.get(key)
    if value is None:
        return None
    if not has_type(value, types):
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
