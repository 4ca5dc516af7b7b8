"""What every benchmark script shares besides its measurement: the command
line (device, dtype, threads, repeats, ``--json``), the line that names the
device, the results file that records the command, the synthetic
dictionary and task a model is built with, and the model dimensions.

A benchmark builds its parser with :func:`argument_parser` and the
``add_*`` functions, parses it with :func:`parse` (which refuses a repeat
count below one and ``--device cuda`` without a GPU), prints
:func:`device_line`, and collects its rows in the :class:`Rows` of
:func:`result_rows`, which rewrites the results file after every row when
``--json`` is given (a long run interrupted keeps what it measured).
"""

import argparse
import json
import os
import subprocess
import sys
from argparse import Namespace
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from benchmarks import results
from benchmarks.measure import cpu_model

#: Encoder and decoder sizes by name: ``(layers, embed dim, ffn dim, heads)``.
DIMS: Dict[str, Tuple[int, int, int, int]] = {
    "small": (2, 256, 1024, 4),
    "base": (6, 768, 3072, 12),
}

#: ``--dtype``: the parameter and activation dtype by name.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

#: The task and criterion of every label-smoothed system's training run.
LABEL_SMOOTHED = [
    "--task",
    "multidoc_summarization",
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
]


def autocast_dtype(name: str) -> Optional[torch.dtype]:
    """The dtype ``torch.autocast`` runs in for ``--dtype name``; ``None``
    for fp32 (autocast off)."""
    return None if name == "fp32" else DTYPES[name]


# ------------------------------------------------------------ synthetic model


def synthetic_dictionary(size: int):
    """A fairseq ``Dictionary`` of ``size`` symbols: its four specials, then
    ``w0``, ``w1``, ...; the cost of a model barely depends on the words."""
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for index in range(size - len(dictionary)):
        dictionary.add_symbol(f"w{index}")
    return dictionary


class SyntheticTask:
    """What ``build_model`` reads of a task: the one dictionary of source
    and target, and no document separator (PRIMERA's layout is not used)."""

    def __init__(self, dictionary):
        self.source_dictionary = self.target_dictionary = dictionary

    def document_separator(self):
        return None


def dimensions(layers: int, embed_dim: int, ffn_dim: int, heads: int, **more) -> Dict[str, object]:
    """The size flags of an encoder-decoder with the same layers, width,
    feed-forward width and heads in the encoder and the decoder, plus
    ``more``."""
    return dict(
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_embed_dim=embed_dim,
        decoder_embed_dim=embed_dim,
        encoder_ffn_embed_dim=ffn_dim,
        decoder_ffn_embed_dim=ffn_dim,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        **more,
    )


def model_flags(model_class, **fields) -> Namespace:
    """``model_class``'s flags as fairseq parses model arguments (a flag not
    given is absent, so that the architecture function fills it), then
    ``fields``."""
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    model_class.add_args(parser)
    args = parser.parse_args([])
    for name, value in fields.items():
        setattr(args, name, value)
    return args


def model_args(model_class, dims: str, **fields) -> Namespace:
    """:func:`model_flags` at the :data:`DIMS` ``dims``, then ``fields``."""
    return model_flags(model_class, **{**dimensions(*DIMS[dims]), **fields})


def architecture_args(arch: str, **fields) -> Namespace:
    """The arguments ``fairseq-train`` builds the registered architecture
    ``arch`` with for the summarization task: its model's
    :func:`model_flags` with ``fields``, then the architecture's settings."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    args = model_flags(ARCH_MODEL_REGISTRY[arch], **fields)
    args.arch = arch
    args.task = "multidoc_summarization"
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


def synthetic_model(arch: str, dictionary, **fields):
    """The registered architecture ``arch`` (:func:`architecture_args` with
    ``fields``) built on ``dictionary`` (:class:`SyntheticTask`)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    args = architecture_args(arch, **fields)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, SyntheticTask(dictionary))


def synthetic_data_bin(
    work_dir: str, longest: int, train: int = 2, valid: int = 1, test: int = 1, document_separator: bool = True
) -> str:
    """A data-bin under ``work_dir`` of synthetic clusters (``train`` /
    ``valid`` / ``test`` of them) longer than ``longest`` source tokens, with
    the dependency arcs DAPE reads, and (``document_separator``) PRIMERA's
    ``<doc-sep>`` in its dictionary; returns its path."""
    from tests.utils import make_tiny_data_bin

    documents = max(8, 8 * -(-longest // 2048))
    data_bin = make_tiny_data_bin(
        work_dir,
        train=train,
        valid=valid,
        test=test,
        vocab_size=2000,
        extra_args=["--side-data", "dep_head", "dep_rel"],
        num_docs=documents,
        distractor_docs=documents // 2,
        noise_sentences=6,
    )
    if document_separator:
        # PRIMERA's layout joins documents with <doc-sep>, a symbol of its imported dictionary
        with open(os.path.join(data_bin, "dict.txt"), "a", encoding="utf-8") as handle:
            handle.write("<doc-sep> 1\n")
    return data_bin


# --------------------------------------------------------------- command line


def argument_parser(docstring: str, whole_docstring: bool = False) -> argparse.ArgumentParser:
    """The parser of a benchmark: its description is the docstring's first
    paragraph (the whole docstring, unwrapped as written, when
    ``whole_docstring``)."""
    if whole_docstring:
        return argparse.ArgumentParser(description=docstring, formatter_class=argparse.RawDescriptionHelpFormatter)
    return argparse.ArgumentParser(description=docstring.split("\n\n")[0])


def add_device(parser: argparse.ArgumentParser, default: str = "cpu") -> None:
    parser.add_argument("--device", default=default, choices=["cpu", "cuda"], help="device to measure on")


def add_dims(parser: argparse.ArgumentParser, default: str, meaning: str) -> None:
    """``--dims``: the model size by name, one of :data:`DIMS`; ``meaning``
    says what it sizes."""
    parser.add_argument("--dims", default=default, choices=sorted(DIMS), help=meaning)


def add_dtype(parser: argparse.ArgumentParser, meaning: str = "parameter and activation dtype") -> None:
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES), help=meaning)


def add_threads(parser: argparse.ArgumentParser, default: Optional[int] = 1) -> None:
    shown = default if default is not None else "torch's own"
    parser.add_argument(
        "--threads",
        type=int,
        default=default,
        help=f"CPU intra-op threads (1 = stable figures on a shared machine; default: {shown})",
    )


def add_repeats(parser: argparse.ArgumentParser, what: str, flag: str = "--repeats", default: int = 3) -> None:
    """The timed repeats every median (min-max) is over; ``what`` says what
    one repeat is."""
    parser.add_argument(flag, type=int, default=default, help=f"{what} (median (min-max) reported; default {default})")


def add_profile(parser: argparse.ArgumentParser, what: str) -> None:
    """``--profile ROWS``: ``what`` (when, and which run) is profiled."""
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="ROWS",
        help=f"{what} with torch.profiler and print the ROWS operators with the most device and host time",
    )


def add_measure_one(parser: argparse.ArgumentParser) -> None:
    """The hidden flag with which :func:`measure_in_subprocess` runs one
    measurement in a fresh interpreter."""
    parser.add_argument("--measure-one", help=argparse.SUPPRESS)


def parse(
    parser: argparse.ArgumentParser, argv: Optional[Sequence[str]], at_least_one: Iterable[str] = ("repeats",)
) -> Namespace:
    """Parse ``argv``; refuse a value below 1 of the options ``at_least_one``
    (destinations) and ``--device cuda`` where no GPU is visible."""
    options = parser.parse_args(argv)
    for name in at_least_one:
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(options, name)}")
    if getattr(options, "device", "cpu") == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda requested but no GPU is visible")
    return options


def fill_device_defaults(options: Namespace, **defaults: Tuple[object, object]) -> Namespace:
    """Each option ``name`` left unset (``None``) takes its default for the
    device, given as ``name=(on a GPU, on a CPU)``."""
    on_gpu = options.device == "cuda"
    for name, (gpu_default, cpu_default) in defaults.items():
        if getattr(options, name) is None:
            setattr(options, name, gpu_default if on_gpu else cpu_default)
    return options


def device_line(device: str, threads: Optional[int] = None) -> str:
    """``device: NAME``: the GPU's name, or the CPU's model with the threads
    (``threads``, else torch's) its figures are measured with."""
    if str(device).startswith("cuda"):
        return f"device: {torch.cuda.get_device_name()}"
    return f"device: CPU ({cpu_model()}, {threads or torch.get_num_threads()} thread(s))"


def print_header(header: str) -> None:
    """A table's column titles and a rule under them."""
    print(header)
    print("-" * len(header))


# ---------------------------------------------------------------- results file


class Rows(list):
    """The rows of a results file: :meth:`add` appends rows and rewrites the
    file (when there is one) with every row so far."""

    def __init__(self, record: Optional[results.ResultsFile]):
        super().__init__()
        self.record = record
        self.fields: Dict[str, object] = {}

    def add(self, *rows: dict, **fields) -> None:
        """Append ``rows``; ``fields`` are header fields known only now
        (a model's parameter count, ...)."""
        self.extend(rows)
        self.fields.update(fields)
        if self.record is not None:
            self.record.write(self, **self.fields)


def result_rows(
    options: Namespace,
    script: str,
    argv: Optional[Sequence[str]],
    repeats: Optional[int],
    device: Optional[str] = None,
    **fields,
) -> Rows:
    """The rows of this run, written to ``--json FILE`` when given, whose
    header names ``benchmarks/SCRIPT.py`` with the command line ``argv``,
    ``repeats`` and ``fields`` (dtype, sizes, ...)."""
    if not options.json:
        return Rows(None)
    return Rows(results.ResultsFile(options.json, script, argv, device or options.device, repeats, **fields))


def begin(
    options: Namespace,
    script: str,
    argv: Optional[Sequence[str]],
    repeats: Optional[int],
    setting: str,
    device: Optional[str] = None,
    **fields,
) -> Rows:
    """The start of a benchmark's run: print its :func:`device_line` (with
    ``--threads`` where the benchmark has it) followed by ``setting``, and
    return the run's :func:`result_rows`."""
    print(f"{device_line(options.device, getattr(options, 'threads', None))}; {setting}")
    return result_rows(options, script, argv, repeats, device, **fields)


# ------------------------------------------------------------ fresh processes


Measurement = Callable[[Namespace, str, int], dict]


def measure_in_subprocess(script: str, which: str, forward_args: List[str]) -> dict:
    """Run ``python SCRIPT --measure-one WHICH FORWARD_ARGS...`` (a fresh
    interpreter, so that its peak resident size is this measurement's own)
    and read the JSON object it prints last; ``{"error": ...}`` with its last
    error line when it fails (a configuration that does not fit)."""
    command = [sys.executable, script, "--measure-one", which, *forward_args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}"
        return {"error": message}
    return json.loads(result.stdout.strip().splitlines()[-1])


def forwarded_arguments(options: Namespace, names: Sequence[str]) -> List[str]:
    """``--name value`` of each option (destination) ``names``: the settings
    a measurement in a fresh process is run with."""
    return [argument for name in names for argument in (f"--{name.replace('_', '-')}", str(getattr(options, name)))]


def in_fresh_interpreter_on_cpu(
    options: Namespace, script: str, measure: Measurement, forwarded: Sequence[str]
) -> Measurement:
    """``measure(options, NAME, TOKENS)`` as it is run: on a GPU in this
    process (the allocator's peak is the measurement's own); on a CPU through
    :func:`measure_in_subprocess`, ``python SCRIPT --measure-one NAME:TOKENS``
    with the options ``forwarded``."""
    if options.device == "cuda":
        return measure
    arguments = forwarded_arguments(options, forwarded)
    return lambda options, name, tokens: measure_in_subprocess(script, f"{name}:{tokens}", arguments)


def answer_measure_one(options: Namespace, measure: Measurement) -> bool:
    """In the process :func:`measure_in_subprocess` started: print
    ``measure(options, NAME, TOKENS)`` for ``--measure-one NAME:TOKENS`` as
    JSON and return True; False in the benchmark's own process."""
    if not options.measure_one:
        return False
    name, tokens = options.measure_one.split(":")
    print(json.dumps(measure(options, name, int(tokens))))
    return True
