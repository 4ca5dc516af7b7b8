"""``mdsfair-train`` and ``mdsfair-generate``: fairseq's own commands with
mdsfair as user dir.

fairseq's ``--user-dir`` takes a path and cannot find an installed package by
name, so these wrappers pass the installed ``mdsfair`` package's directory
(unless the command line already has a ``--user-dir``) and run
``fairseq_cli.train.cli_main`` / ``fairseq_cli.generate.cli_main`` with every
other argument unchanged.

Ctrl-C prints one line, not a traceback, and exits with status 130:
``mdsfair-generate --results-path`` then leaves no partial
``generate-SUBSET.txt`` (it is written whole or not at all, see
:func:`mdsfair.fairseq_patches.results_written_whole`), and ``mdsfair-train`` leaves only complete
checkpoints (:func:`mdsfair.fairseq_patches.patch_atomic_checkpoint_writes`).
Both run without printing the notices of :data:`THIRD_PARTY_NOTICES`, which
fairseq 0.12.3's code raises on every run and no flag avoids.

``-h`` / ``--help`` print mdsfair's short help without importing torch or fairseq
(:mod:`mdsfair.cli_help`: the tasks, architectures and criterions, and the options of the
chosen ones); ``--help-all`` prints the fairseq command's own help.
"""

import contextlib
import os
import sys
import warnings
from typing import Callable, Iterator, List, Optional

import mdsfair
from mdsfair.argument_types import os_error_message, output_folder_problem
from mdsfair.cli_help import asks_short_help, print_short_help, with_full_help

USER_DIR = os.path.dirname(os.path.abspath(__file__))


def with_user_dir(argv: List[str]) -> List[str]:
    """``argv`` with ``--user-dir <mdsfair>`` in front unless it has one."""
    if any(arg == "--user-dir" or arg.startswith("--user-dir=") for arg in argv):
        return list(argv)
    return ["--user-dir", USER_DIR] + list(argv)


#: Notices that fairseq 0.12.3 and its dependencies raise on every run of ``fairseq-train`` /
#: ``fairseq-generate`` and that a user can do nothing about (fairseq is pinned):
#: ``(message regex, category, module regex, why)``. :func:`third_party_notices_ignored`
#: ignores exactly these for the command's own run; importing mdsfair changes no warning filter.
THIRD_PARTY_NOTICES = (
    (
        r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental",
        UserWarning,
        r"hydra",
        "fairseq's config initialization (fairseq/dataclass/initialize.py) uses hydra's old experimental API",
    ),
    (
        r"\s*The version_base parameter is not specified",
        UserWarning,
        r"hydra",
        "fairseq initializes hydra without version_base",
    ),
    (
        r"In '.*'. Usage of deprecated keyword in package header '# @package _group_'",
        UserWarning,
        r"hydra",
        "fairseq's config files use hydra 1.0's package header",
    ),
    (
        r"\s*'.*' is validated against ConfigStore schema with the same name",
        UserWarning,
        r"hydra|mdsfair\.cli",
        "fairseq's config schema (attributed by hydra's stacklevel to the frame that ran fairseq: this module)",
    ),
    (
        r"\s*The strict flag in the compose API is deprecated",
        UserWarning,
        r"hydra",
        "fairseq composes its config with strict=...",
    ),
    (
        r"`torch\.cuda\.amp\.(autocast|GradScaler)\(args\.\.\.\)` is deprecated",
        FutureWarning,
        r"fairseq",
        "fairseq's train_step and trainer call torch.cuda.amp's deprecated spelling",
    ),
    (
        r"'pin_memory' argument is set as true but no accelerator is found",
        UserWarning,
        r"torch",
        "fairseq's iterators always ask the DataLoader for pinned memory, which a CPU run cannot use",
    ),
    (
        r"Support for mismatched key_padding_mask and attn_mask is deprecated",
        UserWarning,
        r"torch",
        "fairseq's MultiheadAttention hands torch a float attn_mask (the future mask) with a bool padding mask",
    ),
)


@contextlib.contextmanager
def third_party_notices_ignored() -> Iterator[None]:
    """Within the block, ignore the warnings of :data:`THIRD_PARTY_NOTICES`
    (each by message, category and module); the warning filters are restored
    on exit. Used by the command entry points only, around their own run."""
    with warnings.catch_warnings():
        for message, category, module, _why in THIRD_PARTY_NOTICES:
            warnings.filterwarnings("ignore", message=message, category=category, module=module)
        yield


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


def refused(prog: str, message: str, status: int) -> None:
    """A refusal whose message says what to do: one ``PROG: error:`` line on
    stderr instead of a traceback, then exit ``status``."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    raise SystemExit(status)


def interrupted(prog: str, what: str) -> None:
    """Ctrl-C: one line on stderr instead of a traceback, exit status 130
    (128 + SIGINT, as a shell reports it)."""
    sys.stderr.write(f"{prog}: interrupted; {what}\n")
    sys.stderr.flush()
    raise SystemExit(130)


def asks_bf16(argv: List[str]) -> bool:
    return any(arg in ("--bf16", "--memory-efficient-bf16") for arg in argv)


def bf16_on_cuda(argv: List[str], cuda_available: Optional[bool] = None) -> bool:
    """Whether ``--bf16`` (or ``--memory-efficient-bf16``) trains on a GPU:
    a CUDA device is visible and the command line has neither ``--cpu`` nor
    ``--tpu``. fairseq's ``options.py`` turns ``--bf16`` into ``--tpu``
    unconditionally; on a GPU :func:`mdsfair.fairseq_patches.bf16_kept_on_cuda`
    undoes that for the one command, and
    fairseq's trainer then trains in bfloat16 on the GPU (model and batches
    cast to bfloat16, its ``FP16Optimizer`` keeps float32 master weights and
    uses no loss scaler for bfloat16)."""
    if not asks_bf16(argv) or "--cpu" in argv or "--tpu" in argv:
        return False
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    return bool(cuda_available)


def fp16_on_cpu(argv: List[str], cuda_available: Optional[bool] = None) -> bool:
    """Whether a command trains on the CPU: ``--cpu``, or no CUDA device."""
    if "--cpu" in argv:
        return True
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    return not cuda_available


def check_train_arguments(argv: List[str]) -> None:
    """Refused at once, before fairseq starts: ``--bf16`` (fairseq's TPU
    mode) without torch_xla and without a GPU to train on in bfloat16
    (:func:`bf16_on_cuda`), ``--fp16`` on a CPU (fairseq's ``FP16Optimizer``
    needs CUDA; docs/precision.md), and ``--ddp-backend fully_sharded``."""
    import importlib.util

    if asks_bf16(argv) and importlib.util.find_spec("torch_xla") is None and not bf16_on_cuda(argv):
        from mdsfair.tasks.training_setup import BF16_NEEDS_TPU

        refused("mdsfair-train", BF16_NEEDS_TPU, 2)
    if "--fp16" in argv and "--memory-efficient-fp16" not in argv and fp16_on_cpu(argv):
        from mdsfair.tasks.training_setup import FP16_NEEDS_CUDA

        refused("mdsfair-train", FP16_NEEDS_CUDA, 2)
    world = _flag_value(argv, "--distributed-world-size")
    if "--cpu" in argv and world is not None and int(world) > 1 and "--distributed-no-spawn" not in argv:
        refused(
            "mdsfair-train",
            f"--cpu with --distributed-world-size {world}: fairseq starts one worker per "
            "CUDA device (none on CPU), so nothing would train; launch the workers with torchrun instead: "
            f"torchrun --nproc-per-node {world} $(which mdsfair-train) ... --cpu (docs/scaling.md)",
            2,
        )
    if any(arg in ("fully_sharded", "--ddp-backend=fully_sharded") for arg in argv):
        from mdsfair.tasks.training_setup import FULLY_SHARDED_REFUSED

        refused("mdsfair-train", FULLY_SHARDED_REFUSED, 2)


def _flag_value(argv: List[str], flag: str) -> Optional[str]:
    """The value of the last ``flag VALUE`` / ``flag=VALUE`` in ``argv``."""
    value = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def check_output_folder(prog: str, argv: List[str], flag: str) -> None:
    """Refuse, before fairseq starts, a folder flag (``--save-dir``,
    ``--results-path``) that names a file or lies under one, or whose
    nearest existing folder is not writable: one ``error:`` line, exit 2."""
    path = _flag_value(argv, flag)
    problem = None if path is None else output_folder_problem(flag, path)
    if problem is not None:
        refused(prog, f"{problem} ({flag} names a folder that the command creates if needed)", 2)


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


def checkpoint_refusals() -> tuple:
    """The errors with which mdsfair refuses a checkpoint (``mdsfair/checkpoints/``,
    ``mdsfair/checkpoint_loading.py``): each message names the file and what to do,
    so ``mdsfair-train`` and ``mdsfair-generate`` print it as one ``error:`` line."""
    from mdsfair.checkpoint_loading import UntrustedCheckpointError
    from mdsfair.checkpoints.architecture_change import ArchitectureChangeError
    from mdsfair.checkpoints.checksums import CheckpointIntegrityError
    from mdsfair.checkpoints.diagnosis import CheckpointFileError
    from mdsfair.checkpoints.fingerprints import DictionaryMismatchError

    return (
        CheckpointFileError,
        CheckpointIntegrityError,
        UntrustedCheckpointError,
        ArchitectureChangeError,
        DictionaryMismatchError,
    )


def usage_refusals() -> tuple:
    """The errors with which mdsfair refuses flags, a data-bin or their
    combination (:class:`mdsfair.argument_types.UsageError`, a damaged or
    unlisted manifest entry): each message names the flag or file and what
    to do, so ``mdsfair-train`` and ``mdsfair-generate`` print it as one
    ``error:`` line."""
    from mdsfair.argument_types import UsageError
    from mdsfair.data.manifest import ManifestError, UnlistedSplitError

    return (UsageError, ManifestError, UnlistedSplitError)


def train_main(argv: Optional[List[str]] = None) -> None:
    """``mdsfair-train``: ``fairseq-train`` with ``--user-dir`` set to mdsfair;
    ``--bf16`` without a TPU stack is refused before fairseq starts; under
    ``torchrun`` the distributed flags it implies are filled in
    (:func:`with_torchrun_settings`); a checkpoint that cannot be resumed
    (empty, cut, corrupted, needing pickle, another architecture or dictionary) is one
    ``error:`` line and exit 1; Ctrl-C prints one line and exits 130. ``-h`` prints
    mdsfair's short help, ``--help-all`` fairseq-train's (:mod:`mdsfair.cli_help`)."""
    argv = sys.argv[1:] if argv is None else argv
    if asks_short_help(argv):
        print_short_help("mdsfair-train", argv)
        return
    argv = with_torchrun_settings(with_full_help(argv))
    check_train_arguments(argv)
    check_output_folder("mdsfair-train", argv, "--save-dir")
    from fairseq_cli.train import cli_main

    from mdsfair.fairseq_patches import bf16_kept_on_cuda

    precision = bf16_kept_on_cuda() if bf16_on_cuda(argv) else contextlib.nullcontext()
    save_dir = _flag_value(argv, "--save-dir") or "checkpoints"
    save_dir_existed = os.path.isdir(save_dir)
    try:
        with precision, third_party_notices_ignored():
            _run(cli_main, "mdsfair-train", argv)
    except checkpoint_refusals() + usage_refusals() as error:
        # an empty, cut, corrupted or pickle-needing --restore-file / checkpoint_last.pt, a resume with
        # another architecture or dictionary: the message names the file and what to do, no traceback;
        # the empty --save-dir fairseq created before the refusal is removed again (nothing written)
        if not save_dir_existed and os.path.isdir(save_dir) and not os.listdir(save_dir):
            os.rmdir(save_dir)
        refused("mdsfair-train", str(error), 1)
    except OSError as error:  # a data-bin or file that is not there, a save dir it may not write
        if not save_dir_existed and os.path.isdir(save_dir) and not os.listdir(save_dir):
            os.rmdir(save_dir)
        refused("mdsfair-train", os_error_message(error) if error.filename else str(error), 1)
    except KeyboardInterrupt:
        # fairseq saves a checkpoint to FILE.tmp and renames it; mdsfair makes its copies to
        # checkpoint_last.pt / checkpoint_best.pt atomic and removes an interrupted FILE.tmp
        # (mdsfair/fairseq_patches.py: patch_atomic_checkpoint_writes)
        save_dir = _flag_value(argv, "--save-dir") or "checkpoints"
        interrupted("mdsfair-train", f"the checkpoints in {save_dir} are the last complete ones (none is half-written)")


#: The beam-search flags :func:`check_generation_arguments` reads (fields of
#: fairseq's ``GenerationConfig``, which gives their types and defaults).
CHECKED_GENERATION_FIELDS = ("beam", "min_len", "max_len_a", "max_len_b", "sampling", "nbest", "match_source_len")


#: Precision flags fairseq's generation parses but never reads (docs/precision.md).
GENERATION_IGNORES = ("--bf16", "--memory-efficient-bf16", "--amp")
GENERATION_PRECISION_IGNORED = (
    "--bf16, --memory-efficient-bf16 and --amp have no effect on generation (fairseq-generate reads only --fp16; "
    "--bf16 merely sets its TPU flag and --amp is read by its trainer), so the model would decode in float32: "
    "drop the flag, use --fp16 for float16, or the hub's .bfloat16() for bfloat16 (docs/precision.md)"
)


def check_generation_arguments(argv: List[str]) -> None:
    """Beam-search flags that cannot work, refused before fairseq loads a
    model (types and defaults: fairseq's ``GenerationConfig``, read from the
    dataclass itself), word limits no summary can meet, and the precision
    flags generation would ignore (:data:`GENERATION_IGNORES`)."""
    if any(arg in GENERATION_IGNORES for arg in argv):
        refused("mdsfair-generate", GENERATION_PRECISION_IGNORED, 2)
    import argparse
    import dataclasses

    from fairseq.dataclass.configs import GenerationConfig

    from mdsfair.generation.sequence_generator import GenerationSettingsError, check_generation_settings
    from mdsfair.generation.word_limits import check_word_limits

    fields = {field.name: field for field in dataclasses.fields(GenerationConfig)}
    parser = argparse.ArgumentParser(prog="mdsfair-generate", add_help=False)
    for name in CHECKED_GENERATION_FIELDS:
        if fields[name].type is bool:  # a switch
            parser.add_argument("--" + name.replace("_", "-"), action="store_true")
        else:
            parser.add_argument("--" + name.replace("_", "-"), type=fields[name].type, default=fields[name].default)
    for flag in ("--min-len-words", "--max-len-words"):  # the task's word limits (mdsfair.generation.word_limits)
        parser.add_argument(flag, type=int, default=None)
    known, _ = parser.parse_known_args(argv)
    try:
        check_word_limits(known.min_len_words, known.max_len_words)
        check_generation_settings(
            known.beam,
            known.min_len,
            known.max_len_a,
            known.max_len_b,
            sampling=known.sampling,
            nbest=known.nbest,
            match_source_len=known.match_source_len,
        )
    except GenerationSettingsError as error:
        parser.exit(2, f"mdsfair-generate: error: {error}\n")


def generate_main(argv: Optional[List[str]] = None) -> None:
    """``mdsfair-generate``: ``fairseq-generate`` with ``--user-dir`` set to
    mdsfair; impossible beam-search flags are refused before any model loads; a
    checkpoint it refuses (:func:`checkpoint_refusals`: empty, cut, corrupted,
    needing pickle, trained on another dictionary) is one ``error:`` line and
    exit 1. ``-h`` prints mdsfair's short help, ``--help-all`` fairseq-generate's
    (:mod:`mdsfair.cli_help`)."""
    argv = sys.argv[1:] if argv is None else argv
    if asks_short_help(argv):
        print_short_help("mdsfair-generate", argv)
        return
    argv = with_full_help(argv)
    check_generation_arguments(argv)
    check_output_folder("mdsfair-generate", argv, "--results-path")
    from fairseq_cli import generate

    from mdsfair.fairseq_patches import generate_results_written_whole

    try:
        # --results-path written whole or not at all; fairseq's known notices not printed
        with generate_results_written_whole(), third_party_notices_ignored():
            _run(generate.cli_main, "mdsfair-generate", argv)
    except checkpoint_refusals() + usage_refusals() as error:
        # an empty, cut, corrupted or pickle-needing --path, or a data-bin with another dictionary:
        # its message names the file and what to do, no traceback
        refused("mdsfair-generate", str(error), 1)
    except OSError as error:  # a data-bin or checkpoint that is not there, a results path it may not write
        refused("mdsfair-generate", os_error_message(error) if error.filename else str(error), 1)
    except KeyboardInterrupt:
        results = _flag_value(argv, "--results-path")
        if results is None:
            interrupted("mdsfair-generate", "the hypotheses printed so far are incomplete")
        output = os.path.join(results, f"generate-{_flag_value(argv, '--gen-subset') or 'test'}.txt")
        interrupted(
            "mdsfair-generate",
            f"nothing written to {output} (partial output removed; an earlier file is left as it was)",
        )
