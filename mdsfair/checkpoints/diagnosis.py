"""Why a checkpoint file cannot be read, named with the file and its likely
cause instead of a bare ``EOFError`` / ``invalid load key``: an empty file
(an interrupted save, copy or download), a Git LFS pointer (a clone without
its LFS content), a missing file, a truncated file, bytes that are no torch
checkpoint. The name of the cause is read from torch's and pickle's error:
which exception it is, its message, and whether it was raised inside
``torch/serialization.py`` or ``pickle.py`` (its traceback's file names).
"""

import os
import pickle
import traceback
import zipfile

LFS_POINTER_PREFIX = b"version https://git-lfs"


class CheckpointFileError(RuntimeError):
    """A checkpoint file that cannot be read (empty, LFS pointer, truncated)."""


def check_checkpoint_file(path: str) -> None:
    """Fail early, naming ``path``, for an empty file or a Git LFS pointer."""
    if not os.path.isfile(path):
        return
    size = os.path.getsize(path)
    if size == 0:
        raise CheckpointFileError(
            f"checkpoint {path} is empty (0 bytes): an interrupted save, copy or download; "
            "use another checkpoint or copy it again"
        )
    with open(path, "rb") as handle:
        head = handle.read(len(LFS_POINTER_PREFIX))
    if head == LFS_POINTER_PREFIX:
        raise CheckpointFileError(
            f"checkpoint {path} is a Git LFS pointer ({size} bytes), not the checkpoint: the repository was "
            "cloned without its LFS content; run `git lfs pull` (or download the file itself)"
        )


def raised_by_torch_load(error: BaseException) -> bool:
    """Whether ``error`` came from reading the file (raised in
    ``torch/serialization.py`` or ``pickle.py``, or an unpickling, zip or
    end-of-file error) rather than from the code around the load."""
    frames = traceback.extract_tb(error.__traceback__)
    return any(
        frame.filename.endswith(os.path.join("torch", "serialization.py")) or frame.filename.endswith("pickle.py")
        for frame in frames
    ) or isinstance(error, (EOFError, pickle.UnpicklingError, zipfile.BadZipFile))


def describe_unreadable(path: str, error: BaseException) -> str:
    """Why torch could not read ``path``, with the likely cause (one line)."""
    # the file cannot be opened (no such file, a directory, no permission); an OSError raised while reading
    # the bytes (a truncated zip: "invalid argument") is the file's content, diagnosed below
    if isinstance(error, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)):
        return f"cannot read checkpoint {path}: {(error.strerror or str(error)).lower()}"
    size = os.path.getsize(path) if os.path.isfile(path) else None
    text = f"{type(error).__name__}: {' '.join(str(error).split())}"  # one line
    lowered = str(error).lower()
    truncated_signs = ("ran out of input", "central directory", "eof")
    if isinstance(error, EOFError) or any(sign in lowered for sign in truncated_signs):
        cause = "the file is truncated (an interrupted save, copy or download)"
    elif isinstance(error, pickle.UnpicklingError) and (
        "invalid load key" in lowered or "unsupported operand" in lowered
    ):
        # "unsupported operand": what torch's weights_only unpickler says of bytes that are no pickle
        with open(path, "rb") as handle:
            head = handle.read(24)
        cause = f"the file is not a torch checkpoint (it starts with {head!r})"
    else:
        cause = "the file is damaged or not a torch checkpoint"
    return f"cannot read checkpoint {path} ({size} bytes): {text}; {cause}"
