"""``mdsfair-train`` and ``mdsfair-generate``: fairseq's own commands with
mdsfair as user dir.

fairseq's ``--user-dir`` takes a path and cannot find an installed package by
name, so these wrappers pass the installed ``mdsfair`` package's directory
(unless the command line already has a ``--user-dir``) and run
``fairseq_cli.train.cli_main`` / ``fairseq_cli.generate.cli_main`` with every
other argument unchanged.
"""
import os
import sys
from typing import Callable, List, Optional

import mdsfair

USER_DIR = os.path.dirname(os.path.abspath(__file__))


def with_user_dir(argv: List[str]) -> List[str]:
    """``argv`` with ``--user-dir <mdsfair>`` in front unless it has one."""
    if any(arg == "--user-dir" or arg.startswith("--user-dir=") for arg in argv):
        return list(argv)
    return ["--user-dir", USER_DIR] + list(argv)


def _run(cli_main: Callable[[], None], prog: str, argv: Optional[List[str]]) -> None:
    """Run a fairseq ``cli_main`` (which reads ``sys.argv``) on ``argv``."""
    argv = sys.argv[1:] if argv is None else argv
    # mdsfair is imported already (this module is part of it), so fairseq's
    # --user-dir will not import it again: register explicitly.
    mdsfair.register()
    saved_argv = sys.argv
    sys.argv = [prog] + with_user_dir(argv)
    try:
        cli_main()
    finally:
        sys.argv = saved_argv


def check_train_arguments(argv: List[str]) -> None:
    """``--bf16`` is fairseq's TPU mode: refused at once without torch_xla."""
    import importlib.util

    if any(arg in ("--bf16", "--memory-efficient-bf16") for arg in argv) and importlib.util.find_spec("torch_xla") is None:
        from mdsfair.tasks.multidoc_summarization import BF16_NEEDS_TPU

        sys.stderr.write(f"mdsfair-train: error: {BF16_NEEDS_TPU}\n")
        raise SystemExit(2)


def train_main(argv: Optional[List[str]] = None) -> None:
    """``mdsfair-train``: ``fairseq-train`` with ``--user-dir`` set to mdsfair;
    ``--bf16`` without a TPU stack is refused before fairseq starts."""
    check_train_arguments(sys.argv[1:] if argv is None else argv)
    from fairseq_cli.train import cli_main

    _run(cli_main, "mdsfair-train", argv)


def check_generation_arguments(argv: List[str]) -> None:
    """Beam-search flags that cannot work, refused before fairseq loads a
    model (defaults: fairseq's GenerationConfig)."""
    import argparse

    from mdsfair.generation.sequence_generator import GenerationSettingsError, check_generation_settings

    parser = argparse.ArgumentParser(prog="mdsfair-generate", add_help=False)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--min-len", type=int, default=1)
    parser.add_argument("--max-len-a", type=float, default=0)
    parser.add_argument("--max-len-b", type=int, default=200)
    known, _ = parser.parse_known_args(argv)
    try:
        check_generation_settings(known.beam, known.min_len, known.max_len_a, known.max_len_b)
    except GenerationSettingsError as error:
        parser.exit(2, f"mdsfair-generate: error: {error}\n")


def generate_main(argv: Optional[List[str]] = None) -> None:
    """``mdsfair-generate``: ``fairseq-generate`` with ``--user-dir`` set to
    mdsfair; impossible beam-search flags are refused before any model loads."""
    check_generation_arguments(sys.argv[1:] if argv is None else argv)
    from fairseq_cli.generate import cli_main

    _run(cli_main, "mdsfair-generate", argv)
