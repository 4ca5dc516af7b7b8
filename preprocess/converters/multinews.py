"""Multi-News: parallel source / target line files.

Parallel line files (``train.src.cleaned`` / ``train.tgt``, ``train.src`` /
``train.tgt``, ``train.txt.src`` / ``train.txt.tgt``). Source:
github.com/Alex-Fabbri/Multi-News README (raw data "only replaced \\n with
NEWLINE_CHAR and appended ||||| to the end of each story"; the preprocessed
releases separate stories with ``story_separator_special_tag``) and the
Hugging Face ``multi_news.py`` loader (``NEWLINE_CHAR`` -> newline, the
target's leading dash removed).
"""

from __future__ import annotations

import argparse
import itertools
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from mdsfair.raw_contract import INVALID_UTF8, MISALIGNED_FILES, InputFormatError

from .common import (
    BadRecord,
    ConversionOptions,
    ConversionSession,
    Document,
    Inputs,
    PathLike,
    PendingCounts,
    Record,
    as_paths,
    normalize_document,
    normalize_summary,
    strip_summary_dash,
)
from .readers.text import invalid_utf8_detail, iter_lines
from .registry import register_converter

MULTINEWS_STORY_SEPARATOR = "story_separator_special_tag"
MULTINEWS_RAW_SEPARATOR = "|||||"
_MULTINEWS_NEWLINE = re.compile(r"[^\S\n]*NEWLINE_CHAR[^\S\n]*")


def _multinews_target_for(source: Path) -> Path:
    """The target file next to a Multi-News source file.

    ``X.src`` -> ``X.tgt``; ``train.src.cleaned`` -> ``train.tgt.cleaned`` or
    ``train.tgt``; ``train.txt.src.tokenized...`` -> ``train.txt.tgt.tokenized...``."""
    name = source.name
    cut = name.rfind(".src")
    if cut < 0:
        raise FileNotFoundError(
            f"cannot infer the target file of {source} (no '.src' in its name); pass targets explicitly"
        )
    candidates = [name[:cut] + ".tgt" + name[cut + 4 :], name[:cut] + ".tgt"]
    for candidate in candidates:
        path = source.with_name(candidate)
        if path.exists():
            return path
    raise FileNotFoundError(
        f"no target file for {source}: tried {', '.join(str(source.with_name(c)) for c in candidates)}; "
        "pass targets explicitly"
    )


def _normalize_multinews_text(text: str) -> str:
    """NEWLINE_CHAR -> newline, then the usual document normalisation (blank line = paragraph)."""
    return normalize_document(_MULTINEWS_NEWLINE.sub("\n", text))


def _split_multinews_source(text: str, document_separator: Optional[str]) -> List[str]:
    """Split one source line into stories.

    Without an explicit separator: ``story_separator_special_tag`` if present,
    else ``|||||`` (raw release); the empty piece after the ``|||||`` that the
    raw release appends to every story is a format artifact, not a document."""
    separator = document_separator
    if separator is None:
        if MULTINEWS_STORY_SEPARATOR in text:
            separator = MULTINEWS_STORY_SEPARATOR
        elif MULTINEWS_RAW_SEPARATOR in text:
            separator = MULTINEWS_RAW_SEPARATOR
        else:
            return [text]
    pieces = text.split(separator)
    if separator == MULTINEWS_RAW_SEPARATOR and len(pieces) > 1 and not pieces[-1].strip():
        pieces.pop()
    return pieces


def add_multinews_arguments(parser: argparse.ArgumentParser) -> None:
    """``mdsfair-convert multinews`` flags."""
    parser.add_argument(
        "--targets",
        nargs="+",
        metavar="TGT",
        help="target (.tgt) files, one per input in the same order; default: inferred from "
        "each source name (X.src -> X.tgt, train.src.cleaned -> train.tgt)",
    )
    parser.add_argument(
        "--document-separator",
        default=None,
        help="string between stories; default: story_separator_special_tag, or ||||| "
        "(raw release) when the former is absent",
    )


@register_converter("multinews", add_arguments=add_multinews_arguments)
def iter_multinews(
    inputs: Inputs,
    split: str = "train",
    *,
    targets: Optional[Sequence[PathLike]] = None,
    document_separator: Optional[str] = None,
    options: ConversionOptions = ConversionOptions(),
) -> Iterator[Dict[str, Any]]:
    """Multi-News parallel ``.src`` / ``.tgt`` line files -> contract clusters.

    ``inputs`` are source files; ``targets`` the matching target files (same
    order), inferred from the source names when omitted. Stories are split on
    ``document_separator`` (default: ``story_separator_special_tag``, or
    ``|||||`` for the raw release), ``NEWLINE_CHAR`` marks newlines (two in a
    row: a paragraph break), and the leading dash of the summaries (``"– "``)
    is removed. Ids: ``{split}-{line index}``. Files of different lengths are a
    fatal error."""
    sources = as_paths(inputs)
    if targets is None:
        target_paths = [_multinews_target_for(src) for src in sources]
    else:
        target_paths = as_paths(targets)
        if len(target_paths) != len(sources):
            raise ValueError(f"{len(sources)} source files but {len(target_paths)} target files")
    session = ConversionSession(options, "multinews", split, sources + target_paths)

    def records() -> Iterator[Record]:
        for source, target in zip(sources, target_paths):
            source_count = 0
            for source_item, target_item in itertools.zip_longest(iter_lines(source), iter_lines(target)):
                if source_item is None:
                    raise InputFormatError.described(
                        target,
                        target_item[0],
                        MISALIGNED_FILES,
                        f"{target} has more lines than {source} ({source_count})",
                        skippable=False,
                    )
                if target_item is None:
                    raise InputFormatError.described(
                        source,
                        source_item[0],
                        MISALIGNED_FILES,
                        f"{source} has more lines than {target} ({source_item[0] - 1})",
                        skippable=False,
                    )
                source_count = source_item[0]
                record = session.start_record(source, source_item[0])
                record.payload = (source_item[1], target, target_item[0], target_item[1])
                yield record

    def build(record: Record) -> Optional[Dict[str, Any]]:
        source_text, target, target_line, target_text = record.payload
        for path, line, text in ((record.path, record.line, source_text), (str(target), target_line, target_text)):
            bad_bytes = invalid_utf8_detail(text)
            if bad_bytes is not None:
                offset, message = bad_bytes
                raise BadRecord(INVALID_UTF8, f"{message} (column {offset + 1})", line=line, path=path)
        pieces = _split_multinews_source(source_text, document_separator)
        documents = [
            Document(_normalize_multinews_text(piece), f"document {number}")
            for number, piece in enumerate(pieces, start=1)
        ]
        pending = PendingCounts()
        summary = strip_summary_dash(normalize_summary(_MULTINEWS_NEWLINE.sub(" ", target_text)), pending)
        return session.finish(record, cluster_id=None, documents=documents, summary=summary, pending=pending)

    yield from session.clusters(records(), build)
