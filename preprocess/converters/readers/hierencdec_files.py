"""HierEncDec's data files (``.csv`` or ``.json`` / ``.jsonl``, as its
``run_summarization.py`` reads them) and the cluster of one of their examples."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from mdsfair.raw_contract import EMPTY_DOCUMENT, MISSING_KEY, WRONG_TYPE

from ..common import (
    BadRecord,
    ConversionSession,
    Document,
    Record,
    normalize_document,
    normalize_summary,
    require_field,
)
from .csv_files import iter_csv_or_json_records
from .text import uncompressed_extension

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
        raise BadRecord(
            MISSING_KEY,
            f"columns {keys}: HierEncDec takes text and summary from the last two "
            "columns, and there are fewer than two",
        )
    return (text_column or keys[-2], summary_column or keys[-1])


def add_hierencdec_column_arguments(parser, text: str, summary: str, ids: str, prefix: str = "") -> None:
    """``--text-column``, ``--summary-column`` and ``--id-column`` of a
    HierEncDec-format converter: ``text`` / ``summary`` say what the columns
    hold, ``ids`` the ids used without an id column, ``prefix`` (e.g.
    ``"HierEncDec files: "``) when the format also reads another layout."""
    parser.add_argument(
        "--text-column",
        default=None,
        help=f"{prefix}column of the {text} (default: the second-to-last, as HierEncDec's "
        "run_summarization.py takes it)",
    )
    parser.add_argument(
        "--summary-column", default=None, help=f"{prefix}column of the {summary} (default: the last column)"
    )
    parser.add_argument("--id-column", default=None, help=f"{prefix}column of the id (default: none, ids are {ids})")


@dataclass(frozen=True)
class HierEncDecColumns:
    """The columns a HierEncDec-format converter is given (``--text-column``,
    ``--summary-column``, ``--id-column``; None: as ``run_summarization.py``
    picks them, :func:`hierencdec_columns`, and no id column), and the cluster
    of one example read with them."""

    text: Optional[str] = None
    summary: Optional[str] = None
    id: Optional[str] = None

    def cluster(
        self,
        session: ConversionSession,
        record: Record,
        *,
        paragraph_separator: Optional[str] = None,
        document_name: str = "document",
        empty_reason: str = EMPTY_DOCUMENT,
        default_id: Optional[str] = None,
    ) -> Optional[Dict[str, Any]]:
        """The cluster of one HierEncDec example: the text split on ``<REVBREAK>``
        (whitespace around it ignored; HierEncDec splits on ``" <REVBREAK> "`` and
        drops empty documents, here dropped and counted as ``empty_reason``),
        paragraphs inside a document split on ``paragraph_separator``; the summary
        on one line. Id: the id column when given, else ``default_id``, else
        ``{split}-{index}``."""
        example = record.payload
        text_key, summary_key = hierencdec_columns(example, self.text, self.summary)
        text = require_field(example, text_key, str)
        summary = require_field(example, summary_key, str)
        cluster_id = require_field(example, self.id, (str, int)) if self.id else default_id
        documents = [
            Document(
                normalize_document(piece, paragraph_separator), f"{document_name} {number}", empty_reason=empty_reason
            )
            for number, piece in enumerate(text.split(HIERENCDEC_SEPARATOR), start=1)
        ]
        return session.finish(record, cluster_id=cluster_id, documents=documents, summary=normalize_summary(summary))


def iter_hierencdec_records(
    paths: Sequence[Path], session: ConversionSession, delimiter: str = ","
) -> Iterator[Record]:
    """Records of HierEncDec data files, each payload a dict column -> value.

    ``.csv`` files are read as CSV (a header row, then one example per row),
    ``.json`` / ``.jsonl`` files as JSON lines or one JSON list of objects (the
    two layouts ``load_dataset("json")`` reads); a ``.gz`` suffix is looked
    through. Another extension is refused, as ``run_summarization.py`` does."""
    for path in paths:
        extension = uncompressed_extension(path)
        if extension not in HIERENCDEC_EXTENSIONS:
            raise ValueError(f"{path}: HierEncDec data files are .csv or .json (got {extension or 'no extension'})")
        yield from iter_csv_or_json_records([path], session, delimiter)
