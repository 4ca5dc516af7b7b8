"""argparse ``type`` functions that range-check a flag's value, shared by
every mdsfair command (no torch): a bad value is the parser's one-line
``PROG: error: argument --flag: ...`` and exit status 2, never a traceback
later and never a silently empty or wrong output. The output flags of every
command are checked here too, before any work: each output is written whole
after the work (through :func:`mdsfair.data.manifest.atomic_text_file`), so
a path that cannot be written would otherwise be found only at the end."""

import argparse
import os
from typing import Iterable, Optional, Sequence, Tuple


def at_least(minimum: int):
    """An integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def number_between(low: float, high: float, low_inclusive: bool = True, high_inclusive: bool = True):
    """A number in the interval from ``low`` to ``high`` (ends as given)."""
    interval = f"{'[' if low_inclusive else '('}{low:g}, {high:g}{']' if high_inclusive else ')'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        above = value >= low if low_inclusive else value > low
        below = value <= high if high_inclusive else value < high
        if not (above and below):  # NaN fails both
            raise argparse.ArgumentTypeError(f"must lie in {interval}, got {text}")
        return value

    parse.__name__ = f"number in {interval}"
    return parse


def os_error_message(error: OSError) -> str:
    """One line for an ``OSError`` a user's paths cause (a read-only file
    system, no permission, a full disk, a file where a folder is wanted):
    the path(s) and the system's reason, without the ``[Errno N]`` prefix."""
    reason = error.strerror or str(error) or type(error).__name__
    paths = [p for p in (error.filename, getattr(error, "filename2", None)) if p is not None]
    if not paths:
        return reason
    return f"{' -> '.join(str(p) for p in paths)}: {reason}"


class UsageError(ValueError):
    """Flags, a checkpoint and a data-bin that cannot work together (a
    ``--global-attention doc-sep`` model on a data-bin without PRIMERA's
    layout, say): the message says what to change; ``mdsfair-train`` and
    ``mdsfair-generate`` print it as one ``PROG: error:`` line."""


def check_config_sizes(cfg, names) -> None:
    """Refuse a size or limit below 1 among the fields ``names`` of a
    dataclass config (a fairseq task's: fairseq reads them with ``type=int``
    and no range), naming the flag; None (not given) passes."""
    for name in names:
        value = getattr(cfg, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


def check_choice(what: str, value, choices) -> None:
    """Refuse a ``value`` outside ``choices`` where code, not the parser,
    hands a module a flag's value: ``ValueError`` ``"WHAT must be one of
    CHOICES, got VALUE"``."""
    if value not in choices:
        raise ValueError(f"{what} must be one of {choices}, got {value!r}")


def os_errors_in_one_line(prog: str):
    """Decorate a command's ``cli_main``: an ``OSError`` it lets through (an
    input that is not there, an output folder it may not write, a read-only
    file system) is one ``PROG: error: PATH: reason`` line and exit status 1,
    not a traceback."""
    import functools
    import sys

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except OSError as error:
                print(f"{prog}: error: {os_error_message(error) if error.filename else error}", file=sys.stderr)
                return 1

        return wrapper

    return decorate


def _same_file(first: str, second: str) -> bool:
    if os.path.exists(first) and os.path.exists(second):
        return os.path.samefile(first, second)
    return os.path.realpath(first) == os.path.realpath(second)


def output_folder_problem(flag: str, path: str) -> Optional[str]:
    """Why the folder ``path`` (the value of ``flag``; the command creates it
    and its missing parents) cannot be written, as one line ``FLAG PATH:
    reason``; ``None`` when it can: it is a file, or the nearest folder that
    exists on its way is not a folder or not writable."""
    if path == "":
        return f"{flag}: the folder name is empty"
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{flag} {path}: is a file, not a folder"
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{flag} {path}: {existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{flag} {path}: the folder {existing} is not writable"
    return None


def output_path_problem(
    flag: str, path: str, inputs: Iterable[str] = (), creates_folder: bool = False
) -> Optional[str]:
    """Why the file ``path`` (the value of ``flag``) cannot be written, as one
    line ``FLAG PATH: reason``; ``None`` when it can: it is a folder or names
    one, its folder is missing (unless the command creates it,
    ``creates_folder``) or not writable, the file exists and is read-only,
    or it is one of ``inputs``, the files the command reads."""
    if path == "":
        return f"{flag}: the file name is empty"
    if os.path.isdir(path):
        return f"{flag} {path}: is a folder; give a file name (for example {os.path.join(path, 'out')})"
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        return f"{flag} {path}: names a folder (it ends in {path[-1]!r}); give a file name"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        if creates_folder:
            return output_folder_problem(flag, folder)
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


def check_output_paths(
    outputs: Sequence[Tuple[str, Optional[str]]], inputs: Iterable[str] = (), creating_folders: Iterable[str] = ()
) -> Optional[str]:
    """The first problem of :func:`output_path_problem` among ``outputs``
    (``(flag, path)`` pairs; a ``None`` path is not asked for; the flags in
    ``creating_folders`` are those whose missing folder the command
    creates), or two flags naming the same file; ``None`` when every output
    can be written. A command checks its outputs with it before reading any
    input, since each output is written whole after the work."""
    inputs = [source for source in inputs if source]
    given = [(flag, path) for flag, path in outputs if path is not None]
    for flag, path in given:
        problem = output_path_problem(flag, path, inputs, creates_folder=flag in creating_folders)
        if problem is not None:
            return problem
    for index, (flag, path) in enumerate(given):
        for other_flag, other_path in given[index + 1 :]:
            if _same_file(path, other_path):
                return f"{flag} and {other_flag} both name {path}: each output needs a file of its own"
    return None
