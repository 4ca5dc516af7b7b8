"""WikiSum in its ranked-paragraph text form: title, ranked paragraphs, target.

JSONL with ``title``, ``paragraphs`` (list of str, already ranked) and
``summary`` or ``target``; optional ``id``. Why this and not a "real" text
format: tensor2tensor's ``data_generators/wikisum/wikisum.py`` builds its
inputs as the normalised title + ``<EOT>`` + the tf-idf-ranked reference
paragraphs joined by spaces and encodes them straight to subword ids
(TFRecords; paragraph boundaries are lost), and hiersumm (nlpyang/hiersumm
README) ships only ``.pt`` shards of SentencePiece ids of the top-40 ranked
paragraphs (``src``: list of paragraphs, ``tgt``, ``tgt_str``). Neither is a
text release, so there is no canonical text format; this JSONL is the
ranked-paragraph form both pipelines imply (title, ranked paragraphs,
target), and ``<q>`` sentence markers of hiersumm's ``tgt_str`` are turned
back into spaces.

Each ranked paragraph becomes its own document by default: ranking pools
the paragraphs of all reference web pages and reorders them, so neither the
source page nor contiguity survives; the paragraph is the unit the
Hierarchical Transformer encodes (one block per paragraph, graphs over
paragraphs), and HierEncDec / PageSum then get a boundary per source
passage instead of one 40-paragraph pseudo-document that would claim a
single source. ``paragraphs_as_one_document`` gives the flat alternative
(one document, paragraphs separated by blank lines).
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Dict, Iterator, Optional

from mdsfair.raw_contract import MISSING_KEY
from mdsfair.text import PARAGRAPH_SEPARATOR

from .common import (
    BadRecord,
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    PendingCounts,
    Record,
    normalize_paragraph,
    normalize_summary,
    optional_field,
    require_field,
    string_list,
)
from .readers.json_files import iter_json_records
from .registry import register_converter

_SENTENCE_MARKER = re.compile(r"\s*<q>\s*", re.IGNORECASE)


def add_wikisum_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert wikisum`` flags."""
    parser.add_argument(
        "--paragraphs-as-one-document",
        action="store_true",
        help="make all ranked paragraphs one document (blank lines between them) instead of one document per paragraph",
    )
    parser.add_argument(
        "--keep-sentence-markers",
        action="store_true",
        help="keep hiersumm's <q> sentence markers in the target instead of replacing them with spaces",
    )


@register_converter("wikisum", add_arguments=add_wikisum_arguments)
def iter_wikisum(
    inputs: Inputs,
    split: str = "train",
    *,
    paragraphs_as_one_document: bool = False,
    keep_sentence_markers: bool = False,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """WikiSum ranked-paragraph JSONL (``title``, ``paragraphs``, ``summary``/``target``) -> clusters.

    Each paragraph is one document (default), or all paragraphs form one
    document with ``paragraphs_as_one_document`` (see the module docstring for
    why). Paragraph order is kept (it is the ranking). ``<q>`` sentence markers
    in the target become spaces unless ``keep_sentence_markers``. The title is
    kept as ``"title"``; ids: ``id`` when present, else ``{split}-{index}``."""
    session = ConversionSession(options, "wikisum", split, inputs)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        example = record.payload
        paragraphs = string_list(require_field(example, "paragraphs", list), "paragraphs")
        if "summary" in example:
            target = require_field(example, "summary", str)
        elif "target" in example:
            target = require_field(example, "target", str)
        else:
            raise BadRecord(MISSING_KEY, f"needs 'summary' or 'target' (keys: {sorted(example)})")
        if not keep_sentence_markers:
            target = _SENTENCE_MARKER.sub(" ", target)
        title = normalize_paragraph(optional_field(example, "title", str) or "")
        flat = [normalize_paragraph(p) for p in paragraphs]
        pending = PendingCounts()
        if paragraphs_as_one_document:
            kept = [p for p in flat if p]
            if len(kept) < len(flat):
                pending.dropped_documents["empty_paragraph"] += len(flat) - len(kept)
            documents = [Document(PARAGRAPH_SEPARATOR.join(kept), "paragraphs")] if kept else []
        else:
            documents = [Document(text, f"paragraph {number}") for number, text in enumerate(flat, start=1)]
        return session.finish(
            record,
            cluster_id=optional_field(example, "id", (str, int)),
            documents=documents,
            summary=normalize_summary(target),
            title=title or None,
            pending=pending,
        )

    yield from session.clusters(iter_json_records(session.paths, session), build)
