"""Throughput and peak memory of ``mdsfair-preprocess`` at corpus scale.

Builds a corpus of at least ``--words`` source words from the real data in
``../shared/data`` (every ``*/jsonl/*.jsonl`` split, used by path, never
copied) and ``mdsfair-synth`` clusters (written to a temporary directory),
trains SentencePiece once on a sample unless ``--spm-model`` is given, then
runs the whole command (``mdsfair.preprocess.binarize.preprocess``: reading,
structure, subwords, side data, binarization, every split) in a fresh
process per corpus size and prints:

* words/s per stage: source words (whitespace words of the raw documents)
  divided by the CPU seconds the stage took, summed over the worker processes
  and the main one (reading + structure, subwords, side data, binarization);
* total words/s: words divided by the wall-clock time of the whole run
  (imports and SentencePiece training excluded), and words per CPU-second;
* peak resident memory of the main process and of the largest worker at
  every corpus size (``ru_maxrss``): flat when preprocessing streams.

Each corpus size is preprocessed ``--repeats`` times (3 by default), each run
in a fresh process, and every figure is printed as median (min-max) over those
runs (:mod:`benchmarks.measure`).

``--baseline-words N`` then preprocesses the first N words with stock spaCy
settings (thinc's blis for the matrix products, one ``nlp.pipe`` per cluster:
``--spacy-gemm blis --chunk-size 1``) and with the run's own, back to back,
``--repeats`` times (stock, own, stock, own, ...), and prints the ratios:
computed per repeat, as the two runs of a repeat are measured back to back,
and printed as median (min-max) of the per-repeat ratios
(:func:`benchmarks.measure.interleaved_ratio`).

``--profile-clusters N`` first runs cProfile over the first N clusters in
this process and prints the functions that take the most time.

    python benchmarks/preprocess.py --words 5000000 --sizes 2500000 5000000 --workers 2
    python benchmarks/preprocess.py --words 5000000 --sizes 5000000 --workers 2 \\
        --side-data dep_head dep_rel --spm-model /tmp/spm32k.model --baseline-words 600000
"""

import argparse
import glob
import json
import multiprocessing
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Dict, List, Sequence, Tuple

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness
from benchmarks import results as results_file
from benchmarks.measure import cpu_model, current_rss_bytes, interleaved_ratio, spread

SHARED_DATA = os.path.join(os.path.dirname(REPO_ROOT), "shared", "data")
STAGES = ("structure", "subwords", "side_data", "binarization")
STAGE_TITLES = {
    "structure": "reading + structure",
    "subwords": "subwords",
    "side_data": "side data",
    "binarization": "binarization",
}
SYNTH_PART_CLUSTERS = 800  # clusters per synthetic split file (~250k words)


# ------------------------------------------------------------------ corpus


def source_words(path: str) -> Tuple[int, int]:
    """``(clusters, whitespace words of the documents)`` of a raw JSONL split."""
    clusters = words = 0
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                clusters += 1
                words += sum(len(d.split()) for d in json.loads(raw)["documents"])
    return clusters, words


def _write_synthetic_part(job) -> str:
    """Write one synthetic split file (kept when it is already there: the
    same seed gives the same file)."""
    from mdsfair.preprocess.synthetic_clusters import generate_clusters

    path, seed = job
    if os.path.exists(path):
        return path
    with open(path + ".partial", "w", encoding="utf-8") as f:
        for cluster in generate_clusters(SYNTH_PART_CLUSTERS, seed=seed, split="train"):
            f.write(json.dumps(cluster, ensure_ascii=False) + "\n")
    os.replace(path + ".partial", path)
    return path


def build_corpus(work_dir: str, words: int, shared_data: str) -> List[Dict]:
    """The real splits (by path) then synthetic parts until ``words`` words;
    one entry per split: name, path, clusters, words."""
    paths = sorted(glob.glob(os.path.join(shared_data, "**", "jsonl", "*.jsonl"), recursive=True))
    if not paths:
        raise SystemExit(f"no real data (*/jsonl/*.jsonl) under {shared_data}; give --shared-data")
    splits = []
    for path in paths:
        clusters, count = source_words(path)
        name = os.path.relpath(path, shared_data).replace(os.sep, "_").replace("_jsonl_", "_")[: -len(".jsonl")]
        splits.append({"name": name, "path": path, "clusters": clusters, "words": count})
    total = sum(s["words"] for s in splits)
    # Synthetic parts: estimate how many are needed from one part, write the rest in parallel.
    synth_dir = os.path.join(work_dir, "synth")
    os.makedirs(synth_dir, exist_ok=True)
    jobs = [(os.path.join(synth_dir, "part000.jsonl"), 1000)]
    _write_synthetic_part(jobs[0])
    clusters, per_part = source_words(jobs[0][0])
    needed = max(0, -(-(words - total) // per_part))
    jobs += [(os.path.join(synth_dir, f"part{i:03d}.jsonl"), 1000 + i) for i in range(1, needed)]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_write_synthetic_part, jobs[1:])
    for path, _ in jobs[:needed]:
        clusters, count = source_words(path)
        splits.append(
            {"name": "synth_" + os.path.basename(path)[:-6], "path": path, "clusters": clusters, "words": count}
        )
    return splits


def corpus_of_size(splits: List[Dict], words: int) -> List[Dict]:
    """The shortest prefix of ``splits`` with at least ``words`` words."""
    chosen, total = [], 0
    for split in splits:
        if total >= words:
            break
        chosen.append(split)
        total += split["words"]
    if total < words:
        raise ValueError(f"the corpus has {total:,} words, fewer than {words:,}")
    return chosen


def train_spm_on_sample(splits: List[Dict], model_prefix: str, vocab_size: int, sample_lines: int) -> str:
    """SentencePiece trained once on the first ``sample_lines`` clusters of every split."""
    from mdsfair.preprocess.subword import train_sentencepiece
    from mdsfair.preprocess.subword_training import training_texts

    def sample():
        for split in splits:
            with open(split["path"], "rb") as f:
                head = [line for _, line in zip(range(sample_lines), f)]
            tmp = model_prefix + ".sample.jsonl"
            with open(tmp, "wb") as out:
                out.writelines(head)
            yield from training_texts(tmp, False)

    return train_sentencepiece(sample(), model_prefix, vocab_size=vocab_size)


# --------------------------------------------------------- one measured run


def run_once(config: Dict) -> Dict:
    """Preprocess ``config["splits"]`` in this (fresh) process; returns timings,
    stage CPU seconds, CPU time of this process and its workers, peak RSS."""
    start_import = time.perf_counter()
    from mdsfair.preprocess.binarize import get_parser, preprocess
    from mdsfair.preprocess.side_data import import_producers

    import_producers()
    import_seconds = time.perf_counter() - start_import
    argv = [
        "--destdir",
        config["destdir"],
        "--spm-model",
        config["spm_model"],
        "--workers",
        str(config["workers"]),
        "--chunk-size",
        str(config["chunk_size"]),
        "--no-progress-bar",
        "--train-splits",
        "none",
        "--overwrite",
    ]
    for split in config["splits"]:
        argv += ["--split", f"{split['name']}={split['path']}"]
    if config["side_data"]:
        argv += ["--side-data", *config["side_data"]]
    argv += config.get("extra_args", [])
    args = get_parser().parse_args(argv)
    rss_before = current_rss_bytes() // 1024
    self_before, children_before = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    stage_seconds = Counter()
    start = time.perf_counter()
    reports = preprocess(args, stage_seconds)
    wall = time.perf_counter() - start
    self_after, children_after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = lambda after, before: (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)  # noqa: E731
    return {
        "import_seconds": import_seconds,
        "wall_seconds": wall,
        "stage_seconds": dict(stage_seconds),
        "cpu_seconds_main": cpu(self_after, self_before),
        "cpu_seconds_workers": cpu(children_after, children_before),
        "rss_before_kib": rss_before,
        "peak_rss_main_kib": self_after.ru_maxrss,
        "peak_rss_worker_kib": children_after.ru_maxrss,
        "clusters": sum(r["clusters"] for r in reports.values()),
        "source_tokens": sum(r["source_tokens"] for r in reports.values()),
    }


def run_in_fresh_process(config: Dict) -> Dict:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--run-config", json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"measured run failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measured_run(
    args: argparse.Namespace, splits: List[Dict], destdir: str, spm_model: str, extra_args: Sequence[str] = ()
) -> Dict:
    """One measured ``mdsfair-preprocess`` of ``splits`` into ``destdir`` in a fresh process, with
    this run's ``--workers``, ``--chunk-size`` and ``--side-data`` and ``extra_args``; the
    data-bin is removed afterwards."""
    config = {
        "splits": splits,
        "destdir": destdir,
        "spm_model": spm_model,
        "workers": args.workers,
        "chunk_size": args.chunk_size,
        "side_data": args.side_data,
        "extra_args": list(extra_args),
    }
    result = run_in_fresh_process(config)
    shutil.rmtree(destdir, ignore_errors=True)
    return result


# ----------------------------------------------------------------- profile


def profile_clusters(
    splits: List[Dict], spm_model: str, side_data: List[str], clusters: int, work_dir: str, chunk_size: int
) -> None:
    """cProfile of the encoder (structure, subwords, side data) over the first
    ``clusters`` clusters, in this process."""
    import cProfile
    import pstats

    from mdsfair.preprocess.binarize import get_parser
    from mdsfair.preprocess.pipeline import ClusterEncoder
    from mdsfair.preprocess.structure import iter_raw_lines
    from mdsfair.preprocess.subword_training import prepare_subwords

    destdir = os.path.join(work_dir, "profile-bin")
    os.makedirs(destdir, exist_ok=True)
    args = get_parser().parse_args(
        ["--destdir", destdir, "--spm-model", spm_model, "--chunk-size", str(chunk_size), "--side-data", *side_data]
    )
    encoder = ClusterEncoder(args, destdir, prepare_subwords(args, {}))
    lines = []
    for split in splits:
        for item in iter_raw_lines(split["path"]):
            lines.append((split["path"], item))
            if len(lines) == clusters:
                break
        if len(lines) == clusters:
            break
    chunks: List[Tuple[str, List]] = []  # as the command hands them out: --chunk-size lines of one split
    for path, item in lines:
        if not chunks or chunks[-1][0] != path or len(chunks[-1][1]) == args.chunk_size:
            chunks.append((path, []))
        chunks[-1][1].append(item)
    profiler = cProfile.Profile()
    profiler.enable()
    for path, chunk in chunks:
        for _ in encoder.encode_raw_lines(chunk, path, require_summary=False):
            pass
    profiler.disable()
    print(f"\ncProfile over {len(lines)} clusters (one process), top 15 by own time:")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)


# -------------------------------------------------------------------- main


# Stock spaCy settings, as preprocessing ran before the corpus-speed work:
# thinc's blis for the matrix products and one nlp.pipe per cluster.
STOCK_SPACY_ARGS = ["--spacy-gemm", "blis", "--chunk-size", "1"]


def print_result(words: int, results: List[Dict], side_data: List[str], label: str = "") -> Dict[str, List[float]]:
    """Print the stages, totals and memory of the runs ``results`` (repeats of
    one configuration) as median (min-max); returns their words/s figures,
    one per run, and under ``row`` the results file's row of ``label``."""
    first = results[0]

    def figure(values: List[float], spec: str) -> str:
        return spread(values).format(spec)

    def per_run(function) -> List[float]:
        return [function(result) for result in results]

    def words_per_second(seconds: List[float]) -> List[float]:
        return [words / max(s, 1e-9) for s in seconds]

    cpu_totals = per_run(lambda r: r["cpu_seconds_main"] + r["cpu_seconds_workers"])
    print(
        f"\n{words:,} words, {first['clusters']:,} clusters, {first['source_tokens']:,} source tokens; "
        f"{len(results)} run(s), median (min-max) (load average {os.getloadavg()[0]:.1f} after)"
    )
    print(f"  {'stage':<34}{'CPU s':>20} {'words/s':>29}")
    for stage in STAGES:
        if stage == "side_data" and not side_data:
            continue
        seconds = per_run(lambda r: r["stage_seconds"].get(stage, 0.0))
        print(
            f"  {STAGE_TITLES[stage]:<34}{figure(seconds, '.1f'):>20} {figure(words_per_second(seconds), ',.0f'):>29}"
        )
    plain = per_run(lambda r: sum(r["stage_seconds"].get(s, 0.0) for s in ("structure", "subwords", "binarization")))
    print(
        f"  {'structure + subwords + binarization':<34}{figure(plain, '.1f'):>20} "
        f"{figure(words_per_second(plain), ',.0f'):>29}"
    )
    wall = per_run(lambda r: r["wall_seconds"])
    print(
        f"  total: {figure(wall, '.1f')} s wall = {figure(words_per_second(wall), ',.0f')} words/s; "
        f"CPU {figure(cpu_totals, '.1f')} s (main {figure(per_run(lambda r: r['cpu_seconds_main']), '.1f')}, "
        f"workers {figure(per_run(lambda r: r['cpu_seconds_workers']), '.1f')}) = "
        f"{figure(words_per_second(cpu_totals), ',.0f')} words per CPU-second"
    )
    print(
        f"  peak RSS: main {figure(per_run(lambda r: r['peak_rss_main_kib'] / 1024), ',.0f')} MiB (after imports "
        f"{figure(per_run(lambda r: r['rss_before_kib'] / 1024), ',.0f')} MiB), largest worker "
        f"{figure(per_run(lambda r: r['peak_rss_worker_kib'] / 1024), ',.0f')} MiB; imports took "
        f"{figure(per_run(lambda r: r['import_seconds']), '.1f')} s"
    )
    row = {"run": label, "words": words, "clusters": first["clusters"]}
    for stage in STAGES:
        if stage == "side_data" and not side_data:
            continue
        seconds = per_run(lambda r: r["stage_seconds"].get(stage, 0.0))
        row[f"{stage}_words_per_cpu_s"] = results_file.repeats_cell(words_per_second(seconds))
    row.update(
        {
            "total_words_per_s": results_file.repeats_cell(words_per_second(wall)),
            "wall_s": results_file.repeats_cell(wall),
            "total_words_per_cpu_s": results_file.repeats_cell(words_per_second(cpu_totals)),
            "peak_rss_main_mib": results_file.repeats_cell(per_run(lambda r: r["peak_rss_main_kib"] / 1024)),
            "peak_rss_worker_mib": results_file.repeats_cell(per_run(lambda r: r["peak_rss_worker_kib"] / 1024)),
        }
    )
    return {
        "wall": words_per_second(wall),
        "cpu": words_per_second(cpu_totals),
        "side_data": words_per_second(per_run(lambda r: r["stage_seconds"].get("side_data", 0.0))),
        "row": row,
    }


def compare_with_stock(args: argparse.Namespace, splits: List[Dict], spm_model: str, work_dir: str) -> List[Dict]:
    """The first ``--baseline-words`` words with stock spaCy settings
    (:data:`STOCK_SPACY_ARGS`) and with this run's, one after the other in
    this run, ``--repeats`` times interleaved (stock, mdsfair, stock, ...);
    prints the ratios, median (min-max) of the per-repeat ratios; returns the
    results file's rows."""
    chosen = corpus_of_size(splits, args.baseline_words)
    words = sum(s["words"] for s in chosen)
    variants = {"stock spaCy (" + " ".join(STOCK_SPACY_ARGS) + ")": STOCK_SPACY_ARGS, "mdsfair": []}
    runs = {name: [] for name in variants}
    destdir = os.path.join(work_dir, "bin-baseline")
    for _ in range(args.repeats):
        for name, extra in variants.items():
            runs[name].append(measured_run(args, chosen, destdir, spm_model, extra))
    figures = {}
    for name in variants:
        print(f"\nbaseline comparison, {name}:", end="")
        figures[name] = print_result(words, runs[name], args.side_data, f"first {words:,} words, {name}")
    stock, ours = figures.values()
    print(
        f"\nmdsfair / stock spaCy on the same {words:,} words, median (min-max) of {args.repeats} interleaved "
        f"pair(s): {interleaved_ratio(ours['wall'], stock['wall']).format('.2f', 'x')} words/s (wall), "
        f"{interleaved_ratio(ours['cpu'], stock['cpu']).format('.2f', 'x')} words per CPU-second"
        + (
            f", {interleaved_ratio(ours['side_data'], stock['side_data']).format('.2f', 'x')} side-data words per "
            "CPU-second"
            if args.side_data
            else ""
        )
    )
    ratio = {
        "run": "mdsfair / stock spaCy",
        "words": words,
        "words_per_s_vs_stock": results_file.spread_cell(interleaved_ratio(ours["wall"], stock["wall"])),
        "words_per_cpu_s_vs_stock": results_file.spread_cell(interleaved_ratio(ours["cpu"], stock["cpu"])),
    }
    if args.side_data:
        ratio["side_data_words_per_cpu_s_vs_stock"] = results_file.spread_cell(
            interleaved_ratio(ours["side_data"], stock["side_data"])
        )
    return [figures[name]["row"] for name in variants] + [ratio]


def describe_machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main(argv=None):
    parser = harness.argument_parser(__doc__, whole_docstring=True)
    parser.add_argument("--words", type=int, default=5_000_000, help="words of the corpus built (at least)")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="corpus sizes in words to run, each in a fresh process (default: --words)",
    )
    harness.add_repeats(parser, "runs of every corpus size and of each baseline variant, each in a fresh process")
    parser.add_argument("--workers", type=int, default=2, help="mdsfair-preprocess --workers")
    parser.add_argument("--chunk-size", type=int, default=16, help="mdsfair-preprocess --chunk-size")
    parser.add_argument("--side-data", nargs="*", default=[], help="mdsfair-preprocess --side-data")
    parser.add_argument("--spm-model", help="SentencePiece model to encode with (default: trained once on a sample)")
    parser.add_argument("--vocab-size", type=int, default=32000, help="pieces of the SentencePiece model trained here")
    parser.add_argument(
        "--spm-sample-clusters", type=int, default=100, help="clusters per split SentencePiece is trained on"
    )
    parser.add_argument("--profile-clusters", type=int, default=0, help="cProfile this many clusters first")
    parser.add_argument(
        "--baseline-words",
        type=int,
        default=0,
        help="after the runs, preprocess the first N words of the corpus with stock spaCy settings (thinc's blis, "
        "one nlp.pipe per cluster) and with this run's, and print the ratios (0: skip)",
    )
    parser.add_argument("--shared-data", default=SHARED_DATA, help="the real data directory")
    parser.add_argument("--work-dir", help="directory for the corpus and outputs (default: a temporary one, removed)")
    results_file.add_argument(parser)
    parser.add_argument("--run-config", help=argparse.SUPPRESS)
    args = harness.parse(parser, argv)
    if args.run_config:
        print(json.dumps(run_once(json.loads(args.run_config))))
        return

    rows = harness.result_rows(
        args,
        "preprocess",
        argv,
        args.repeats,
        device="cpu",
        workers=args.workers,
        chunk_size=args.chunk_size,
        side_data=args.side_data,
    )
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="mdsfair-preprocess-bench-")
    sizes = args.sizes or [args.words]
    try:
        print(
            f"device: CPU, {describe_machine()}; machine shared with other jobs "
            f"(load average {os.getloadavg()[0]:.1f} at start)"
        )
        start = time.perf_counter()
        splits = build_corpus(work_dir, max(max(sizes), args.words), args.shared_data)
        print(
            f"corpus: {sum(s['words'] for s in splits):,} words, {sum(s['clusters'] for s in splits):,} clusters "
            f"in {len(splits)} splits ({sum(s['words'] for s in splits if not s['name'].startswith('synth')):,} "
            f"words of real data from {args.shared_data}, the rest mdsfair-synth); built in "
            f"{time.perf_counter() - start:.0f} s"
        )
        spm_model = args.spm_model
        if not spm_model:
            start = time.perf_counter()
            spm_model = train_spm_on_sample(
                splits, os.path.join(work_dir, "spm"), args.vocab_size, args.spm_sample_clusters
            )
            import sentencepiece

            pieces = sentencepiece.SentencePieceProcessor(model_file=spm_model).get_piece_size()
            print(
                f"SentencePiece: trained once on the first {args.spm_sample_clusters} clusters of every split "
                f"({args.vocab_size:,} pieces asked, {pieces:,} reached) in {time.perf_counter() - start:.0f} s: "
                f"{spm_model}"
            )
        if args.profile_clusters:
            profile_clusters(splits, spm_model, args.side_data, args.profile_clusters, work_dir, args.chunk_size)
        print(
            f"\nmdsfair-preprocess --workers {args.workers} --chunk-size {args.chunk_size} --spm-model <given>"
            + (f" --side-data {' '.join(args.side_data)}" if args.side_data else "")
            + f"; {args.repeats} run(s) per size, median (min-max)"
        )
        for size in sizes:
            chosen = corpus_of_size(splits, size)
            words = sum(s["words"] for s in chosen)
            destdir = os.path.join(work_dir, f"bin-{size}")
            results = [measured_run(args, chosen, destdir, spm_model) for _ in range(args.repeats)]
            label = "plain" if not args.side_data else "--side-data " + " ".join(args.side_data)
            rows.add(print_result(words, results, args.side_data, label)["row"])
        if args.baseline_words:
            rows.add(*compare_with_stock(args, splits, spm_model, work_dir))
    finally:
        if not args.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
