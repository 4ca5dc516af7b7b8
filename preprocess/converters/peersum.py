"""PeerSum: a paper's abstract and its reviews and comments -> the meta-review.

``peersum_all.json`` (JSON lines; a JSON list is accepted too) with
``paper_id``, ``paper_title``, ``paper_abstract``, ``paper_acceptance``,
``meta_review``, ``reviews`` (``[{review_id, writer, comment, rating,
confidence, reply_to}]``, ``writer`` in official_reviewer / author /
public) and ``label`` (train / val / test). Source: github.com/oaimli/PeerSum
README and ``crawling_data/prepare_peersum_for_training.py`` (documents =
``paper_abstract`` + ``review["comment"]`` of every review that has one,
summary = ``meta_review``). ``paper_title`` becomes the cluster's
``title``, the query that ``mdsfair-rank --method tfidf`` and
``mdsfair-preprocess --title-document`` read. Also accepted: the crawler's
nested layout (``review["content"]["comment"]``, ``abstract``, ``title``),
the Hugging Face layout
(``review_writers``, ``review_contents``; card of huggingface.co/datasets/
oaimli/PeerSum) and the prepared MDS layout (``source_documents``,
``summary``, ``paper_id``). Reviews keep their file order (PeerSum's own
script shuffles them; a converter must be deterministic).
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any, Dict, Iterator, List, Optional, Sequence

from mdsfair.raw_contract import WRONG_TYPE

from .common import (
    BadRecord,
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
    string_list,
)
from .readers.json_files import iter_json_records
from .registry import register_converter

PEERSUM_WRITERS = ("official_reviewer", "author", "public")


def _peersum_review_text(review: Any, where: str) -> Optional[str]:
    """Text of a PeerSum review: ``comment`` (release) or ``content.comment`` (crawler); None if absent."""
    if not isinstance(review, dict):
        raise BadRecord(WRONG_TYPE, f"{where} must be an object, got {type(review).__name__}")
    if "comment" in review:
        return optional_field(review, "comment", str, where)
    content = review.get("content")
    if isinstance(content, dict) and "comment" in content:
        return optional_field(content, "comment", str, f"{where}.content")
    return None


def _peersum_title(paper: Dict[str, Any]) -> Optional[str]:
    """The paper's title: ``paper_title`` (release, Hugging Face) or ``title``
    (crawler), on one line; None when absent or empty."""
    key = "paper_title" if "paper_title" in paper or "title" not in paper else "title"
    title = normalize_paragraph(optional_field(paper, key, str) or "")
    return title or None


def _comma_list(value: str) -> List[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def add_peersum_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert peersum`` flags."""
    parser.add_argument(
        "--no-abstract",
        dest="include_abstract",
        action="store_false",
        help="leave the paper abstract out of the documents",
    )
    parser.add_argument(
        "--writers",
        type=_comma_list,
        default=None,
        help=f"comma-separated writers whose reviews/comments to keep, from {','.join(PEERSUM_WRITERS)} (default: all)",
    )
    parser.add_argument(
        "--select-label",
        default=None,
        help="keep only papers whose 'label' is this value (train, val or test); the "
        "others are counted as filtered out",
    )


@register_converter("peersum", add_arguments=add_peersum_arguments)
def iter_peersum(
    inputs: Inputs,
    split: str = "train",
    *,
    include_abstract: bool = True,
    writers: Optional[Sequence[str]] = None,
    select_label: Optional[str] = None,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """PeerSum (``peersum_all.json``) -> contract clusters.

    Documents: ``paper_abstract`` (unless ``include_abstract`` is False), then
    the text of every review / comment in file order whose ``writer`` is in
    ``writers`` (default: all); reviews without text are dropped and counted.
    Summary: ``meta_review``; id: ``paper_id``; title: ``paper_title``
    (``title`` in the crawler's layout), when present. ``select_label`` keeps only
    papers whose ``label`` matches (the release holds all splits in one file);
    the others are counted as filtered out."""
    if writers is not None:
        writers = [w.strip() for w in writers if w.strip()]
        unknown = sorted(set(writers) - set(PEERSUM_WRITERS))
        if unknown or not writers:
            raise ValueError(f"writers must be a non-empty subset of {PEERSUM_WRITERS}, got {writers}")
    wanted = set(writers) if writers is not None else None
    session = ConversionSession(options, "peersum", split, inputs)

    def selected(record: Record) -> bool:
        if select_label is None:
            return True
        label = record.payload.get("label") if isinstance(record.payload, dict) else None
        if label == select_label:
            return True
        session.filter_out("label_not_selected")
        return False

    def review_documents(paper: Dict[str, Any], pending: PendingCounts) -> List[Document]:
        """The abstract (unless ``include_abstract`` is False) and the selected reviews with text."""
        documents: List[Document] = []
        if include_abstract:
            key = "paper_abstract" if "paper_abstract" in paper or "abstract" not in paper else "abstract"
            documents.append(Document(normalize_document(require_field(paper, key, str)), "abstract"))
        if "review_contents" in paper:  # Hugging Face layout
            contents = string_list(require_field(paper, "review_contents", list), "review_contents")
            review_writers = optional_field(paper, "review_writers", list) or [None] * len(contents)
            reviews = [
                (w, c, f"review_contents[{n}]")
                for n, (w, c) in enumerate(itertools.zip_longest(review_writers, contents))
            ]
        else:
            items = require_field(paper, "reviews", list)
            reviews = []
            for number, review in enumerate(items):
                where = f"reviews[{number}]"
                text = _peersum_review_text(review, where)
                reviews.append((review.get("writer"), text, where))
        for writer, text, where in reviews:
            if wanted is not None and writer not in wanted:
                pending.dropped_documents["writer_not_selected"] += 1
                continue
            if text is None:
                pending.dropped_documents["review_without_text"] += 1
                continue
            documents.append(Document(normalize_document(text), where))
        return documents

    def build(record: Record) -> Optional[Dict[str, Any]]:
        paper = record.payload
        if not isinstance(paper, dict):
            raise BadRecord(WRONG_TYPE, f"expected a JSON object, got {type(paper).__name__}")
        pending = PendingCounts()
        if "source_documents" in paper:  # prepare_peersum_for_training.py layout
            texts = string_list(require_field(paper, "source_documents", list), "source_documents")
            documents = [Document(normalize_document(t), f"source document {n}") for n, t in enumerate(texts, 1)]
            summary = require_field(paper, "summary", str)
        else:
            summary = require_field(paper, "meta_review", str)
            documents = review_documents(paper, pending)
        return session.finish(
            record,
            cluster_id=optional_field(paper, "paper_id", (str, int)),
            documents=documents,
            summary=normalize_summary(summary),
            title=_peersum_title(paper),
            pending=pending,
        )

    records = (r for r in iter_json_records(session.paths, session) if selected(r))
    yield from session.clusters(records, build)
