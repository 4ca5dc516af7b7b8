"""CNN/DailyMail in its common ``article`` / ``highlights`` form: one news article -> its highlights.

The single-document data set of the sparse encoder-decoder attention paper
(Manakul & Gales 2021). Layout: the columns of the Hugging Face
``cnn_dailymail`` loader (``cnn_dailymail.py`` of huggingface/datasets:
``article``, ``highlights`` -- the highlight sentences joined by newlines --
and ``id``, the hex SHA1 of the story URL), as the CSV exports of it carry
them (``train.csv`` / ``validation.csv`` / ``test.csv`` with header
``id,article,highlights``) or as JSON lines with the same keys (a JSON list
is read too). The Parquet files of the Hub are read by ``mdsfair-convert hf
--preset cnn_dailymail``.

Each article is a cluster of one document; its paragraphs are kept where the
text has blank lines. Summary: the highlights on one line (newlines become
spaces). Ids: ``id`` when present, else ``{split}-{index}``.
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, Iterator, Optional

from .common import (
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    Record,
    normalize_document,
    normalize_summary,
    optional_field,
    require_field,
)
from .readers.csv_files import iter_csv_or_json_records
from .registry import register_converter


def add_cnn_dailymail_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert cnn_dailymail`` flags."""
    parser.add_argument("--delimiter", default=",", help="CSV field delimiter (default: %(default)r)")


@register_converter("cnn_dailymail", add_arguments=add_cnn_dailymail_arguments)
def iter_cnn_dailymail(
    inputs: Inputs, split: str = "train", *, delimiter: str = ",", options: ConversionOptions = ConversionOptions()
) -> Iterator[Dict[str, Any]]:
    """CNN/DailyMail CSV (id,article,highlights) or JSONL -> single-document clusters.

    ``.csv`` files (``.csv.gz`` too) are read as CSV with a header, anything
    else as JSON lines / a JSON list. Document: ``article``; summary:
    ``highlights`` on one line; id: ``id``."""
    session = ConversionSession(options, "cnn_dailymail", split, inputs)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        story = record.payload
        article = require_field(story, "article", str)
        highlights = require_field(story, "highlights", str)
        return session.finish(
            record,
            cluster_id=optional_field(story, "id", (str, int)),
            documents=[Document(normalize_document(article), "article")],
            summary=normalize_summary(highlights),
        )

    yield from session.clusters(iter_csv_or_json_records(session.paths, session, delimiter), build)
