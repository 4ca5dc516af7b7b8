"""Bytes to text for the readers: gzip looked through (by magic number), a
UTF-8 byte order mark removed, bytes that are not UTF-8 kept as surrogate
escapes so that the reader can name the line and column of the first one."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path
from typing import IO, Iterator, Optional, Tuple

from mdsfair.raw_contract import INVALID_UTF8, InputFormatError

_SURROGATE_ESCAPES = re.compile("[\udc80-\udcff]")  # bytes surrogateescape could not decode


def open_binary(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, transparently un-gzipping it (by magic number)."""
    handle = open(path, "rb")
    magic = handle.read(2)
    handle.seek(0)
    if magic == b"\x1f\x8b":
        handle.close()
        return gzip.open(path, "rb")
    return handle


def uncompressed_extension(path: Path) -> str:
    """The lower-case extension of ``path``, a ``.gz`` suffix looked through (``train.csv.gz``: ``.csv``)."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return os.path.splitext(name)[1].lower()


def iter_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """Yield (1-based line number, text) with bytes that are not UTF-8 kept as surrogate escapes."""
    with open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            text = raw.decode("utf-8", "surrogateescape")
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield number, text


def read_text(path: Path) -> str:
    """Whole file as text, bytes that are not UTF-8 kept as surrogate escapes, BOM removed."""
    with open_binary(path) as handle:
        text = handle.read().decode("utf-8", "surrogateescape")
    return text[1:] if text.startswith("\ufeff") else text


def read_checked_text(path: Path, skip_bad: bool) -> str:
    """The whole file as :func:`read_text` reads it. Unless ``skip_bad``, a byte that is not UTF-8
    is an :class:`InputFormatError` at its line and column (:func:`first_invalid_utf8_error`) before
    any record is read; with ``skip_bad`` the reader skips the record that holds it."""
    text = read_text(path)
    if not skip_bad:
        error = first_invalid_utf8_error(path, text)
        if error is not None:
            raise error
    return text


def invalid_utf8_detail(text: str) -> Optional[Tuple[int, str]]:
    """(character offset, message) of the first undecodable byte in ``text``, or None."""
    match = _SURROGATE_ESCAPES.search(text)
    if match is None:
        return None
    byte = ord(match.group()) - 0xDC00
    return match.start(), f"byte 0x{byte:02x} is not valid UTF-8"


def first_invalid_utf8_error(path: Path, text: str) -> Optional[InputFormatError]:
    """Error for the first undecodable byte of a whole-file text, with its line and column."""
    found = invalid_utf8_detail(text)
    if found is None:
        return None
    offset, message = found
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return InputFormatError.described(path, line, INVALID_UTF8, f"{message} (column {column})")
