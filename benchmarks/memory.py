"""What fits on a GPU: training memory per system at the papers' source lengths.

For every architecture given (default: each system at base and large
dimensions, the Hierarchical Transformer at its paper size), one training step
at batch 1 on one synthetic cluster of ``n`` source tokens is measured for
``n`` in ``--lengths`` (forward and backward of the system's training criterion,
dropout on, built with fairseq-train's own parsing, task, model and criterion:
:func:`benchmarks.activation_checkpointing.measure`), in float32 and in
bfloat16 (the model and the batch cast to it), without and with
``--checkpoint-activations``. The step's peak above what the model and the
batch hold is the **activation** memory (CPU: growth of the peak resident size
of a fresh process, :mod:`benchmarks.measure`; CUDA: ``max_memory_allocated``).

Every cell of the table is ``static + activations(n)``:

* static (fairseq's trainer with Adam), with the paper's vocabulary
  (:func:`paper_vocabulary_size`): float32 4 bytes per weight and 12 more per
  trained weight (gradient 4, Adam's two moments 8); 16-bit 2 bytes per weight
  and 18 more per trained weight (fairseq's ``--fp16`` keeps 16-bit gradients,
  2, a float32 master copy of weights and gradients, 4 + 4, and Adam's moments
  in float32, 8; bfloat16 on a GPU costs the same; ``--memory-efficient-fp16``
  drops the master copy);
* activations(n): measured at the lengths given, and otherwise projected from
  the least-squares fit ``a + b n + c n^2`` (``c`` >= 0: attention that is
  dense over the whole source grows with n^2, blocked or paged attention
  linearly) of the float32 measurements; 16-bit activations are measured for
  ``--bf16-archs`` at ``--bf16-lengths`` (bfloat16 kernels are slow on CPUs)
  and otherwise projected as the float32 figure times the median measured
  bf16/fp32 ratio. Each cell says ``m`` (measured) or ``p`` (projected).

With ``--fit-gib G`` a configuration is measured only where its cell,
projected from the float32 lengths measured before it (at least two; the
lengths are measured shortest first, every system at one length before the
next), fits in ``G`` GiB; the others stay projected and say so.

The last table gives, per system, the largest source length (multiple of 256,
up to 16,384) whose projected step fits on a 24, 40 and 80 GB GPU with 1 GiB
left for the CUDA context, in 16-bit with activation checkpointing (the
setting that fits most) and in float32 with checkpointing.

CPU resident size is not the CUDA allocator's peak (no caching-allocator
fragmentation, and CPU kernels keep other temporaries), so on a GPU run
``--device cuda`` to measure the same table there.

    python benchmarks/memory.py                                 # CPU, every system, 512 1024 2048
    python benchmarks/memory.py --archs hierencdec_bart_base --lengths 1024 2048 4096 --repeats 3
    python benchmarks/memory.py --device cuda --lengths 1024 4096 8192 16384
"""

import json
import os
import statistics
import sys
import tempfile
from typing import Dict, List, Sequence, Tuple

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.activation_checkpointing import measure, training_argv
from benchmarks.measure import in_fresh_process, spread

#: Each system at base and large dimensions (DAPE's paper model is a base
#: Transformer; the Hierarchical Transformer's arch is its paper size).
DEFAULT_ARCHS = [
    "hiertransformer",
    "hierencdec_bart_base",
    "hierencdec_bart_large",
    "pagesum_bart_base",
    "pagesum_bart_large",
    "sparse_bart_base",
    "sparse_bart_large",
    "dape_transformer",
    "led_base",
    "led_large",
    "primera",
]
#: The source lengths the table reports.
TABLE_LENGTHS = (1024, 4096, 8192, 16384)
#: Bytes per parameter of the trainer's static state (see the module docstring).
#: ``(per weight, per trainable weight)``: every weight is stored; gradients,
#: the float32 master copy and Adam's moments exist for trainable ones only
#: (the sparse decoder's joint stage freezes BART's body).
STATIC_BYTES_PER_PARAMETER = {"fp32": (4, 12), "bf16": (2, 18)}


def static_bytes(counted: Dict[str, int], dtype: str) -> float:
    per_weight, per_trainable = STATIC_BYTES_PER_PARAMETER[dtype]
    return counted["parameters"] * per_weight + counted["trainable"] * per_trainable


GPU_SIZES_GB = (24, 40, 80)
CUDA_CONTEXT_GIB = 1.0
GIB = 2**30
MIB = 2**20


def paper_vocabulary_size(arch: str) -> int:
    """The vocabulary the system is trained with in its paper: BART's GPT-2
    BPE (50,265) for the BART- and LED-based systems (PRIMERA adds
    ``<doc-sep>``), a 32,000-piece SentencePiece model for the others
    (Liu & Lapata 2019; the same size for DAPE's Transformer), and the T5
    family's 32,128 embedding rows plus fairseq's ``<s>`` (fairseq index = T5
    id + 1: :mod:`mdsfair.importers.hf_t5`)."""
    if arch == "primera":
        return 50266
    if arch.startswith(("t5_", "longt5_")):
        return 32129
    return 50265 if any(name in arch for name in ("bart", "led")) else 32000


def count_parameters(config: dict) -> dict:
    """Trainable parameters of ``config["arch"]`` with its paper's vocabulary
    (the synthetic data-bin's dictionary is padded to that size, so the
    embeddings and output projection count as in a real run)."""
    from fairseq import options, tasks

    import mdsfair

    mdsfair.register()
    args = options.parse_args_and_arch(options.get_training_parser(), training_argv(config, 1024))
    task = tasks.setup_task(args)
    dictionary = task.source_dictionary
    for index in range(len(dictionary), config["vocabulary"]):
        dictionary.add_symbol(f"madeupword{index:05d}")
    model = task.build_model(args)
    # a learned position table the source may not outgrow (LED / PRIMERA); None: any length
    max_source = getattr(args, "max_encoder_positions", None)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "max_source": max_source,
    }


def read_measurements(path: str) -> Dict[Tuple[str, str, bool], Dict[int, List[float]]]:
    """The runs of a ``--measurements`` file: ``(arch, dtype, checkpointed) ->
    {length: [MiB of each run]}``. The file is a results file
    (:mod:`benchmarks.results`: one row per cell with its runs); the older
    form, ``{"arch/dtype/variant": {"length": [runs]}}``, is read too."""
    with open(path, encoding="utf-8") as handle:
        stored = json.load(handle)
    measured: Dict[Tuple[str, str, bool], Dict[int, List[float]]] = {}
    if "rows" in stored:
        for row in stored["rows"]:
            key = (row["arch"], row["dtype"], row["variant"] == "checkpointed")
            measured.setdefault(key, {})[int(row["source_tokens"])] = list(row["runs"])
        return measured
    for key, runs in stored.items():
        arch, dtype, variant = key.split("/")
        measured[(arch, dtype, variant == "checkpointed")] = {int(n): values for n, values in runs.items()}
    return measured


def save_measurements(path: str, measured, header: "results.ResultsFile") -> None:
    """The runs as a results file: the header of this run (the commands of
    earlier runs that measured cells kept under ``earlier_runs``), one row per
    cell with its runs and their median, min and max."""
    earlier = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
        if "rows" in stored:
            earlier = stored.get("earlier_runs", [])
            if stored.get("command") != header.header["command"] or stored.get("date") != header.header["date"]:
                earlier = earlier + [{key: stored.get(key) for key in ("command", "commit", "date", "device")}]
    rows = [
        {
            "arch": arch,
            "dtype": dtype,
            "variant": "checkpointed" if checkpointed else "plain",
            "source_tokens": n,
            "activation_mib": results.repeats_cell(values),
            "runs": values,
        }
        for (arch, dtype, checkpointed), runs in measured.items()
        for n, values in sorted(runs.items())
    ]
    header.path = path + ".tmp"
    header.write(rows, earlier_runs=earlier)
    header.path = path
    os.replace(path + ".tmp", path)


def compare_measurements(first_path: str, second_path: str) -> str:
    """A markdown table of the activations (MiB, medians) that two
    ``--measurements`` files both hold (e.g. a GPU run against the CPU
    one), with second / first, for every architecture, dtype, variant and
    length in common."""
    first, second = read_measurements(first_path), read_measurements(second_path)
    rows = [
        "| system | dtype | variant | source tokens | first MiB | second MiB | second / first |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for key in sorted(set(first) & set(second)):
        arch, dtype, checkpointed = key
        variant = "checkpointed" if checkpointed else "plain"
        for n in sorted(set(first[key]) & set(second[key]), key=int):
            a, b = statistics.median(first[key][n]), statistics.median(second[key][n])
            rows.append(f"| {arch} | {dtype} | {variant} | {int(n):,} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
    if len(rows) == 2:
        raise ValueError(f"{first_path} and {second_path} have no cell in common")
    return "\n".join(rows)


def fit_activations(lengths: Sequence[int], mib: Sequence[float]) -> Tuple[float, float, float]:
    """``(a, b, c)`` of the least-squares fit ``a + b n + c n^2`` (MiB), with
    ``c`` >= 0 (a linear fit when the quadratic one bends down); one length
    gives a line through the origin."""
    n = np.asarray(lengths, dtype=np.float64)
    y = np.asarray(mib, dtype=np.float64)
    if len(n) == 1:
        return 0.0, float(y[0] / n[0]), 0.0
    if len(n) >= 3:
        c, b, a = np.polyfit(n, y, 2)
        if c >= 0:
            return float(a), float(b), float(c)
    b, a = np.polyfit(n, y, 1)
    return float(a), float(b), 0.0


def activations_at(fit: Tuple[float, float, float], n: int) -> float:
    a, b, c = fit
    return max(a + b * n + c * n * n, 0.0)


def fit_of_runs(fp32_runs: Dict[int, List[float]], scale: float = 1.0) -> Tuple[float, float, float]:
    """:func:`fit_activations` through the medians of float32 runs
    (``{length: [MiB, ...]}``), times ``scale`` (the 16-bit / float32 ratio
    for a 16-bit cell)."""
    lengths = sorted(fp32_runs)
    a, b, c = fit_activations(lengths, [statistics.median(fp32_runs[m]) for m in lengths])
    return a * scale, b * scale, c * scale


def projected_cell_gib(
    counted: Dict[str, int], dtype: str, fp32_runs: Dict[int, List[float]], n: int, scale: float = 1.0
) -> float:
    """A projected table cell in GiB: the static memory in ``dtype`` plus the
    activations at ``n`` of :func:`fit_of_runs`. Also how ``--fit-gib`` judges
    a configuration before it is measured (``scale`` 1: a 16-bit step is
    judged by its float32 activations, an upper bound)."""
    return (static_bytes(counted, dtype) + activations_at(fit_of_runs(fp32_runs, scale), n) * MIB) / GIB


def largest_fitting_length(static_bytes: float, fit, gpu_gb: int, cap: int = 16384, step: int = 256) -> int:
    """The largest multiple of ``step`` up to ``cap`` whose projected step fits
    on a ``gpu_gb`` GB (10^9 bytes) GPU with the CUDA context reserved; 0 when
    none does."""
    budget = gpu_gb * 1e9 - CUDA_CONTEXT_GIB * GIB
    best = 0
    for n in range(step, cap + 1, step):
        if static_bytes + activations_at(fit, n) * MIB <= budget:
            best = n
    return best


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--archs", nargs="+", default=DEFAULT_ARCHS, help="architectures to measure")
    parser.add_argument(
        "--lengths",
        nargs="+",
        type=int,
        default=[512, 1024, 2048],
        help="source lengths to measure (the rest of the table is projected from them)",
    )
    parser.add_argument(
        "--bf16-archs",
        nargs="*",
        default=None,
        help="architectures also measured in bfloat16 (default: the first one; bf16 kernels are "
        "slow on CPUs without AMX); the others' 16-bit activations are their float32 "
        "activations times the median bf16/fp32 ratio of these measurements",
    )
    parser.add_argument(
        "--bf16-lengths",
        nargs="+",
        type=int,
        default=[512],
        help="source lengths measured in bfloat16 (a subset of --lengths)",
    )
    parser.add_argument(
        "--bf16-ratio",
        type=float,
        default=None,
        help="16-bit / float32 activation ratio to project with when no architecture is measured "
        "in bfloat16 (--bf16-archs with none): take it from an earlier run",
    )
    harness.add_repeats(parser, "runs of each configuration, each in a fresh process")
    harness.add_device(parser)
    harness.add_threads(parser)
    parser.add_argument("--data", help="a data-bin with clusters longer than the longest length (default: synthesized)")
    parser.add_argument(
        "--fit-gib",
        type=float,
        default=None,
        help="measure a configuration only where its cell (static + activations, projected from "
        "the float32 lengths measured so far, at least two) fits in this many GiB; the others "
        "stay projected (e.g. 20 on a machine with 24 GiB)",
    )
    parser.add_argument(
        "--table-only", action="store_true", help="measure nothing: print the tables from --measurements"
    )
    parser.add_argument(
        "--measurements",
        metavar="JSON",
        help="measured activations (MiB) by architecture, dtype, checkpointing and length: read "
        "when the file exists (what it holds is not measured again), written at the end",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("FIRST", "SECOND"),
        help="measure nothing: print the activations two --measurements files both hold, side by "
        "side with SECOND / FIRST (e.g. the CPU file and a GPU run's)",
    )
    args = harness.parse(parser, argv)
    if args.compare:
        print(compare_measurements(*args.compare))
        return
    work = None
    if args.data is None:
        work = tempfile.TemporaryDirectory(prefix="mdsfair-memory-bench-")
        args.data = harness.synthetic_data_bin(work.name, max(args.lengths))
    print(
        f"{harness.device_line(args.device, args.threads)}; one training step, batch 1, Adam; "
        f"lengths measured: {args.lengths}; "
        f"repeats: {args.repeats}"
    )
    measured: Dict[Tuple[str, str, bool], Dict[int, List[float]]] = {}
    parameters: Dict[str, Dict[str, int]] = {}
    max_source: Dict[str, int] = {}
    bf16_archs = args.archs[:1] if args.bf16_archs is None else args.bf16_archs
    # length-major: every system at the shorter lengths first, so that each longer length is skipped or
    # measured (--fit-gib) with the points measured just before, and an interrupted run has whole rows
    plan = [(arch, "fp32", n) for n in sorted(args.lengths) for arch in args.archs]
    plan += [(arch, "bf16", n) for n in sorted(args.bf16_lengths) for arch in bf16_archs]
    for arch in dict.fromkeys(arch for arch, _, _ in plan):
        counted = in_fresh_process(
            count_parameters,
            {"device": "cpu", "arch": arch, "data": args.data, "vocabulary": paper_vocabulary_size(arch)},
        )
        parameters[arch] = counted
        max_source[arch] = counted["max_source"] or 16384
    if args.measurements and os.path.exists(args.measurements):
        measured.update(read_measurements(args.measurements))
    header = (
        results.ResultsFile(
            args.measurements, "memory", argv, args.device, args.repeats, threads=args.threads, batch_size=1
        )
        if args.measurements
        else None
    )
    if args.table_only:
        plan = []
    for arch, dtype, n in plan:
        for checkpointed in (False, True):
            if n in measured.get((arch, dtype, checkpointed), {}):
                continue
            if n > max_source[arch]:
                continue  # beyond the system's position table: n/a in the table
            known = measured.get((arch, "fp32", checkpointed), {})
            if args.fit_gib is not None and len(known) >= 2:
                projected = projected_cell_gib(parameters[arch], dtype, known, n)
                if projected > args.fit_gib:
                    print(
                        f"  {arch} {dtype} {'checkpointed' if checkpointed else 'plain'} n={n}: not measured, "
                        f"projected {projected:.1f} GiB > --fit-gib {args.fit_gib:g}",
                        flush=True,
                    )
                    continue
            flags = ["--checkpoint-activations"] if checkpointed else []
            config = {
                "device": args.device,
                "threads": args.threads,
                "arch": arch,
                "flags": flags,
                "data": args.data,
                "source_tokens": n,
                "dtype": dtype,
            }
            values = [in_fresh_process(measure, config)["peak_mib"] for _ in range(args.repeats)]
            measured.setdefault((arch, dtype, checkpointed), {})[n] = values
            if args.measurements:  # after every measurement: an interrupted run keeps what it measured
                save_measurements(args.measurements, measured, header)
            print(
                f"  {arch} {dtype} {'checkpointed' if checkpointed else 'plain'} n={n}: activations "
                f"{spread(values).format('.0f', ' MiB')}",
                flush=True,
            )
    if args.measurements and plan:
        save_measurements(args.measurements, measured, header)
    ratios = [
        statistics.median(values) / statistics.median(measured[(arch, "fp32", checkpointed)][n])
        for (arch, dtype, checkpointed), runs in measured.items()
        if dtype == "bf16"
        for n, values in runs.items()
        if n in measured[(arch, "fp32", checkpointed)]
    ]
    if ratios:
        bf16_ratio = statistics.median(ratios)
        print(f"16-bit / float32 activations: median {bf16_ratio:.2f} of {len(ratios)} measured pairs")
    elif args.bf16_ratio is not None:
        bf16_ratio = args.bf16_ratio
        print(f"16-bit / float32 activations: {bf16_ratio:.2f} (--bf16-ratio, from an earlier run)")
    else:
        parser.error("no architecture measured in bfloat16: give --bf16-archs or --bf16-ratio")

    def scale_of(dtype):
        return bf16_ratio if dtype == "bf16" else 1.0

    def activation_fit(arch, dtype, checkpointed):
        return fit_of_runs(measured[(arch, "fp32", checkpointed)], scale_of(dtype))

    def cell(arch, dtype, checkpointed, n):
        runs = measured.get((arch, dtype, checkpointed), {})
        if n in runs:
            return (static_bytes(parameters[arch], dtype) + statistics.median(runs[n]) * MIB) / GIB, "m"
        return projected_cell_gib(
            parameters[arch], dtype, measured[(arch, "fp32", checkpointed)], n, scale_of(dtype)
        ), "p"

    columns = [(dtype, checkpointed) for dtype in ("fp32", "bf16") for checkpointed in (False, True)]
    names = {
        ("fp32", False): "fp32",
        ("fp32", True): "fp32 + ckpt",
        ("bf16", False): "16-bit",
        ("bf16", True): "16-bit + ckpt",
    }
    print()
    print("| system | parameters | source tokens | " + " | ".join(names[c] + " (GiB)" for c in columns) + " |")
    print("|---|---:|---:|" + "---:|" * len(columns))
    for arch in args.archs:
        for n in sorted(set(TABLE_LENGTHS) | set(measured[(arch, "fp32", False)])):
            cells = []
            for dtype, checkpointed in columns:
                if n > max_source[arch]:
                    cells.append(f"n/a (table of {max_source[arch]:,})")
                    continue
                gib, kind = cell(arch, dtype, checkpointed, n)
                cells.append(f"{gib:.1f} {kind}")
            counted = parameters[arch]
            weights = f"{counted['parameters'] / 1e6:.0f} M" + (
                f" ({counted['trainable'] / 1e6:.0f} M trained)" if counted["trainable"] < counted["parameters"] else ""
            )
            print(f"| {arch} | {weights} | {n:,} | " + " | ".join(cells) + " |")
    print()
    print("largest source length whose training step fits (batch 1, Adam, 1 GiB CUDA context reserved):")
    settings = [("bf16", False), ("bf16", True), ("fp32", True)]
    print("| system | " + " | ".join(f"{gb} GB, {names[s]}" for s in settings for gb in GPU_SIZES_GB) + " |")
    print("|---|" + "---:|" * (len(settings) * len(GPU_SIZES_GB)))
    for arch in args.archs:
        cells = []
        for dtype, checkpointed in settings:
            fit = activation_fit(arch, dtype, checkpointed)
            static = static_bytes(parameters[arch], dtype)
            for gb in GPU_SIZES_GB:
                longest = largest_fitting_length(static, fit, gb, cap=max_source[arch])
                if longest >= 16384:
                    cells.append(">= 16,384")
                else:
                    cells.append(f"{longest:,}" + (" (table)" if longest == max_source[arch] else ""))
        print(f"| {arch} | " + " | ".join(cells) + " |")
    if work is not None:
        work.cleanup()


if __name__ == "__main__":
    main()
