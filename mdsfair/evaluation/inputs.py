"""Reading ROUGE's text inputs: the error type and the line reader shared by
:mod:`mdsfair.evaluation.references` and :mod:`mdsfair.evaluation.hypotheses`
(the bottom of the evaluation package: it imports nothing of mdsfair).

Pure Python (no torch / fairseq import), for ``mdsfair-rouge``.
"""
from typing import List


class RougeInputError(ValueError):
    """Inputs that cannot be scored (missing/mismatched lines, empty files)."""


def read_lines(path: str) -> List[str]:
    """Lines of a text file without line terminators (one final newline is optional)."""
    try:
        with open(path, encoding="utf-8") as handle:
            content = handle.read()
    except UnicodeDecodeError as error:
        raise RougeInputError(f"{path} is not valid UTF-8 ({error})") from error
    if not content:
        return []
    if content.endswith("\n"):
        content = content[:-1]
    return [line.rstrip("\r") for line in content.split("\n")]
