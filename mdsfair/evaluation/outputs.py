"""Where the evaluation commands write: one check of every output path, run
before any input is read or scored, and an atomic binary write.

``mdsfair-rouge``, ``mdsfair-compare`` and ``mdsfair-baseline`` name their
outputs with ``-o``, ``--json``, ``--per-cluster`` and ``--plot``. Each is
written whole after the work is done (through
:func:`mdsfair.data.manifest.atomic_text_file`, or :func:`write_bytes_atomic`
for a picture), so an output that cannot be written would otherwise be found
only after all the scoring. :func:`output_path_problem` finds it first: the
path is a folder, its folder is missing or not writable, the file exists and
is read-only, it is also one of the command's inputs, or two flags name it.

Pure Python (no torch / fairseq import).
"""

import os
from typing import Iterable, Optional, Sequence, Tuple

from mdsfair.data.manifest import atomic_replacement


def _same_file(first: str, second: str) -> bool:
    if os.path.exists(first) and os.path.exists(second):
        return os.path.samefile(first, second)
    return os.path.realpath(first) == os.path.realpath(second)


def output_path_problem(flag: str, path: str, inputs: Iterable[str] = ()) -> Optional[str]:
    """Why ``path`` (the value of ``flag``) cannot be written, as one line
    ``FLAG PATH: reason``; ``None`` when it can. ``inputs`` are the files the
    command reads: an output must not replace one of them."""
    if path == "":
        return f"{flag}: the file name is empty"
    if os.path.isdir(path):
        return f"{flag} {path}: is a folder; give a file name (for example {os.path.join(path, 'out')})"
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        return f"{flag} {path}: names a folder (it ends in {path[-1]!r}); give a file name"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if os.path.exists(folder):
            return f"{flag} {path}: {folder} is not a folder"
        return f"{flag} {path}: the folder {folder} does not exist; create it first"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{flag} {path}: the folder {folder} is not writable"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{flag} {path}: the file exists and is not writable"
    for source in inputs:
        if source and _same_file(path, source):
            return f"{flag} {path}: is also an input of this command; writing it would replace what is read"
    return None


def check_output_paths(outputs: Sequence[Tuple[str, Optional[str]]], inputs: Iterable[str] = ()) -> Optional[str]:
    """The first problem of :func:`output_path_problem` among ``outputs``
    (``(flag, path)`` pairs; a ``None`` path is not asked for), or two flags
    naming the same file; ``None`` when every output can be written."""
    inputs = [source for source in inputs if source]
    given = [(flag, path) for flag, path in outputs if path is not None]
    for flag, path in given:
        problem = output_path_problem(flag, path, inputs)
        if problem is not None:
            return problem
    for index, (flag, path) in enumerate(given):
        for other_flag, other_path in given[index + 1 :]:
            if _same_file(path, other_path):
                return f"{flag} and {other_flag} both name {path}: each output needs a file of its own"
    return None


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through
    :func:`mdsfair.data.manifest.atomic_replacement`: on any error ``path``
    keeps what it held."""
    with atomic_replacement(path) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(data)
