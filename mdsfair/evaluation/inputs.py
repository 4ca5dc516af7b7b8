"""Reading ROUGE's text inputs: the error type and the line reader shared by
:mod:`mdsfair.evaluation.references` and :mod:`mdsfair.evaluation.hypotheses`
(the bottom of the evaluation package: it imports nothing of mdsfair).

Pure Python (no torch / fairseq import), for ``mdsfair-rouge``.

A line ends at LF, or CRLF (the CR is dropped), and nowhere else: a lone CR
inside a line is read as a space, as ``mdsfair-preprocess`` cleans the
references it stores (every white-space character a space), and counted in
one warning naming the first ``FILE:LINE``. (Python's universal newlines
would end a line there, adding a hypothesis and shifting every later one.)
"""

import logging
from typing import List

# Log records keep the name mdsfair-rouge's users filter on.
logger = logging.getLogger("mdsfair.evaluation.rouge")


class RougeInputError(ValueError):
    """Inputs that cannot be scored (missing/mismatched lines, empty files)."""


def read_text(path: str) -> str:
    """The content of a UTF-8 file, line endings untouched; a byte sequence
    that is not UTF-8 is refused as ``FILE:LINE: invalid UTF-8 ...``."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line = data.count(b"\n", 0, error.start) + 1
        bad = data[error.start : error.end].hex(" ")
        raise RougeInputError(
            f"{path}:{line}: invalid UTF-8 (byte{'s' if error.end - error.start > 1 else ''} {bad} at byte "
            f"{error.start - line_start + 1} of the line: {error.reason}); save the file as UTF-8"
        ) from None


def read_lines(path: str) -> List[str]:
    """Lines of a text file without line terminators (one final newline is
    optional; see the module docstring for CR)."""
    content = read_text(path)
    if not content:
        return []
    if content.endswith("\n"):
        content = content[:-1]
    lines = [line[:-1] if line.endswith("\r") else line for line in content.split("\n")]
    carriage_returns = [index for index, line in enumerate(lines) if "\r" in line]
    if carriage_returns:
        logger.warning(
            "%s:%d: a carriage return (CR) inside the line is read as a space (%d of the file's lines hold "
            "one); lines end at LF or CRLF only",
            path,
            carriage_returns[0] + 1,
            len(carriage_returns),
        )
        for index in carriage_returns:
            lines[index] = lines[index].replace("\r", " ")
    return lines
