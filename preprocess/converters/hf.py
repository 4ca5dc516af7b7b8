"""Hugging Face data sets as local files: Parquet, Arrow, ``datasets.save_to_disk`` folders.

``datasets`` runs no loading scripts, so Multi-News and friends are read as
Parquet (the Hub's ``refs/convert/parquet`` branch: ``default/train/0000.parquet``,
or ``data/train-00000-of-00001.parquet``) or as folders a user saved with
``save_to_disk`` (``state.json`` + ``dataset_info.json`` + ``data-*.arrow``
IPC streams; a ``DatasetDict`` adds ``dataset_dict.json`` and one folder per
split). All are read with pyarrow (``datasets`` is not needed), one row at a
time; a row's 1-based number in its file is its "line" in messages.

Columns: ``documents_columns`` (one or more; ``a.b`` reads field ``b`` of
struct column ``a``, or of every struct of list column ``a``), each a string -- one document, or several joined by
``document_separator`` -- or a list of strings, one document each;
``summary_column``, a string (or a list of strings: several references);
``id_column``, optional. Presets fill them in for the Hub's layouts, as the
loaders that wrote them (huggingface/datasets ``datasets/<name>/<name>.py``)
name the columns:

* ``multi_news``: ``document`` (stories joined by ``|||||``), ``summary``
  (the loader's ``lstrip("- ")`` leaves the release's leading en dash
  ``"– "``, which is stripped and counted as ``summary_dash_prefix_stripped``,
  as ``mdsfair-convert multinews`` does for the release files);
* ``multi_x_science``: ``abstract`` and ``ref_abstract.abstract`` (the cited
  abstracts; ``ref_abstract`` is ``{cite_N, mid, abstract}``), summary
  ``related_work``, id ``aid``;
* ``wcep10`` (ccdv/WCEP-10, its dataset card): ``document``, ``summary``, id
  ``id``; its configs ``roberta`` (the default) join the articles with
  ``</s>`` (the preset's separator), ``bert`` with ``[SEP]``, ``newline``
  with ``\\n`` (pass ``--document-separator '[SEP]'`` / ``'\\n'``), ``list``
  keeps a list. The Hub's Parquet has one folder per config: give one;
* ``arxiv`` / ``pubmed`` (``scientific_papers``; ccdv/arxiv-summarization,
  ccdv/pubmed-summarization): ``article`` as one document (its sentences or
  paragraphs joined by newlines; the sections cannot be recovered, use the
  original JSONL with ``mdsfair-convert scientific_papers`` for PageSum's
  section pages), summary ``abstract``;
* ``cnn_dailymail``: ``article``, ``highlights``, id ``id``.

A trailing separator (nothing but whitespace after the last one) is a
format artifact: removed and counted as ``trailing_separator``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from mdsfair.raw_contract import MISSING_KEY, WRONG_TYPE, InputFormatError

from .common import (
    BadRecord,
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    PendingCounts,
    Record,
    has_type,
    normalize_document,
    normalize_summary,
    strip_summary_dash,
)
from .readers.tables import iter_table_records, table_column_value
from .registry import register_converter

# name -> documents columns, document separator, summary column, id column (None: no id column)
HF_PRESETS: Dict[str, Dict[str, Any]] = {
    "multi_news": dict(
        documents_columns=["document"],
        document_separator="|||||",
        summary_column="summary",
        id_column=None,
        strip_summary_dash=True,
    ),
    "multi_x_science": dict(
        documents_columns=["abstract", "ref_abstract.abstract"],
        document_separator=None,
        summary_column="related_work",
        id_column="aid",
    ),
    "wcep10": dict(documents_columns=["document"], document_separator="</s>", summary_column="summary", id_column="id"),
    **{
        name: dict(documents_columns=["article"], document_separator=None, summary_column="abstract", id_column=None)
        for name in ("arxiv", "pubmed")
    },
    "cnn_dailymail": dict(
        documents_columns=["article"], document_separator=None, summary_column="highlights", id_column="id"
    ),
}


def _texts(value: Any, column: str, separator: Optional[str], pending: PendingCounts) -> List[str]:
    """The document texts of one column's value: a string split on ``separator``, or a list of strings."""
    if value is None:
        pending.notes["null_documents_value"] += 1
        return []
    if isinstance(value, list):
        for position, item in enumerate(value):
            if item is not None and not isinstance(item, str):
                raise BadRecord(
                    WRONG_TYPE, f"column {column!r}[{position}] must be a string, got {type(item).__name__}"
                )
        return [item or "" for item in value]
    if not isinstance(value, str):
        raise BadRecord(
            WRONG_TYPE, f"column {column!r} must be a string or a list of strings, got {type(value).__name__}"
        )
    if not separator:
        return [value]
    pieces = value.split(separator)
    if len(pieces) > 1 and not pieces[-1].strip():
        pieces.pop()
        pending.notes["trailing_separator"] += 1
    return pieces


def add_hf_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert hf`` flags."""
    parser.add_argument(
        "--preset",
        choices=sorted(HF_PRESETS),
        default=None,
        help="column layout of a Hugging Face data set (see the module docstring); the flags below override its parts",
    )
    parser.add_argument(
        "--documents-column",
        dest="documents_columns",
        action="append",
        default=None,
        metavar="COLUMN",
        help="column of the documents (string or list of strings; a.b = field b of struct "
        "column a, or of each struct of list column a); repeat it to add columns in order "
        "(default: the preset's, else 'document')",
    )
    parser.add_argument(
        "--summary-column", default=None, help="column of the summary (default: the preset's, else 'summary')"
    )
    parser.add_argument(
        "--id-column",
        default=None,
        help="column of the cluster id; '' for none, ids are then SPLIT-INDEX (default: the preset's, else none)",
    )
    parser.add_argument(
        "--document-separator",
        default=None,
        help="string between documents inside a string column, e.g. Multi-News' '|||||'; "
        "'\\n' means a newline (default: the preset's, else none: one document)",
    )


@register_converter("hf", add_arguments=add_hf_arguments)
def iter_hf(
    inputs: Inputs,
    split: str = "train",
    *,
    preset: Optional[str] = None,
    documents_columns: Optional[Sequence[str]] = None,
    summary_column: Optional[str] = None,
    id_column: Optional[str] = None,
    document_separator: Optional[str] = None,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """Hugging Face data as Parquet file(s)/folder, Arrow file or save_to_disk folder -> contract clusters.

    A folder holding several splits is read for ``split`` (``val`` also
    matches ``validation``). Columns come from ``preset`` and the explicit
    options (which win); a column missing from a file is fatal, a row with a
    value of the wrong type, no document or an empty summary is bad input at
    its row number (``skip_bad`` skips and counts it). Empty documents are
    dropped and counted."""
    if preset is not None and preset not in HF_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(HF_PRESETS)}")
    defaults = HF_PRESETS.get(preset or "", dict(documents_columns=["document"], summary_column="summary"))
    if isinstance(documents_columns, str):
        documents_columns = [documents_columns]
    columns = list(documents_columns or defaults["documents_columns"])
    summary_column = summary_column or defaults["summary_column"]
    id_column = defaults.get("id_column") if id_column is None else (id_column or None)  # "": no id column
    separator = defaults.get("document_separator") if document_separator is None else document_separator
    separator = "\n" if separator == "\\n" else separator
    session = ConversionSession(options, "hf", split, inputs)

    def check_columns(path: Path, names: List[str]) -> None:
        wanted = columns + [summary_column] + ([id_column] if id_column else [])
        missing = [column for column in wanted if column.split(".")[0] not in names]
        if missing:
            raise InputFormatError.described(
                path,
                None,
                MISSING_KEY,
                f"column(s) {missing} not in the table's columns "
                f"{names} (--documents-column / --summary-column / --id-column / --preset)",
                skippable=False,
            )

    def build(record: Record) -> Optional[Dict[str, Any]]:
        row = record.payload
        pending = PendingCounts()
        documents = []
        for column in columns:
            for text in _texts(table_column_value(row, column), column, separator, pending):
                documents.append(Document(normalize_document(text), f"{column} document {len(documents) + 1}"))
        summary = table_column_value(row, summary_column)
        cluster_id = table_column_value(row, id_column) if id_column else None
        if cluster_id is not None and not has_type(cluster_id, (str, int)):
            raise BadRecord(
                WRONG_TYPE, f"id column {id_column!r} must be a string or an integer, got {type(cluster_id).__name__}"
            )
        if isinstance(summary, list) and all(isinstance(s, str) for s in summary):
            return session.finish(
                record,
                cluster_id=cluster_id,
                documents=documents,
                pending=pending,
                summaries=[normalize_summary(s) for s in summary],
            )
        if summary is not None and not isinstance(summary, str):
            raise BadRecord(
                WRONG_TYPE, f"summary column {summary_column!r} must be a string, got {type(summary).__name__}"
            )
        summary = normalize_summary(summary or "")
        if defaults.get("strip_summary_dash"):
            summary = strip_summary_dash(summary, pending)
        return session.finish(record, cluster_id=cluster_id, documents=documents, pending=pending, summary=summary)

    yield from session.clusters(iter_table_records(session.paths, session, split, check_columns), build)
