"""What the benchmarks of one efficient attention against full attention on
the same model share (``benchmarks/tdmca.py``, ``hepos.py``, ``lobart.py``,
``hat_bart.py``, ``efficient_encoders.py``): the command-line options, the
measured step (one training step, forward and backward of the summed
cross-entropy of a summary after one source, or a forward without gradient),
each cell in a fresh process on CPU, and the table that prints the system's
memory and time as ratios of full attention's at each length and records
them. A benchmark supplies its model builder, its own options and a line
describing its setting (:func:`run_against_full`).

Measured per cell (``--steps`` timed runs after the memory run, printed as
median (min-max)): one training step, forward and backward of the summed
cross-entropy of a summary of ``--target-tokens`` tokens given a source of
the cell's length (``--no-grad``: a forward without gradient). Peak memory
above what the model and batch already hold: on CUDA
``torch.cuda.max_memory_allocated``; on CPU every cell runs in a fresh
forked process and the figure is the growth of its peak resident set size
(:mod:`benchmarks.measure`). Each row prints the system's memory and time
as ratios of ``full``'s at the same length."""

import functools
from typing import Callable, Dict, List, Optional, Sequence

import torch

from benchmarks import harness, results
from benchmarks.measure import (
    allocate_gradients,
    in_fresh_process_or_error,
    separate_ratio,
    spread,
    timed_steps,
    training_or_forward_step,
)


def measure_source_and_summary_step(model, dictionary, config: dict, side_inputs=None) -> dict:
    """Peak memory and time (:func:`benchmarks.measure.timed_steps`) of
    ``model`` on one source of ``config["length"]`` random tokens and a
    summary of ``config["target_tokens"]``: a training step when
    ``config["train"]``, else a forward without gradient. ``side_inputs``:
    the data-contract inputs the model reads (name -> ``[1, length]`` tensor)."""
    device = config["device"]
    model = model.to(device=device, dtype=harness.DTYPES[config["dtype"]]).train(config["train"])
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(dictionary.nspecial, len(dictionary), (1, config["length"]), generator=generator)
    source[0, -1] = dictionary.eos()
    target = torch.randint(dictionary.nspecial, len(dictionary), (1, config["target_tokens"]), generator=generator)
    prev_output_tokens = torch.cat([torch.full((1, 1), dictionary.eos()), target[:, :-1]], dim=1)
    inputs = {
        "src_tokens": source.to(device),
        "src_lengths": torch.tensor([config["length"]], device=device),
        "prev_output_tokens": prev_output_tokens.to(device),
        **{name: value.to(device) for name, value in (side_inputs or {}).items()},
    }
    target = target.to(device)
    if config["train"]:
        allocate_gradients(model)

    def summary_loss(output):
        logits = output[0]
        return torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1))

    step = training_or_forward_step(lambda: model(**inputs), summary_loss, config["train"])
    return timed_steps(step, device, config["steps"])


def add_length_arguments(parser, lengths: str, target_tokens: int, target_help: str = "summary tokens") -> None:
    """The device, the dtype, the source lengths and the summary's length."""
    harness.add_device(parser)
    harness.add_dtype(parser)
    parser.add_argument("--lengths", default=lengths, help="source lengths in tokens (comma list)")
    parser.add_argument(
        "--target-tokens", type=int, default=target_tokens, help=f"{target_help} (default {target_tokens})"
    )


def add_step_arguments(parser) -> None:
    """The measured step (training or no-grad forward), its repeats, the
    threads, the dictionary size and the results file."""
    parser.add_argument("--no-grad", action="store_true", help="a forward without gradient instead of a training step")
    harness.add_repeats(parser, "timed runs per cell after the memory run", flag="--steps")
    harness.add_threads(parser)
    parser.add_argument("--vocab-size", type=int, default=1000, help="dictionary size (default 1000)")
    results.add_argument(parser)


def built_on_a_synthetic_dictionary(model_class, args, config: dict) -> tuple:
    """``model_class`` built from ``args`` on a synthetic dictionary of
    ``config["vocab_size"]`` symbols, and that dictionary."""
    task = harness.SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    return model_class.build_model(args, task), task.target_dictionary


def bart_benchmark_parser(docstring: str):
    """The parser of a benchmark of a BART-based model: its device, dtype,
    source lengths (1,024 to 8,192 tokens), 256 summary tokens and its
    dimensions (small)."""
    parser = harness.argument_parser(docstring)
    add_length_arguments(parser, "1024,2048,4096,8192", 256)
    harness.add_dims(parser, "small", "encoder and decoder size (base: BART-base's 6 + 6 layers, d 768, 12 heads)")
    return parser


def bart_model_at_length(arch: str, config: dict, **flags) -> tuple:
    """The registered BART-based architecture ``arch`` at ``config["dims"]``
    with ``flags`` (the system's attention), no dropout and the positions
    ``config["length"]`` source tokens and the summary need (at least BART's
    1,024), the architecture filling the rest, built on a synthetic
    dictionary of ``config["vocab_size"]`` symbols
    (:func:`benchmarks.harness.synthetic_model`); and that dictionary."""
    import mdsfair

    mdsfair.register()
    dictionary = harness.synthetic_dictionary(config["vocab_size"])
    model = harness.synthetic_model(
        arch,
        dictionary,
        **harness.dimensions(*harness.DIMS[config["dims"]]),
        **flags,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_encoder_positions=config["length"],
        max_source_positions=config["length"],
        max_target_positions=max(1024, config["target_tokens"]),
    )
    return model, dictionary


def measure_built_model(
    build_model: Callable[[dict], tuple], config: dict, side_inputs: Optional[Callable[[object, dict], dict]] = None
) -> dict:
    """:func:`measure_source_and_summary_step` of ``build_model(config)``
    (seeded, on ``config["threads"]`` threads); ``side_inputs(model,
    config)`` gives the data-contract inputs it reads."""
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    model, dictionary = build_model(config)
    return measure_source_and_summary_step(
        model, dictionary, config, side_inputs(model, config) if side_inputs else None
    )


def run_against_full(
    name: str,
    systems: Sequence[str],
    opts,
    argv,
    build_model: Callable[[dict], tuple],
    setting: str,
    options: Dict[str, object],
    side_inputs: Optional[Callable[[object, dict], dict]] = None,
) -> None:
    """The benchmark ``name``: a line naming the device and ``setting``,
    then every system of ``systems`` against ``full`` at every length of
    ``--lengths`` (:func:`compare_against_full`), recorded with the
    benchmark's own ``options`` (module-level ``build_model`` and
    ``side_inputs``: each cell runs in a fresh process)."""
    train = not opts.no_grad
    rows = harness.begin(
        opts,
        name,
        argv,
        opts.steps,
        f"dtype {opts.dtype}; {setting}; summary of {opts.target_tokens} tokens; "
        f"{'forward+backward' if train else 'no-grad forward'}; torch {torch.__version__}",
        threads=opts.threads,
        dtype=opts.dtype,
        train=train,
        target_tokens=opts.target_tokens,
        **options,
    )
    config = {
        "target_tokens": opts.target_tokens,
        "device": opts.device,
        "dtype": opts.dtype,
        "train": train,
        "steps": opts.steps,
        "threads": opts.threads,
        "vocab_size": opts.vocab_size,
        **options,
    }
    measure = functools.partial(measure_built_model, build_model, side_inputs=side_inputs)
    lengths = [int(length) for length in opts.lengths.split(",")]
    for system in systems:
        compare_against_full(system, lengths, measure, config, rows)


def compare_against_full(
    system: str, lengths: List[int], measure: Callable[[dict], dict], config: Dict[str, object], rows
) -> None:
    """For every length, ``system`` then ``full`` (``config`` with its
    ``system`` and ``length``): a printed line and a row each, and a row
    ``"<system> / full"`` of the memory and time ratios."""
    print(f"{'system':>6} {'tokens':>7} {'peak MiB':>9} {'seconds':>21} {'memory vs full':>15} {'time vs full':>21}")
    for length in lengths:
        measured = {}
        for name in (system, "full"):
            measured[name] = result = in_fresh_process_or_error(measure, {**config, "system": name, "length": length})
            if "error" in result:
                print(f"{name:>6} {length:>7} {result['error']}", flush=True)
                continue
            memory_ratio = time_ratio = None
            if name == "full":
                reference = measured.get(system, {})
                if reference.get("peak_mib") and result.get("peak_mib"):
                    memory_ratio = reference["peak_mib"] / result["peak_mib"]
                if "seconds_each" in reference:
                    time_ratio = separate_ratio(reference["seconds_each"], result["seconds_each"])
            print(
                f"{name:>6} {length:>7} {result['peak_mib']:>9.1f} "
                f"{spread(result['seconds_each']).format('.3f'):>21} "
                f"{'' if memory_ratio is None else f'{system} {memory_ratio:.2f}x':>15} "
                f"{'' if time_ratio is None else f'{system} ' + time_ratio.format('.2f', 'x'):>21}",
                flush=True,
            )
            rows.add(
                {
                    "system": name,
                    "source_tokens": length,
                    "peak_mib": result["peak_mib"],
                    "seconds": results.repeats_cell(result["seconds_each"]),
                }
            )
        if "peak_mib" in measured.get(system, {}) and "peak_mib" in measured.get("full", {}):
            ratio = separate_ratio(measured[system]["seconds_each"], measured["full"]["seconds_each"])
            rows.add(
                {
                    "system": f"{system} / full",
                    "source_tokens": length,
                    "memory_ratio": measured[system]["peak_mib"] / measured["full"]["peak_mib"],
                    "time_ratio": results.spread_cell(ratio),
                }
            )
