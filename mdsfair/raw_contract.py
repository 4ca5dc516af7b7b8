"""What every reader of the raw contract shares: error locations, the UTF-8
byte-order mark and the references of a cluster.

The raw contract (DESIGN.md): one cluster per JSON line, ``{"id": str,
"documents": [str, ...], "summary": str}``, optional ``"title"`` and optional
``"summaries": [str, ...]`` when a data set has several references
(``mdsfair-convert`` writes ``summary`` = ``summaries[0]``; FewSum's
``jsonl_multiref`` has ``summaries`` only). Three commands read it:
``mdsfair-preprocess`` (:mod:`mdsfair.preprocess.structure`),
``mdsfair-convert``'s JSON readers (:mod:`mdsfair.preprocess.converters.common`)
and ``mdsfair-baseline`` (:mod:`mdsfair.evaluation.baselines`). They locate bad
input the same way (:func:`format_location`: ``FILE:LINE``), all accept a
UTF-8 byte-order mark before the first line (:func:`strip_utf8_bom`), and all
take a cluster's references by the same rule (:func:`cluster_references`).

Pure Python: importing this module loads neither torch nor fairseq.
"""
from typing import Any, Iterator, List, Mapping, Optional, Tuple, Union

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
        return data[len(UTF8_BOM):] if data.startswith(UTF8_BOM) else data
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
    of an id that is empty or holds a line break or tab; None when fine."""
    for field, text in contract_strings(record):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            return "lone_surrogate", (
                f"{field} holds a lone surrogate {text[error.start]!r} at character {error.start} "
                "(half of a UTF-16 pair, not a character; fix the JSON escape)"
            )
    if "id" in record:
        cluster_id = str(record["id"])
        if not cluster_id.strip():
            return "bad_id", f"id {cluster_id!r} is empty (every cluster needs an id to match its summary)"
        breaking = [c for c in cluster_id if c in ID_BREAKING_CHARACTERS]
        if breaking:
            return "bad_id", (
                f"id {cluster_id!r} holds {breaking[0]!r}, which would break the line count of ids.txt "
                "(ids may not contain tabs or line breaks)"
            )
    return None
