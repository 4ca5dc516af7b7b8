"""argparse ``type`` functions that range-check a flag's value, shared by
every mdsfair command (no torch): a bad value is the parser's one-line
``PROG: error: argument --flag: ...`` and exit status 2, never a traceback
later and never a silently empty or wrong output."""

import argparse


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
