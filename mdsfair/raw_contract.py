"""The raw contract's one owner: reading and validating a raw cluster, the
one error type (:class:`InputFormatError`) with the one set of reason codes,
error locations, the UTF-8 byte-order mark and the references of a cluster.

The raw contract (docs/data.md, "The raw format"; this module is its owner,
docs/data_contract.md describes the data-bin it becomes): one cluster per JSON
line, ``{"id": str, "documents": [str, ...], "summary": str}``, optional
``"title"`` and optional
``"summaries": [str, ...]`` when a data set has several references
(``mdsfair-convert`` writes ``summary`` = ``summaries[0]``; FewSum's
``jsonl_multiref`` has ``summaries`` only). Three commands read it:
``mdsfair-preprocess`` (:mod:`mdsfair.preprocess.structure`),
``mdsfair-convert``'s JSON readers (:mod:`mdsfair.preprocess.converters.readers.json_files`)
and ``mdsfair-baseline`` (:mod:`mdsfair.evaluation.baselines`). They locate bad
input the same way (:func:`format_location`: ``FILE:LINE``), all accept a
UTF-8 byte-order mark before the first line (:func:`strip_utf8_bom`), and all
take a cluster's references by the same rule (:func:`cluster_references`).
A JSONL line is decoded and type-checked by :func:`decode_cluster_line`
(``mdsfair-preprocess`` then splits it, ``mdsfair-baseline`` reads it as is),
and every refusal is an :class:`InputFormatError` whose ``reason`` is one of
:data:`REASON_DESCRIPTIONS` (the converters' too, built with
:meth:`InputFormatError.described`), and the converters validate each cluster
they write with :func:`contract_string_problem`, as the readers do.

Pure Python: importing this module loads neither torch nor fairseq.
"""

import json
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

UTF8_BOM = b"\xef\xbb\xbf"


def format_location(path: Any, line: Optional[int] = None) -> str:
    """``FILE:LINE`` (or ``FILE`` when no line applies), the prefix of every
    bad-input message: ``f"{format_location(path, line)}: {reason}"``."""
    return str(path) if line is None else f"{path}:{line}"


def strip_utf8_bom(data: Union[bytes, str]) -> Union[bytes, str]:
    """``data`` without a leading UTF-8 byte-order mark (bytes ``EF BB BF`` or
    the decoded character U+FEFF). Call it on the first line of a file only:
    a BOM anywhere else is content (a zero-width no-break space)."""
    if isinstance(data, bytes):
        return data[len(UTF8_BOM) :] if data.startswith(UTF8_BOM) else data
    return data[1:] if data.startswith("\ufeff") else data


def cluster_references(record: Mapping[str, Any]) -> List[str]:
    """The references of a raw cluster, in order: ``summary`` first, then every
    entry of ``summaries`` that differs from it; empty strings are left out.

    With the converters' convention (``summary`` = ``summaries[0]``) this is
    ``summaries``; with ``summaries`` only (FewSum ``jsonl_multiref``), it is
    ``summaries``; with ``summary`` only, ``[summary]``. Values of the wrong
    type are the caller's to reject; here they are ignored.
    """
    summary = record.get("summary")
    candidates = [summary] if isinstance(summary, str) else []
    summaries = record.get("summaries")
    if isinstance(summaries, list):
        candidates += [s for s in summaries if isinstance(s, str) and s != summary]
    return [text for text in candidates if text.strip()]


#: Characters an id may not hold: they end a line (``str.splitlines``) or
#: separate fields in the files that carry ids (``{split}.ids.txt``, TSVs).
ID_BREAKING_CHARACTERS = "\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def contract_strings(record: Mapping[str, Any]) -> Iterator[Tuple[str, str]]:
    """``(field, text)`` of every string of a cluster: id, title, documents,
    summary and summaries."""
    for key in ("id", "title", "summary"):
        if isinstance(record.get(key), str):
            yield key, record[key]
    for key in ("documents", "summaries"):
        for index, text in enumerate(record.get(key) or []):
            if isinstance(text, str):
                yield f"{key}[{index}]", text


def contract_string_problem(record: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """``(code, detail)`` of the first string of ``record`` that cannot be
    written back as UTF-8 (a lone surrogate such as JSON ``"\\ud800"``), or
    of an id that is not a string or an integer (JSON ``true`` would become
    the id ``"True"``), is empty or holds a line break or tab; None when fine."""
    for field, text in contract_strings(record):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            return LONE_SURROGATE, (
                f"{field} holds a lone surrogate U+{ord(text[error.start]):04X} at character {error.start} "
                "(half of a UTF-16 pair, not a character; fix the JSON escape)"
            )
    if "id" in record:
        if isinstance(record["id"], bool) or not isinstance(record["id"], (str, int)):
            return WRONG_TYPE, f"id must be a string or an integer, got {type(record['id']).__name__} {record['id']!r}"
        cluster_id = str(record["id"])
        if not cluster_id.strip():
            return BAD_ID, f"id {cluster_id!r} is empty (every cluster needs an id to match its summary)"
        breaking = [c for c in cluster_id if c in ID_BREAKING_CHARACTERS]
        if breaking:
            return BAD_ID, (
                f"id {cluster_id!r} holds {breaking[0]!r}, which would break the line count of ids.txt "
                "(ids may not contain tabs or line breaks)"
            )
    return None


# --------------------------------------------------------------- bad input

# The reason codes of bad input, for every reader of the raw contract (and the
# converters' source formats); the keys of every skip counter.
INVALID_UTF8 = "invalid_utf8"
INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"
MISSING_KEY = "missing_key"
WRONG_TYPE = "wrong_type"
EMPTY_CLUSTER = "empty_cluster"
EMPTY_DOCUMENT = "empty_document"
EMPTY_SUMMARY = "empty_summary"
LONE_SURROGATE = "lone_surrogate"
BAD_ID = "bad_id"
DUPLICATE_ID = "duplicate_id"
MALFORMED_CSV_ROW = "malformed_csv_row"
MISALIGNED_FILES = "misaligned_files"
SECTION_MISMATCH = "section_mismatch"
MISSING_FILE = "missing_file"
INVALID_TABLE = "invalid_table"

#: Every reason code and what it means.
REASON_DESCRIPTIONS: Dict[str, str] = {
    INVALID_UTF8: "invalid UTF-8",
    INVALID_JSON: "not valid JSON",
    NOT_AN_OBJECT: "not a JSON object",
    MISSING_KEY: "missing key",
    WRONG_TYPE: "wrong type",
    EMPTY_CLUSTER: "empty cluster (no non-empty document)",
    EMPTY_DOCUMENT: "empty document",
    EMPTY_SUMMARY: "empty summary",
    LONE_SURROGATE: "lone surrogate",
    BAD_ID: "id holds a tab or line break",
    DUPLICATE_ID: "duplicate id",
    MALFORMED_CSV_ROW: "malformed CSV row",
    MISALIGNED_FILES: "source and target files do not line up",
    SECTION_MISMATCH: "section names and sections do not line up",
    MISSING_FILE: "file listed but not found",
    INVALID_TABLE: "not a readable table",
}

#: The reasons a line of a raw-contract JSONL file can be refused for
#: (``mdsfair-preprocess``'s skip counters, in report order).
CLUSTER_LINE_REASONS = (
    INVALID_UTF8,
    INVALID_JSON,
    NOT_AN_OBJECT,
    MISSING_KEY,
    WRONG_TYPE,
    EMPTY_CLUSTER,
    EMPTY_DOCUMENT,
    EMPTY_SUMMARY,
    LONE_SURROGATE,
    BAD_ID,
)


class InputFormatError(ValueError):
    """Bad input, located by file and 1-based line (``line`` None when no
    line applies); the message reads ``FILE:LINE: message``.

    Attributes: ``path``, ``line``, ``reason`` (a key of
    :data:`REASON_DESCRIPTIONS`), ``message`` and ``skippable`` (False for a
    structural error that ``--skip-bad`` cannot get past). Picklable, so it
    crosses worker processes.
    """

    def __init__(self, path: Any, line: Optional[int], reason: str, message: str, skippable: bool = True):
        if reason not in REASON_DESCRIPTIONS:
            raise ValueError(f"unknown bad-input reason {reason!r} (known: {sorted(REASON_DESCRIPTIONS)})")
        self.path = path
        self.line = line
        self.reason = reason
        self.message = message
        self.skippable = skippable
        super().__init__(f"{format_location(path, line)}: {message}")

    @classmethod
    def described(
        cls, path: Any, line: Optional[int], reason: str, detail: str, skippable: bool = True
    ) -> "InputFormatError":
        """The error whose message is the reason's description, then ``detail``
        (``FILE:LINE: not valid JSON: Expecting value (column 1)``), the form
        ``mdsfair-convert`` reports bad source records in."""
        return cls(str(path), line, reason, f"{REASON_DESCRIPTIONS.get(reason, reason)}: {detail}", skippable)

    def __reduce__(self):
        return (type(self), (self.path, self.line, self.reason, self.message, self.skippable))


def check_reference_fields(obj: Mapping[str, Any], path: Any, line: Optional[int]) -> None:
    """Raise :class:`InputFormatError` unless the record has ``summary`` (a
    string) or ``summaries`` (a list of strings), each of the right type."""
    if "summary" not in obj and "summaries" not in obj:
        raise InputFormatError(
            path,
            line,
            MISSING_KEY,
            f"missing key 'summary' (or 'summaries', a list of references) (keys: {sorted(obj)})",
        )
    if "summary" in obj and not isinstance(obj["summary"], str):
        raise InputFormatError(path, line, WRONG_TYPE, "'summary' must be a string")
    summaries = obj.get("summaries")
    if "summaries" in obj and not (isinstance(summaries, list) and all(isinstance(s, str) for s in summaries)):
        raise InputFormatError(path, line, WRONG_TYPE, "'summaries' must be a list of strings")


def decode_cluster_line(raw: bytes, path: Any, line: Optional[int], require_references: bool = True) -> Dict:
    """One raw-contract JSONL line as a checked dict: valid UTF-8, a JSON
    object with ``id`` and ``documents`` (a list of strings), ``summary`` /
    ``summaries`` of the right types (required with ``require_references``),
    a string ``title`` if any, no lone surrogate and a usable id
    (:func:`contract_string_problem`). Emptiness is the caller's to judge.

    Raises:
        InputFormatError: ``FILE:LINE: ...`` with the reason code.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputFormatError(path, line, INVALID_UTF8, f"invalid UTF-8 at byte {error.start}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputFormatError(
            path, line, INVALID_JSON, f"not valid JSON ({error.msg} at column {error.colno})"
        ) from None
    if not isinstance(obj, dict):
        raise InputFormatError(path, line, NOT_AN_OBJECT, f"expected a JSON object, got {type(obj).__name__}")
    for key in ("id", "documents"):
        if key not in obj:
            raise InputFormatError(path, line, MISSING_KEY, f"missing key {key!r} (keys: {sorted(obj)})")
    documents = obj["documents"]
    if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
        raise InputFormatError(path, line, WRONG_TYPE, "'documents' must be a list of strings")
    if require_references or "summary" in obj or "summaries" in obj:
        check_reference_fields(obj, path, line)
    problem = contract_string_problem(obj)
    if problem is not None:
        raise InputFormatError(path, line, *problem)
    if obj.get("title") is not None and not isinstance(obj["title"], str):
        raise InputFormatError(path, line, WRONG_TYPE, "'title' must be a string")
    return obj


def iter_raw_lines(path: str) -> Iterator[Tuple[int, bytes]]:
    """``(line number, raw bytes)`` of every non-blank line of a JSONL file
    (a UTF-8 byte-order mark before the first line is not part of it)."""
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if line_number == 1:
                raw = strip_utf8_bom(raw)
            if raw.strip():
                yield line_number, raw
