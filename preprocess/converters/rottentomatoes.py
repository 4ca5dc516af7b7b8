"""Rotten Tomatoes (Wang & Ling 2016): a movie's professional critics' reviews -> its critics consensus.

Two layouts, told apart per file:

* the original release, ``opinion_abstracts/rottentomatoes.json``: one JSON
  list of movies ``{"_movie_name", "_movie_id", "_critics": {key: review},
  "_critic_consensus"}``. Source: the corpus README (web.eecs.umich.edu/
  ~wangluxy, linked from HierEncDec's footnote 6) as the TensorFlow Datasets
  loader ``summarization/opinion_abstracts.py`` reads it (``json.load``; the
  critics are a dict whose items it keeps in file order). No split is given;
  every movie is one cluster;
* HierEncDec's compiled data (github.com/DAMO-NLP-SG/HierEncDec README:
  ``HierEncDec_data.zip`` unzipped to ``data/``, one folder per data set,
  ``train``/``val``/``test`` ``.csv`` or ``.json`` files read by
  ``run_summarization.py`` with ``load_dataset(extension)``): text column =
  ``--text-column`` or the second-to-last column, summary column =
  ``--summary-column`` or the last, reviews joined by ``" <REVBREAK> "``
  (HierEncDec's Table 4: 100 reviews per movie on average).

Documents: one per review, in file order; empty reviews dropped and counted
as ``empty_review``. Summary: the consensus. Ids: ``_movie_id`` (original),
``--id-column`` or ``{split}-{index}`` (HierEncDec).
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, Iterator, Optional

from mdsfair.raw_contract import WRONG_TYPE

from .common import (
    BadRecord,
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
from .readers.hierencdec_files import HierEncDecColumns, add_hierencdec_column_arguments, iter_hierencdec_records
from .registry import register_converter

ORIGINAL_REVIEWS_KEY = "_critics"


def add_rottentomatoes_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert rottentomatoes`` flags."""
    add_hierencdec_column_arguments(parser, "reviews", "consensus", "SPLIT-INDEX", prefix="HierEncDec files: ")


@register_converter("rottentomatoes", add_arguments=add_rottentomatoes_arguments)
def iter_rottentomatoes(
    inputs: Inputs,
    split: str = "train",
    *,
    text_column: Optional[str] = None,
    summary_column: Optional[str] = None,
    id_column: Optional[str] = None,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """Rotten Tomatoes: rottentomatoes.json (Wang & Ling 2016) or HierEncDec's csv/json -> contract clusters.

    A JSON object with ``_critics`` is a movie of the original release
    (reviews = the ``_critics`` values, summary = ``_critic_consensus``, id =
    ``_movie_id``); any other example is read as HierEncDec's compiled data
    (reviews split on ``<REVBREAK>``). Empty reviews are dropped and counted
    as ``empty_review``."""
    session = ConversionSession(options, "rottentomatoes", split, inputs)
    columns = HierEncDecColumns(text_column, summary_column, id_column)

    def build(record: Record) -> Optional[Dict[str, Any]]:
        movie = record.payload
        if not (isinstance(movie, dict) and ORIGINAL_REVIEWS_KEY in movie):
            return columns.cluster(session, record, document_name="review", empty_reason="empty_review")
        critics = require_field(movie, ORIGINAL_REVIEWS_KEY, dict)
        documents = []
        for key, review in critics.items():
            if not isinstance(review, str):
                raise BadRecord(WRONG_TYPE, f"_critics[{key!r}] must be str, got {type(review).__name__}")
            documents.append(Document(normalize_document(review), f"review {key!r}", empty_reason="empty_review"))
        consensus = require_field(movie, "_critic_consensus", str)
        return session.finish(
            record,
            cluster_id=optional_field(movie, "_movie_id", (str, int)),
            documents=documents,
            summary=normalize_summary(consensus),
        )

    yield from session.clusters(iter_hierencdec_records(session.paths, session), build)
