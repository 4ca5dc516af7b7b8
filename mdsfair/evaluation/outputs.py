"""The evaluation commands' atomic binary write (a ``--plot`` picture): an
output that cannot be written leaves no part of it and no temporary file. Every
output path is checked before any input is read or scored, by
:func:`mdsfair.argument_types.check_output_paths`.

Pure Python (no torch / fairseq import).
"""

from mdsfair.data.manifest import atomic_replacement


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through
    :func:`mdsfair.data.manifest.atomic_replacement`: on any error ``path``
    keeps what it held."""
    with atomic_replacement(path) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(data)
