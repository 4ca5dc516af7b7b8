"""JSON inputs: JSON-lines files or files holding one JSON list (detected per
file; ``.gz`` looked through), each record located at the line where it
starts, and records that hold a whole file's JSON value."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator, Optional, Sequence, Tuple

from mdsfair.raw_contract import INVALID_JSON, INVALID_UTF8, MISSING_FILE, InputFormatError

from ..common import ConversionSession, Record
from .text import invalid_utf8_detail, iter_lines, open_binary, read_checked_text, read_text

_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


class _LineCounter:
    """1-based line of a character offset, computed incrementally for increasing offsets."""

    def __init__(self, text: str):
        self._text = text
        self._offset = 0
        self._line = 1

    def line_at(self, offset: int) -> int:
        if offset < self._offset:
            self._offset, self._line = 0, 1
        self._line += self._text.count("\n", self._offset, offset)
        self._offset = offset
        return self._line


def _starts_with_json_list(path: Path) -> bool:
    """True when the first non-whitespace character of the file is ``[``."""
    with open_binary(path) as handle:
        first = True
        while True:
            chunk = handle.read(65536)
            if not chunk:
                return False
            if first and chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
            first = False
            stripped = chunk.lstrip(b" \t\r\n")
            if stripped:
                return stripped[:1] == b"["


def _iter_jsonl(path: Path, session: ConversionSession) -> Iterator[Record]:
    """Records of a JSON-lines file; blank lines are not records."""
    for line_number, text in iter_lines(path):
        if not text.strip():
            continue
        record = session.start_record(path, line_number)
        bad_bytes = invalid_utf8_detail(text)
        if bad_bytes is not None:
            offset, message = bad_bytes
            session.bad(record, INVALID_UTF8, f"{message} (column {offset + 1})")
            continue
        try:
            record.payload = json.loads(text)
        except json.JSONDecodeError as err:
            session.bad(record, INVALID_JSON, f"{err.msg} (column {err.colno})")
            continue
        yield record


def _iter_json_list(path: Path, session: ConversionSession) -> Iterator[Record]:
    """Records of a file holding one JSON list, each located at the line where it starts.

    A syntax error in the list itself is fatal: element boundaries cannot be
    recovered after it."""
    text = read_checked_text(path, session.options.skip_bad)
    lines = _LineCounter(text)
    decoder = json.JSONDecoder()
    length = len(text)

    def fatal(offset: int, detail: str) -> InputFormatError:
        return InputFormatError.described(
            path,
            lines.line_at(offset),
            INVALID_JSON,
            detail + " (the JSON list cannot be resynchronised after this)",
            skippable=False,
        )

    def at_list_end(position: int) -> bool:
        """Whether ``position`` is the list's closing ``]``; past it, only whitespace may follow."""
        if position >= length or text[position] != "]":
            return False
        position = _JSON_WHITESPACE.match(text, position + 1).end()
        if position != length:
            raise fatal(position, "unexpected data after the top-level list")
        return True

    position = _JSON_WHITESPACE.match(text, 0).end() + 1  # past "["
    position = _JSON_WHITESPACE.match(text, position).end()
    if at_list_end(position):
        return
    while True:
        if position >= length:
            raise fatal(position, "file ends inside the top-level list")
        start_line = lines.line_at(position)
        try:
            payload, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as err:
            raise InputFormatError.described(
                path,
                err.lineno,
                INVALID_JSON,
                f"{err.msg} (column {err.colno}; the JSON list cannot be resynchronised after this)",
                skippable=False,
            ) from None
        record = session.start_record(path, start_line)
        bad_bytes = invalid_utf8_detail(text[position:end])
        if bad_bytes is not None:
            offset, message = bad_bytes
            session.bad(record, INVALID_UTF8, message, line=start_line + text.count("\n", position, position + offset))
        else:
            record.payload = payload
            yield record
        position = _JSON_WHITESPACE.match(text, end).end()
        if position < length and text[position] == ",":
            position = _JSON_WHITESPACE.match(text, position + 1).end()
            continue
        if at_list_end(position):
            return
        raise fatal(position, "expected ',' or ']' after a list element")


def iter_json_records(paths: Sequence[Path], session: ConversionSession) -> Iterator[Record]:
    """Records of JSON-lines files or files holding one JSON list (detected per file; .gz ok)."""
    for path in paths:
        if _starts_with_json_list(path):
            yield from _iter_json_list(path, session)
        else:
            yield from _iter_jsonl(path, session)


def read_json_file_record(
    path: Path, session: ConversionSession, *, listed_at: Optional[Tuple[str, int]] = None
) -> Optional[Record]:
    """One record holding a whole file's JSON value (a report per file, e.g. GovReport).

    The record is located at ``listed_at`` (file, line of a list that named the
    file) when given, else at line 1 of ``path``; invalid UTF-8 or JSON is
    located at its own line in ``path``. A missing file is bad input
    (``missing_file``) at the listing line. Returns None when the record was
    skipped (``skip_bad``)."""
    where_path, where_line = listed_at if listed_at is not None else (str(path), 1)
    record = session.start_record(where_path, where_line)
    if not path.is_file():
        session.bad(record, MISSING_FILE, f"{path} does not exist")
        return None
    text = read_text(path)
    bad_bytes = invalid_utf8_detail(text)
    if bad_bytes is not None:
        offset, message = bad_bytes
        session.bad(record, INVALID_UTF8, message, line=text.count("\n", 0, offset) + 1, path=str(path))
        return None
    try:
        record.payload = json.loads(text)
    except json.JSONDecodeError as err:
        session.bad(record, INVALID_JSON, f"{err.msg} (column {err.colno})", line=err.lineno, path=str(path))
        return None
    return record
