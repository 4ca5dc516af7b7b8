"""Every system trained and decoded through fairseq's own commands, against the stock models.

For each system (and stock ``bart_base`` / ``transformer`` on the same data),
``mdsfair-train`` runs ``--updates`` updates on long synthetic clusters, with
``--bf16`` and with ``--fp16`` (each precision its own run from scratch), and
the benchmark reads fairseq's JSON log:

* the loss of every logged interval (finite, and the last below the first
  in every stage),
  the updates fairseq skipped for a gradient overflow (its "gradient overflow
  detected" lines) and the final fp16 loss scale;
* source tokens per second: fairseq's updates per second (``ups``, the median
  of the logged intervals after the first, which holds the CUDA warm-up)
  times the source tokens of one update (``bsz`` times the train split's mean
  source length after the task's ``--max-source-positions`` cut, both from
  the log);
* peak memory of the training process (``torch.cuda.max_memory_allocated``,
  on CPU the peak resident size);

then ``mdsfair-generate`` on the test split from the last checkpoint (beam
``--beam``, ``--no-repeat-ngram-size 3``, ``--fp16`` on a GPU): summaries
per second from fairseq's own "Translated N sentences ... in S s" line. Each
system's ratios are to its stock counterpart (``STOCK``): BART-based systems
and LED to ``bart_base``, the Hierarchical Transformer and DAPE to
``transformer``, at the same source length.

The sparse decoder runs its two stages (``--sparse-training-stage kl-only``,
then ``interleaved`` restored from the KL-only checkpoint, half the updates
each) with fairseq's memory-efficient 16-bit optimizer, which its README
recommends (plain ``--fp16`` keeps a flat float32 master copy of the frozen
group).

The data must hold clusters of at least ``--source-tokens`` tokens with the
dependency arcs DAPE reads and PRIMERA's ``<doc-sep>``; ``--make-data DIR``
writes such a data-bin (spaCy parses it, so build it where spaCy is installed
and carry it to the GPU machine)::

    python benchmarks/train_systems.py --make-data /tmp/long --clusters 32 --longest 4096
    python benchmarks/train_systems.py --data /tmp/long/data-bin --device cuda --updates 300 --out train.json
"""

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness
from benchmarks import results as results_file
from benchmarks.harness import LABEL_SMOOTHED

SPARSE = ["--task", "multidoc_summarization_sparse", "--criterion", "sparse_kl", "--kl-temperature", "0.5"]
#: name: list of stages, each (arch, flags); a stage after the first restores the previous stage's checkpoint
SYSTEMS: Dict[str, List[tuple]] = {
    "hiertransformer": [("hiertransformer", LABEL_SMOOTHED)],
    "hierencdec_bart_base": [("hierencdec_bart_base", LABEL_SMOOTHED)],
    "pagesum_bart_base": [("pagesum_bart_base", LABEL_SMOOTHED)],
    "sparse_bart_base": [
        ("sparse_bart_base", SPARSE + ["--sparse-training-stage", "kl-only", "--top-r", "0"]),
        (
            "sparse_bart_base",
            SPARSE
            + [
                "--sparse-training-stage",
                "interleaved",
                "--top-r",
                "5",
                "--sentence-selection",
                "approx",
                "--kl-weight",
                "0.2",
            ],
        ),
    ],
    "dape_transformer": [("dape_transformer", LABEL_SMOOTHED)],
    "led_base": [("led_base", LABEL_SMOOTHED)],
    "bart_base": [("bart_base", LABEL_SMOOTHED)],
    "transformer": [("transformer", LABEL_SMOOTHED + ["--share-all-embeddings"])],
}
STOCK = {
    "hiertransformer": "transformer",
    "dape_transformer": "transformer",
    "hierencdec_bart_base": "bart_base",
    "pagesum_bart_base": "bart_base",
    "sparse_bart_base": "bart_base",
    "led_base": "bart_base",
}
#: precision: training flags (the sparse decoder's: memory-efficient variants)
PRECISIONS = {"fp32": [], "bf16": ["--bf16"], "fp16": ["--fp16"]}
MEMORY_EFFICIENT = {"fp32": [], "bf16": ["--memory-efficient-bf16"], "fp16": ["--memory-efficient-fp16"]}

SPLIT_LINE = re.compile(r"split (\w+) of data-bin .*?: ([\d,]+) clusters, source tokens kept [\d.]+% \(([\d,]+) of")
TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")
OVERFLOW = "gradient overflow detected"


def peak_memory_hook(path: str) -> None:
    """Write this process's peak memory (MiB) to ``path`` at exit."""
    import atexit

    def write():
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            peak = torch.cuda.max_memory_allocated() / 2**20
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"peak_mib": peak}, handle)

    atexit.register(write)


def run_command(
    entry: str, argv: List[str], log_path: str, peak_path: Optional[str] = None, timeout: int = 3600
) -> subprocess.CompletedProcess:
    """``mdsfair-train`` / ``mdsfair-generate`` (``entry``: train / generate)
    in a fresh process, its output in ``log_path``."""
    hook = (
        f"from benchmarks.train_systems import peak_memory_hook; peak_memory_hook({peak_path!r}); " if peak_path else ""
    )
    code = f"import sys; sys.path.insert(0, {REPO_ROOT!r}); {hook}from mdsfair.cli import {entry}_main; {entry}_main()"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log_path, "w", encoding="utf-8") as log:
        result = subprocess.run(
            [sys.executable, "-c", code, *argv], stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout
        )
    if result.returncode != 0:
        with open(log_path, encoding="utf-8") as log:
            tail = log.read()[-4000:]
        raise RuntimeError(f"{entry} {' '.join(argv)} failed ({result.returncode}):\n{tail}")
    return result


def read_training_log(log_path: str) -> dict:
    """Losses, updates per second, batch sizes, overflows and the loss scale
    from fairseq's JSON log; the train split's clusters and source tokens
    from the task's split line."""
    intervals, overflows, split = [], 0, None
    with open(log_path, encoding="utf-8") as log:
        for line in log:
            if OVERFLOW in line:
                overflows += 1
            found = SPLIT_LINE.search(line)
            if found and found.group(1) == "train":
                split = (int(found.group(2).replace(",", "")), int(found.group(3).replace(",", "")))
            start = line.find("{")
            if "train_inner" in line and start >= 0:
                try:
                    intervals.append(json.loads(line[start:]))
                except json.JSONDecodeError:
                    continue
    if not intervals or split is None:
        raise RuntimeError(f"{log_path}: no train_inner JSON lines or no train split line")
    return {"intervals": intervals, "overflows": overflows, "split": split}


def stage_argv(
    data: str,
    arch: str,
    flags: List[str],
    precision: str,
    args,
    save_dir: str,
    updates: int,
    restore: Optional[str],
    memory_efficient: bool,
) -> List[str]:
    argv = [
        data,
        "--arch",
        arch,
        *flags,
        *(MEMORY_EFFICIENT if memory_efficient else PRECISIONS)[precision],
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.999)",
        "--lr",
        str(args.lr),
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        str(args.warmup),
        "--clip-norm",
        "1.0",
        "--batch-size",
        str(args.batch_size),
        "--max-update",
        str(updates),
        "--max-source-positions",
        str(args.source_tokens),
        "--max-target-positions",
        "1024",
        "--log-format",
        "json",
        "--log-interval",
        str(args.log_interval),
        "--disable-validation",
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--save-interval-updates",
        str(updates),
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--required-batch-size-multiple",
        "1",
    ]
    if args.device == "cpu":
        argv.append("--cpu")
    if restore:
        argv += [
            "--restore-file",
            restore,
            "--reset-optimizer",
            "--reset-dataloader",
            "--reset-meters",
            "--reset-lr-scheduler",
        ]
    return argv


def train_system(name: str, precision: str, args, work: str) -> dict:
    """Every stage of ``name`` in ``precision``; the figures of the last
    stage's log (the losses of every stage)."""
    stages = SYSTEMS[name]
    updates = args.updates // len(stages)
    restore, losses, overflows, result = None, [], 0, None
    for index, (arch, flags) in enumerate(stages):
        save_dir = os.path.join(work, f"{name}-{precision}-{index}")
        if os.path.exists(save_dir):  # fairseq would resume from its checkpoint_last.pt
            raise FileExistsError(f"{save_dir} exists (an earlier run): give another --work-dir")
        log_path = save_dir + ".log"
        peak_path = save_dir + ".peak.json"
        argv = stage_argv(
            args.data, arch, flags, precision, args, save_dir, updates, restore, memory_efficient=len(stages) > 1
        )
        started = time.perf_counter()
        run_command("train", argv, log_path, peak_path)
        wall = time.perf_counter() - started
        log = read_training_log(log_path)
        intervals = log["intervals"]
        losses.append([float(interval["loss"]) for interval in intervals])
        overflows += log["overflows"]
        clusters, source_tokens = log["split"]
        timed = intervals[1:] or intervals
        ups = statistics.median(float(interval["ups"]) for interval in timed)
        batch = statistics.median(float(interval["bsz"]) for interval in timed)
        with open(peak_path, encoding="utf-8") as handle:
            peak = json.load(handle)["peak_mib"]
        result = {
            "source_tokens_per_s": ups * batch * source_tokens / clusters,
            "updates_per_s": ups,
            "mean_source_tokens": source_tokens / clusters,
            "peak_mib": peak,
            "wall_s": wall,
            "final_loss_scale": intervals[-1].get("loss_scale"),
            "stage": " ".join(flags[-6:]),
        }
        restore = os.path.join(save_dir, "checkpoint_last.pt")
    finite = all(loss == loss and abs(loss) != float("inf") for stage in losses for loss in stage)
    # each stage trains another objective (the sparse decoder's KL-only, then interleaved): falling within each
    result.update(
        {
            "losses": losses[-1],
            "stage_losses": losses,
            "finite": finite,
            "falling": all(stage[-1] < stage[0] for stage in losses),
            "overflows": overflows,
            "updates": args.updates,
            "checkpoint": restore,
        }
    )
    return result


def generate(name: str, checkpoint: str, args, work: str) -> dict:
    """Summaries per second of beam search on the test split."""
    log_path = os.path.join(work, f"{name}-generate.log")
    flags = SYSTEMS[name][-1][1]
    task = flags[flags.index("--task") + 1]
    argv = [
        args.data,
        "--task",
        task,
        "--path",
        checkpoint,
        "--gen-subset",
        "test",
        "--beam",
        str(args.beam),
        "--no-repeat-ngram-size",
        "3",
        "--max-len-b",
        str(args.max_len_b),
        "--min-len",
        str(min(args.min_len, args.max_len_b)),
        "--batch-size",
        str(args.generate_batch_size),
        "--max-source-positions",
        str(args.source_tokens),
        "--num-workers",
        "0",
        "--seed",
        "1",
    ]
    argv += ["--fp16"] if args.device == "cuda" else ["--cpu"]
    run_command("generate", argv, log_path)
    with open(log_path, encoding="utf-8") as log:
        found = TRANSLATED.findall(log.read())
    if not found:
        raise RuntimeError(f"{log_path}: no 'Translated N sentences' line")
    sentences, tokens, seconds = found[-1]
    sentences, seconds = int(sentences.replace(",", "")), float(seconds)
    return {"summaries": sentences, "seconds": seconds, "summaries_per_s": sentences / seconds}


def table(results: dict, precisions: List[str]) -> str:
    """Markdown of :func:`results_rows`: per system and precision, the
    training figures and the ratios to the stock counterpart; then
    generation."""

    def ratio(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.2f}"

    rows = results_rows(results, precisions)
    lines = [
        "| system | precision | loss first -> last | overflows | source tok/s | x stock | peak GiB | x stock |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {row['system']} | {row['precision']} | {row['loss_first']:.2f} -> {row['loss_last']:.2f} | "
        f"{row['overflows']} | {row['source_tokens_per_s']:,.0f} | {ratio(row['tokens_per_s_vs_stock'])} | "
        f"{row['peak_gib']:.1f} | {ratio(row['peak_vs_stock'])} |"
        for row in rows
        if row["part"] == "training"
    ]
    lines += ["", "| system | summaries/s | x stock |", "|---|---:|---:|"]
    lines += [
        f"| {row['system']} | {row['summaries_per_s']:.2f} | {ratio(row['summaries_per_s_vs_stock'])} |"
        for row in rows
        if row["part"] == "generation"
    ]
    return "\n".join(lines)


def results_rows(results: dict, precisions: List[str]) -> List[dict]:
    """The rows of the results file (:mod:`benchmarks.results`): training per
    system and precision, then generation, each with its ratio to the stock
    counterpart of the same run (one run per figure)."""
    rows = []
    for name, by_precision in results["train"].items():
        for precision in precisions:
            run = by_precision.get(precision)
            if run is None:
                continue
            stock = results["train"].get(STOCK.get(name, ""), {}).get(precision)
            rows.append(
                {
                    "part": "training",
                    "system": name,
                    "precision": precision,
                    "loss_first": run["losses"][0],
                    "loss_last": run["losses"][-1],
                    "overflows": run["overflows"],
                    "source_tokens_per_s": run["source_tokens_per_s"],
                    "tokens_per_s_vs_stock": run["source_tokens_per_s"] / stock["source_tokens_per_s"]
                    if stock
                    else None,
                    "peak_gib": run["peak_mib"] / 1024,
                    "peak_vs_stock": run["peak_mib"] / stock["peak_mib"] if stock else None,
                }
            )
    for name, run in results["generate"].items():
        stock = results["generate"].get(STOCK.get(name, ""))
        rows.append(
            {
                "part": "generation",
                "system": name,
                "summaries_per_s": run["summaries_per_s"],
                "summaries_per_s_vs_stock": run["summaries_per_s"] / stock["summaries_per_s"] if stock else None,
            }
        )
    return rows


def main(argv=None):
    parser = harness.argument_parser(__doc__, whole_docstring=True)
    parser.add_argument("--data", help="data-bin with clusters of at least --source-tokens tokens (see --make-data)")
    parser.add_argument("--make-data", metavar="DIR", help="write such a data-bin under DIR and exit")
    parser.add_argument("--clusters", type=int, default=32, help="train clusters of --make-data")
    parser.add_argument("--longest", type=int, default=4096, help="source tokens each --make-data cluster exceeds")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS), help="systems to run")
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=["bf16", "fp16"],
        choices=list(PRECISIONS),
        help="training precisions, each a run from scratch",
    )
    harness.add_device(parser, default="cuda")
    parser.add_argument("--updates", type=int, default=300, help="updates per run (split between stages)")
    parser.add_argument("--batch-size", type=int, default=2, help="clusters per update")
    parser.add_argument("--source-tokens", type=int, default=4096, help="--max-source-positions of every run")
    parser.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (inverse_sqrt)")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up updates")
    parser.add_argument("--log-interval", type=int, default=25, help="fairseq's --log-interval")
    parser.add_argument("--beam", type=int, default=4, help="beam size of generation")
    parser.add_argument("--max-len-b", type=int, default=128, help="longest summary generated")
    parser.add_argument("--min-len", type=int, default=10, help="shortest summary generated (at most --max-len-b)")
    parser.add_argument("--generate-batch-size", type=int, default=8, help="clusters per generation batch")
    parser.add_argument("--no-generate", action="store_true", help="train only")
    parser.add_argument("--work-dir", help="checkpoints and logs (default: a temporary directory)")
    parser.add_argument("--out", help="write the raw results (every run's losses, logs, errors) as JSON here")
    results_file.add_argument(parser)
    args = parser.parse_args(argv)
    if args.make_data:
        # the memory benchmark's data, with 16 test clusters to generate from
        print(harness.synthetic_data_bin(args.make_data, args.longest, train=args.clusters, valid=2, test=16))
        return None
    if not args.data:
        parser.error("--data (or --make-data DIR first)")
    work = args.work_dir or tempfile.mkdtemp(prefix="train_systems.")
    os.makedirs(work, exist_ok=True)
    rows = harness.result_rows(
        args,
        "train_systems",
        argv,
        1,
        updates=args.updates,
        batch_size=args.batch_size,
        source_tokens=args.source_tokens,
    )
    results = {
        "device": results_file.device_name(args.device),
        "settings": dict(vars(args)),
        "train": {},
        "generate": {},
    }
    results["errors"] = {}
    for name in args.systems:
        checkpoint = None
        for precision in args.precisions:
            try:
                run = train_system(name, precision, args, work)
            except RuntimeError as error:  # the other systems still run; the error is reported
                results["errors"][f"{name}/{precision}"] = str(error)
                print(f"{name} {precision}: FAILED\n{error}", flush=True)
                continue
            results["train"].setdefault(name, {})[precision] = run
            checkpoint = run["checkpoint"]
            print(
                f"{name} {precision}: {run['source_tokens_per_s']:,.0f} source tok/s, peak "
                f"{run['peak_mib']:,.0f} MiB, loss {run['losses'][0]:.3f} -> {run['losses'][-1]:.3f}, "
                f"{run['overflows']} overflows",
                flush=True,
            )
        if not args.no_generate and checkpoint:
            try:
                results["generate"][name] = generate(name, checkpoint, args, work)
            except RuntimeError as error:
                results["errors"][f"{name}/generate"] = str(error)
                print(f"{name} generate: FAILED\n{error}", flush=True)
                continue
            print(f"{name} generate: {results['generate'][name]['summaries_per_s']:.2f} summaries/s", flush=True)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as handle:
                json.dump(results, handle, indent=1)
        rows.clear()  # the rows of every run so far, their ratios to the stock runs that have finished
        rows.add(*results_rows(results, args.precisions))
    print(f"device: {results['device']}")
    print(table(results, args.precisions))
    if results["errors"]:
        print(f"failed: {', '.join(results['errors'])}")
    return results


if __name__ == "__main__":
    main()
