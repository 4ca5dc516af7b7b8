"""CSV inputs: the header and one record per row, located at the row's
first line (a quoted field may span lines); and inputs that are CSV or JSON
by their extension."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Iterator, List, Sequence, Tuple

from mdsfair.raw_contract import INVALID_UTF8, MALFORMED_CSV_ROW, InputFormatError

from ..common import ConversionSession, Record
from .json_files import iter_json_records
from .text import invalid_utf8_detail, read_checked_text, uncompressed_extension


def _raise_csv_field_limit() -> None:
    """Allow CSV fields as long as a full set of reviews (the default limit is 128 KiB)."""
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def iter_csv_rows(
    path: Path, session: ConversionSession, delimiter: str
) -> Tuple[List[str], Iterator[Tuple[Record, List[str]]]]:
    """Header and (record, row) pairs of a CSV file; each record is located at its row's first line."""
    _raise_csv_field_limit()
    text = read_checked_text(path, session.options.skip_bad)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        return [], iter(())
    except csv.Error as err:
        raise InputFormatError.described(path, 1, MALFORMED_CSV_ROW, f"header: {err}", skippable=False) from None

    def rows() -> Iterator[Tuple[Record, List[str]]]:
        previous_end = reader.line_num
        while True:
            start_line = previous_end + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                previous_end = reader.line_num
                record = session.start_record(path, start_line)
                session.bad(record, MALFORMED_CSV_ROW, str(err))
                continue
            previous_end = reader.line_num
            if not row:
                continue  # a blank line is not a record
            record = session.start_record(path, start_line)
            if len(row) != len(header):
                session.bad(record, MALFORMED_CSV_ROW, f"{len(row)} fields, but the header has {len(header)}")
                continue
            for column, value in enumerate(row):
                bad_bytes = invalid_utf8_detail(value)
                if bad_bytes is not None:
                    offset, message = bad_bytes
                    line = start_line + sum(v.count("\n") for v in row[:column]) + value.count("\n", 0, offset)
                    session.bad(record, INVALID_UTF8, f"{message} (column {header[column]!r})", line=line)
                    break
            else:
                yield record, row

    return header, rows()


def iter_csv_or_json_records(paths: Sequence[Path], session: ConversionSession, delimiter: str) -> Iterator[Record]:
    """Records of ``.csv`` files (``.csv.gz`` too) read as CSV with a header, each payload a dict
    column -> value, and of any other file read as JSON lines or one JSON list."""
    for path in paths:
        if uncompressed_extension(path) != ".csv":
            yield from iter_json_records([path], session)
            continue
        header, rows = iter_csv_rows(path, session, delimiter)
        for record, row in rows:
            record.payload = dict(zip(header, row))
            yield record
