"""WCEP: one event per JSON line, optionally gzipped.

JSONL, optionally gzipped (``val.jsonl.gz``), one event per line with
``id``, ``date``, ``summary``, ``articles`` (items with ``title``, ``text``,
``id``/``url``, ``origin``, ``time``), ``collection``, ``wiki_links``,
``reference_urls``, ``category``. Source: github.com/complementizer/
wcep-mds-dataset README (``read_jsonl_gz``; ``c['summary']``,
``c['articles']``) and ``dataset_reproduction/combine_and_split.py``,
``extract_wcep_articles.py`` (article fields from newspaper3k).
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, Iterator, Optional

from mdsfair.argument_types import at_least
from mdsfair.text import PARAGRAPH_SEPARATOR

from .common import (
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    PendingCounts,
    Record,
    normalize_document,
    normalize_paragraph,
    normalize_summary,
    optional_field,
    require_field,
)
from .readers.json_files import iter_json_records
from .registry import register_converter


def add_wcep_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert wcep`` flags."""
    parser.add_argument(
        "--prepend-titles", action="store_true", help="put each article's title before its text as the first paragraph"
    )
    parser.add_argument(
        "--max-articles",
        type=at_least(1),
        default=None,
        metavar="N",
        help="keep the first N articles of each event (WCEP-10: 10); the rest are counted as truncated",
    )


@register_converter("wcep", add_arguments=add_wcep_arguments)
def iter_wcep(
    inputs: Inputs,
    split: str = "train",
    *,
    prepend_titles: bool = False,
    max_articles: Optional[int] = None,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """WCEP JSONL (``.jsonl`` or ``.jsonl.gz``) -> contract clusters.

    Documents are the ``text`` of the ``articles`` (in file order; WCEP-10 is
    ``max_articles=10``, articles beyond it are counted as truncated), with the
    article ``title`` as first paragraph when ``prepend_titles``; the summary is
    ``summary``; the id is the event ``id``."""
    if max_articles is not None and max_articles < 1:
        raise ValueError("max_articles must be at least 1")
    session = ConversionSession(options, "wcep", split, inputs)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        event = record.payload
        summary = require_field(event, "summary", str)
        articles = require_field(event, "articles", list)
        cluster_id = optional_field(event, "id", (str, int))
        pending = PendingCounts()
        if max_articles is not None and len(articles) > max_articles:
            pending.truncated["articles_beyond_max_articles"] += len(articles) - max_articles
            articles = articles[:max_articles]
        documents = []
        for number, article in enumerate(articles):
            where = f"articles[{number}]"
            text = normalize_document(require_field(article, "text", str, where))
            title = optional_field(article, "title", str, where)
            if text and prepend_titles and title and normalize_paragraph(title):
                text = normalize_paragraph(title) + PARAGRAPH_SEPARATOR + text
            documents.append(Document(text, f"article {number + 1}"))
        return session.finish(
            record, cluster_id=cluster_id, documents=documents, summary=normalize_summary(summary), pending=pending
        )

    yield from session.clusters(iter_json_records(session.paths, session), build)
