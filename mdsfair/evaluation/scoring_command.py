"""What the commands ``mdsfair-rouge`` and ``mdsfair-compare`` share: the flags
that say where the references come from and which convention scores, the
start of the command (``--list-conventions``, logging), the check of a
convention against ``--fast``, the errors that end the command with one line,
and the ``--json`` output.

Pure Python (no torch / fairseq import).
"""

import argparse
import logging
import sys
from typing import Dict, Optional, Sequence

from mdsfair.argument_types import at_least
from mdsfair.data.manifest import ManifestError, write_json_atomic
from mdsfair.evaluation.conventions import CONVENTIONS, get_convention
from mdsfair.evaluation.inputs import RougeInputError
from mdsfair.evaluation.local_models import ModelMetricError
from mdsfair.evaluation.rouge155 import RougeDependencyError

#: Errors of reading and scoring that end a scoring command with one line (``parser.error``).
SCORING_ERRORS = (RougeInputError, RougeDependencyError, ModelMetricError, ManifestError, OSError)


def add_reference_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data-bin``, ``--split``, ``--expected``, ``--ignore-log-data-bin``, ``--target-lines``."""
    parser.add_argument(
        "--data-bin",
        metavar="DIR",
        help="the data-bin the hypotheses were generated from: without REF files its stored references "
        "({split}.summary.txt, full length) are scored against, and its manifest says how many clusters "
        "the hypotheses must cover (for a fairseq-generate log whose captured logging names it, found "
        "automatically)",
    )
    parser.add_argument(
        "--split", metavar="NAME", help="split of --data-bin (default: the one the log names, else test)"
    )
    parser.add_argument(
        "--expected",
        type=at_least(1),
        metavar="N",
        help="number of clusters the hypotheses must cover (ids 0..N-1 of a fairseq-generate log); "
        "default: the data-bin split's cluster count, else the REF files' line count",
    )
    parser.add_argument(
        "--ignore-log-data-bin",
        action="store_true",
        help="score against --data-bin / --split even when the fairseq-generate log names another data-bin or "
        "split (by default that is refused: the references would be another data set's)",
    )
    parser.add_argument(
        "--target-lines",
        action="store_true",
        help="score a fairseq-generate log against its T- lines (the targets as the task served them, cut "
        "at the model's target limit) instead of the data-bin's full references",
    )


def reference_source(args: argparse.Namespace) -> Dict:
    """The keywords of :func:`mdsfair.evaluation.file_scoring.load_scoring_inputs`
    that the flags of :func:`add_reference_source_arguments` set."""
    return {
        "data_bin": args.data_bin,
        "split": args.split,
        "expected": args.expected,
        "target_lines": args.target_lines,
        "ignore_log_data_bin": args.ignore_log_data_bin,
    }


def add_convention_argument(parser: argparse.ArgumentParser) -> None:
    """``--convention NAME`` and ``--list-conventions``."""
    parser.add_argument(
        "--convention",
        metavar="NAME",
        help="score as a paper did: hiersumm, hierencdec, led-hierencdec, pagesum, sparse, ma2022, primera "
        "(scorer, options, stemming, sentence splitting, case, aggregate; each cites the authors' code), or "
        "mdsfair's own mdsfair / mdsfair-fast (default: mdsfair, or mdsfair-fast with --fast); "
        "--list-conventions prints every setting",
    )
    parser.add_argument(
        "--list-conventions", action="store_true", help="print every convention's settings and sources, then exit"
    )


def list_conventions() -> str:
    """Every preset's :meth:`Convention.describe`, one paragraph each."""
    return "\n\n".join(convention.describe() for convention in CONVENTIONS.values())


def parse_scoring_arguments(
    parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]
) -> Optional[argparse.Namespace]:
    """The command's arguments; ``None`` after printing :func:`list_conventions`
    for ``--list-conventions`` (the command then exits 0). Logs go to stderr
    as ``LEVEL: message`` unless the caller has set up logging."""
    args = parser.parse_args(argv)
    if args.list_conventions:
        print(list_conventions())
        return None
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    return args


def check_convention_choice(convention: str, fast: bool) -> None:
    """Refuse an unknown ``--convention`` and ``--fast`` with a convention
    other than ``mdsfair-fast`` (``--fast`` is that convention)."""
    get_convention(convention)
    if fast and convention != "mdsfair-fast":
        raise RougeInputError(
            f"--fast is the mdsfair-fast convention; it cannot be combined with --convention {convention}"
        )


def write_json_output(parser: argparse.ArgumentParser, path: str, data, trailing_newline: bool = False) -> None:
    """Write ``--json PATH`` whole (indented by 2); an error that stops it ends
    the command with one line naming the flag and the path."""
    try:
        write_json_atomic(path, data, trailing_newline=trailing_newline, indent=2)
    except OSError as error:
        parser.error(f"--json {path}: {error.strerror or error}")
