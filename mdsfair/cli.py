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

USER_DIR = os.path.dirname(os.path.abspath(__file__))


def with_user_dir(argv: List[str]) -> List[str]:
    """``argv`` with ``--user-dir <mdsfair>`` in front unless it has one."""
    if any(arg == "--user-dir" or arg.startswith("--user-dir=") for arg in argv):
        return list(argv)
    return ["--user-dir", USER_DIR] + list(argv)


def _run(cli_main: Callable[[], None], prog: str, argv: Optional[List[str]]) -> None:
    """Run a fairseq ``cli_main`` (which reads ``sys.argv``) on ``argv``."""
    argv = sys.argv[1:] if argv is None else argv
    saved_argv = sys.argv
    sys.argv = [prog] + with_user_dir(argv)
    try:
        cli_main()
    finally:
        sys.argv = saved_argv


def check_train_arguments(argv: List[str]) -> None:
    """Refused at once, before fairseq starts: ``--bf16`` (fairseq's TPU
    mode) without torch_xla, and ``--ddp-backend fully_sharded``."""
    import importlib.util

    if any(arg in ("--bf16", "--memory-efficient-bf16") for arg in argv) and importlib.util.find_spec("torch_xla") is None:
        from mdsfair.tasks.training_setup import BF16_NEEDS_TPU

        sys.stderr.write(f"mdsfair-train: error: {BF16_NEEDS_TPU}\n")
        raise SystemExit(2)
    world = _flag_value(argv, "--distributed-world-size")
    if "--cpu" in argv and world is not None and int(world) > 1 and "--distributed-no-spawn" not in argv:
        sys.stderr.write(
            f"mdsfair-train: error: --cpu with --distributed-world-size {world}: fairseq starts one worker per "
            "CUDA device (none on CPU), so nothing would train; launch the workers with torchrun instead: "
            f"torchrun --nproc-per-node {world} $(which mdsfair-train) ... --cpu (README, 'Training past one "
            "machine')\n"
        )
        raise SystemExit(2)
    if any(arg in ("fully_sharded", "--ddp-backend=fully_sharded") for arg in argv):
        from mdsfair.tasks.training_setup import FULLY_SHARDED_REFUSED

        sys.stderr.write(f"mdsfair-train: error: {FULLY_SHARDED_REFUSED}\n")
        raise SystemExit(2)


def _flag_value(argv: List[str], flag: str) -> Optional[str]:
    """The value of the last ``flag VALUE`` / ``flag=VALUE`` in ``argv``."""
    value = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def has_flag(argv: List[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def with_torchrun_settings(argv: List[str], environ=os.environ) -> List[str]:
    """``argv`` with the distributed flags a ``torchrun`` launch implies
    (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` in the environment), each added
    only where the command line has none:

    ``--distributed-world-size WORLD_SIZE --distributed-rank RANK --device-id
    LOCAL_RANK --distributed-no-spawn --distributed-init-method env://``; with
    ``--cpu`` also ``--distributed-backend gloo --ddp-backend legacy_ddp``.

    fairseq infers these itself only when its default world size (the GPUs
    of this machine) is above 1: with one GPU (or none) per node it would
    train every node alone, and its CPU launch spawns ``cuda.device_count()``
    = 0 workers. Without torchrun's variables ``argv`` is returned as is."""
    if not all(name in environ for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK")):
        return list(argv)
    implied = [
        ("--distributed-world-size", environ["WORLD_SIZE"]),
        ("--distributed-rank", environ["RANK"]),
        ("--device-id", environ["LOCAL_RANK"]),
        ("--distributed-no-spawn", None),
        ("--distributed-init-method", "env://"),
    ]
    if "--cpu" in argv:
        implied += [("--distributed-backend", "gloo"), ("--ddp-backend", "legacy_ddp")]
    argv = list(argv)
    for flag, value in implied:
        if not has_flag(argv, flag):
            argv += [flag] if value is None else [flag, value]
    return argv


def train_main(argv: Optional[List[str]] = None) -> None:
    """``mdsfair-train``: ``fairseq-train`` with ``--user-dir`` set to mdsfair;
    ``--bf16`` without a TPU stack is refused before fairseq starts; under
    ``torchrun`` the distributed flags it implies are filled in
    (:func:`with_torchrun_settings`)."""
    argv = with_torchrun_settings(sys.argv[1:] if argv is None else argv)
    check_train_arguments(argv)
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
