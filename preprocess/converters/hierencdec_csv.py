"""HierEncDec-style CSV (format ``csv``) and MReD's CSVs (format ``mred``, the same reader with MReD's defaults).

``csv``
    HierEncDec-style CSV: documents joined by ``" <REVBREAK> "`` in a text
    column. Source: github.com/DAMO-NLP-SG/HierEncDec README ("Doc 1 <REVBREAK>
    Doc 2 <REVBREAK> ... Doc n") and ``run_summarization.py`` (text column =
    ``column_names[-2]``, summary column = ``column_names[-1]`` unless named;
    split on ``" <REVBREAK> "``, empty documents dropped).
``mred``
    MReD's abstractive CSVs (``summarization/abstractive/filtered_*_data/
    {train,val,test}_*.csv`` in github.com/Shen-Chenhui/MReD): header
    ``text,summary``; reviews separated by ``" <REVBREAK> "``, paragraphs inside
    a review by ``" <sep> "`` (``summarization/extractive/code/merge.py`` splits
    on both); the control-variant files prefix the text with the label sequence
    and ``" ==> "`` (e.g. ``"abstract | strength | decision  ==> ..."``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from mdsfair.raw_contract import MISSING_KEY, InputFormatError

from .common import (
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    PendingCounts,
    Record,
    normalize_document,
    normalize_summary,
)
from .readers.csv_files import iter_csv_rows
from .registry import register_converter

HIERENCDEC_DOCUMENT_SEPARATOR = "<REVBREAK>"
MRED_PARAGRAPH_SEPARATOR = "<sep>"
_CONTROL_PREFIX = re.compile(r"^\s*[A-Za-z_]+(?:\s*\|\s*[A-Za-z_]+)*\s*==>\s*")
CONTROL_PREFIX_CHOICES = ("keep", "strip")


def _resolve_columns(
    path: Path,
    header: List[str],
    text_column: str,
    summary_columns: Sequence[str],
    id_column: Optional[str],
    last_two_columns: bool,
) -> Tuple[int, List[int], Optional[int]]:
    """Column positions for text, summaries and id; a missing column is fatal."""
    if last_two_columns:
        if len(header) < 2:
            raise InputFormatError.described(
                path, 1, MISSING_KEY, f"header {header} has fewer than two columns", skippable=False
            )
        text_index, summary_indices = len(header) - 2, [len(header) - 1]
    else:
        names = [text_column] + list(summary_columns)
        missing = [name for name in names if name not in header]
        if missing:
            raise InputFormatError.described(
                path,
                1,
                MISSING_KEY,
                f"column(s) {missing} not in header {header}; name them with "
                "--text-column / --summary-column or use --last-two-columns",
                skippable=False,
            )
        text_index = header.index(text_column)
        summary_indices = [header.index(name) for name in summary_columns]
    id_index = None
    if id_column is not None:
        if id_column not in header:
            raise InputFormatError.described(
                path, 1, MISSING_KEY, f"id column {id_column!r} not in header {header}", skippable=False
            )
        id_index = header.index(id_column)
    return text_index, summary_indices, id_index


def _csv_argument_adder(
    paragraph_default: Optional[str], control_default: str
) -> Callable[[argparse.ArgumentParser], None]:
    """Flags of ``mdsfair-convert csv`` / ``mred``, with that format's defaults."""

    def add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--text-column", default="text", help="column holding the documents (default: %(default)s)")
        parser.add_argument(
            "--summary-column",
            dest="summary_columns",
            action="append",
            default=None,
            metavar="COLUMN",
            help="column holding the summary (default: summary); repeat it for several "
            "references, written as 'summaries'",
        )
        parser.add_argument(
            "--id-column", default=None, help="column holding the cluster id (default: none, ids are SPLIT-INDEX)"
        )
        parser.add_argument(
            "--last-two-columns",
            action="store_true",
            help="take text and summary from the last two columns, as HierEncDec's "
            "run_summarization.py does when no column is named",
        )
        parser.add_argument(
            "--document-separator",
            default=HIERENCDEC_DOCUMENT_SEPARATOR,
            help="string between documents in the text column, whitespace around it ignored (default: %(default)s)",
        )
        parser.add_argument(
            "--paragraph-separator",
            default=paragraph_default,
            help="string between paragraphs inside a document (default: %(default)s)",
        )
        parser.add_argument(
            "--control-prefix",
            choices=CONTROL_PREFIX_CHOICES,
            default=control_default,
            help="what to do with an MReD control prefix 'label | label ==> ' at the "
            "start of the text (default: %(default)s)",
        )
        parser.add_argument("--delimiter", default=",", help="CSV field delimiter (default: %(default)r)")

    return add


def _csv_format(
    format_name: str, paragraph_default: Optional[str], control_default: str, description: str
) -> Callable[..., Iterator[Dict[str, Any]]]:
    """The generator of ``mdsfair-convert csv`` / ``mred`` (one reader, that format's defaults of
    ``paragraph_separator`` and ``control_prefix``), registered with its flags; ``description``
    is its docstring, the first line its CLI help."""

    def iter_csv_format(
        inputs: Inputs,
        split: str = "train",
        *,
        text_column: str = "text",
        summary_columns: Optional[Sequence[str]] = ("summary",),
        id_column: Optional[str] = None,
        last_two_columns: bool = False,
        document_separator: str = HIERENCDEC_DOCUMENT_SEPARATOR,
        paragraph_separator: Optional[str] = paragraph_default,
        control_prefix: str = control_default,
        delimiter: str = ",",
        options: ConversionOptions = ConversionOptions(),
    ) -> Iterator[Dict[str, Any]]:
        if control_prefix not in CONTROL_PREFIX_CHOICES:
            raise ValueError(f"control_prefix must be one of {CONTROL_PREFIX_CHOICES}, got {control_prefix!r}")
        if not document_separator:
            raise ValueError("document_separator must not be empty")
        if summary_columns is None:  # the CLI's --summary-column not given
            summary_columns = ("summary",)
        if isinstance(summary_columns, str):
            summary_columns = [summary_columns]
        if not summary_columns and not last_two_columns:
            raise ValueError("at least one summary column is needed")
        session = ConversionSession(options, format_name, split, inputs)

        def build(record: Record) -> Optional[Dict[str, Any]]:
            row, text_index, summary_indices, id_index = record.payload
            text = row[text_index]
            pending = PendingCounts()
            if control_prefix == "strip":
                text = pending.strip_counted(_CONTROL_PREFIX, text, "control_prefix_stripped")
            pieces = text.split(document_separator)
            documents = [
                Document(normalize_document(piece, paragraph_separator), f"document {number}")
                for number, piece in enumerate(pieces, start=1)
            ]
            references = [normalize_summary(row[i]) for i in summary_indices]
            cluster_id = row[id_index] if id_index is not None else None
            if len(references) == 1:
                return session.finish(
                    record, cluster_id=cluster_id, documents=documents, summary=references[0], pending=pending
                )
            return session.finish(
                record, cluster_id=cluster_id, documents=documents, summaries=references, pending=pending
            )

        def records() -> Iterator[Record]:
            for path in session.paths:
                header, rows = iter_csv_rows(path, session, delimiter)
                if not header:
                    continue
                columns = _resolve_columns(path, header, text_column, summary_columns, id_column, last_two_columns)
                for record, row in rows:
                    record.payload = (row,) + columns
                    yield record

        yield from session.clusters(records(), build)

    iter_csv_format.__name__ = iter_csv_format.__qualname__ = f"iter_{format_name}"
    iter_csv_format.__doc__ = description
    add_arguments = _csv_argument_adder(paragraph_default, control_default)
    return register_converter(format_name, add_arguments=add_arguments)(iter_csv_format)


iter_csv = _csv_format(
    "csv",
    None,
    "keep",
    """HierEncDec-style CSV -> contract clusters.

    The text column holds the documents joined by ``document_separator``
    (whitespace around it ignored; HierEncDec splits on ``" <REVBREAK> "``);
    ``paragraph_separator`` optionally marks paragraphs inside a document.
    ``last_two_columns`` takes text and summary from the last two columns, as
    HierEncDec's ``run_summarization.py`` does when no column is named. Several
    ``summary_columns`` give several references (``summaries``); None means
    ``("summary",)``.
    ``control_prefix="strip"`` removes an MReD control prefix (``"labels ==> "``).
    Ids: ``id_column`` when given, else ``{split}-{row index}``.""",
)
iter_mred = _csv_format(
    "mred",
    MRED_PARAGRAPH_SEPARATOR,
    "strip",
    """MReD abstractive CSV (``text,summary``) -> contract clusters.

    The CSV converter with MReD's defaults: reviews split on ``<REVBREAK>``,
    paragraphs on ``<sep>``, the control prefix of the ``*-ctrl.csv`` files
    (``"abstract | strength ==> "``) stripped and counted.""",
)
