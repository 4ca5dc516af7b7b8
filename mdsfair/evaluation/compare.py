"""``mdsfair-compare``: several systems on the same references, with intervals and paired tests.

    mdsfair-compare --ref test.summary.txt model=gen.out lead=lead.txt lexrank=lexrank.txt
    mdsfair-compare --data-bin data-bin --split test model=gen.out lead=lead.txt
    mdsfair-compare --ref ref.txt --ci --baseline lead --correction holm lead=lead.txt model=gen.out
    mdsfair-compare --published multinews --convention hierencdec --ref ref.txt model=gen.out

Each system is ``NAME=PATH`` (a plain hypothesis file or a fairseq-generate log);
rows are systems, columns the convention's metrics (mdsfair's own: R-1, R-2, R-L,
R-Lsum, R-SU4), scored exactly as ``mdsfair-rouge`` does: the references are the
``--ref`` files or the data-bin's stored ones, and every system must cover every
cluster (a fairseq-generate log with missing ids is refused).

* A system given more than once (``model=seed1.out model=seed2.out``) is one
  system of several runs (seeds, or checkpoints): each run keeps its row
  (``model#1``, ...) and the system's row shows mean ± sample standard
  deviation over the runs; its intervals and paired tests read its per-cluster
  scores averaged over the runs (:mod:`mdsfair.evaluation.run_aggregation`).

* ``--convention NAME`` scores as a paper did (see ``--list-conventions``); every
  row shows its convention, and rows of different conventions are refused in one
  table unless ``--mixed`` is given.
* ``--ci``: 95% percentile bootstrap intervals, clusters resampled
  (``--samples``, ``--seed``, ``--confidence``).
* ``--baseline NAME``: every other system against it, per metric: paired
  bootstrap (Koehn 2004; Berg-Kirkpatrick et al. 2012) and approximate
  randomization (Noreen 1989; Riezler & Maxwell 2005), two-sided, with
  ``--correction holm|bonferroni`` across systems x metrics; ``*`` marks
  p < ``--alpha``. See :mod:`mdsfair.evaluation.significance`.
* ``--published DATASET``: the papers' numbers as rows marked "published".
* ``--per-cluster FILE`` (.jsonl/.csv), ``--json FILE``, ``--plot FILE.png``.

Everything that can be checked is checked before any system is scored: the
output paths (:func:`mdsfair.argument_types.check_output_paths`), every system's inputs
(read whole), that all systems were generated from one data-bin and split
(the data-bin each fairseq-generate log names, or ``--data-bin``; refused
unless ``--allow-different-data-bins``) and cover as many clusters, and that
the resampling of ``--samples`` fits in memory
(:func:`mdsfair.evaluation.significance.largest_samples`). With one cluster
no interval or p-value is reported, and each procedure run below its
sample-size threshold (the bootstrap's
:data:`mdsfair.evaluation.significance.SMALL_SAMPLE_CLUSTERS`, approximate
randomization's :func:`mdsfair.evaluation.significance.randomization_min_clusters`)
comes with a one-line warning naming it and what to use instead
(:func:`mdsfair.evaluation.significance.sample_size_problem`).
"""

import argparse
import decimal
import logging
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

from mdsfair.argument_types import at_least, check_output_paths, number_between
from mdsfair.evaluation.file_scoring import ScoringInputs, load_scoring_inputs, score_inputs
from mdsfair.evaluation.hypotheses import same_data_bin
from mdsfair.evaluation.inputs import RougeInputError
from mdsfair.evaluation.model_metrics import add_model_metric_arguments, add_model_metrics, wants_model_metrics
from mdsfair.evaluation.run_aggregation import (
    SPREAD_WIDTH,
    RunSpecificationError,
    aggregate_row,
    group_runs,
    row_title,
    run_averaged_scores,
    run_labels,
    score_spread,
)
from mdsfair.evaluation.score_table import MEASURE_NAMES
from mdsfair.evaluation.scoring_command import (
    SCORING_ERRORS,
    add_convention_argument,
    add_reference_source_arguments,
    check_convention_choice,
    parse_scoring_arguments,
    reference_source,
    write_json_output,
)

logger = logging.getLogger(__name__)


def percent(fraction: float) -> str:
    """``fraction`` x 100 with every digit it was given (0.95 -> ``95``,
    0.999999999 -> ``99.9999999``), never rounded to a value it is not."""
    value = (decimal.Decimal(repr(fraction)) * 100).normalize()
    return format(value, "f")


def check_same_data_bin(inputs: Dict[str, ScoringInputs]) -> None:
    """Refuse systems generated from different data-bins or splits (each
    system's data-bin: the one its fairseq-generate log names, else
    ``--data-bin``; systems of unknown origin are not compared)."""
    known = [
        (name, item.sources["data_bin"], item.sources.get("split"))
        for name, item in inputs.items()
        if item.sources.get("data_bin") is not None
    ]
    for name, data_bin, split in known[1:]:
        first_name, first_bin, first_split = known[0]
        if not same_data_bin(data_bin, first_bin) or split != first_split:
            raise RougeInputError(
                f"the systems come from different data: {first_name} from split {first_split!r} of {first_bin}, "
                f"{name} from split {split!r} of {data_bin}; cluster i of one is not cluster i of the other, so "
                "the paired scores would pair different clusters: compare systems of one data-bin and split, or "
                "pass --allow-different-data-bins"
            )


def check_resampling_memory(samples: int, clusters: int, rows: int) -> None:
    """Refuse a ``--samples`` whose resampling would not fit in
    :data:`mdsfair.evaluation.significance.RESAMPLING_MEMORY_BUDGET`."""
    from mdsfair.evaluation import significance

    needed = significance.resampling_bytes(clusters, rows, samples)
    if needed > significance.RESAMPLING_MEMORY_BUDGET:
        largest = significance.largest_samples(clusters, rows)
        raise RougeInputError(
            f"--samples {samples}: resampling {clusters} clusters x {rows} score rows would take about "
            f"{needed / 2**30:.1f} GiB, above the {significance.RESAMPLING_MEMORY_BUDGET / 2**30:g} GiB it may "
            f"use; the largest --samples this comparison allows is {largest}"
        )


def _metrics_of(rows: Sequence[Dict]) -> List[str]:
    from mdsfair.evaluation.conventions import ALL_METRICS

    present = {metric for row in rows for metric in row["scores"]}
    return [metric for metric in ALL_METRICS if metric in present]


def format_comparison(rows: Sequence[Dict], metrics: Sequence[str], show_ci: bool = False) -> str:
    """Systems as rows (name, convention, source), metrics as columns, values x100;
    a system of several runs shows mean ± sample standard deviation."""
    from mdsfair.evaluation.conventions import TITLES

    width = max(10, max(len(row_title(row)) for row in rows) + 2)
    convention_width = max(12, max(len(row["convention"]) for row in rows) + 2)
    cell = (20 if show_ci else 9) + (SPREAD_WIDTH if any(row.get("sd") for row in rows) else 0)
    lines = [
        f"{'system':<{width}}{'convention':<{convention_width}}{'source':<11}"
        + "".join(f"{TITLES[m]:>{cell}}" for m in metrics)
    ]
    for row in rows:
        cells = []
        for metric in metrics:
            value = row["scores"].get(metric)
            if value is None:
                text = "-"
            else:
                text = f"{100 * value:.2f}" + score_spread(row, metric)
                ci = (row.get("ci") or {}).get(metric)
                if ci is not None:
                    text += f" [{100 * ci[0]:.2f},{100 * ci[1]:.2f}]"
            cells.append(f"{text:>{cell}}")
        source = "published" if row.get("published") else "yours"
        lines.append(f"{row_title(row):<{width}}{row['convention']:<{convention_width}}{source:<11}" + "".join(cells))
    return "\n".join(lines)


def format_tests(tests: Dict[str, Dict[str, Dict[str, float]]], metrics: Sequence[str], alpha: float) -> str:
    """Per system and metric: the difference to the baseline (x100), then the
    paired bootstrap and approximate randomization p-values (adjusted), ``*`` below alpha."""
    from mdsfair.evaluation.conventions import TITLES

    width = max(10, max(len(name) for name in tests) + 2)
    cell = 24
    lines = [
        f"{'':<{width}}" + "".join(f"{TITLES[m]:>{cell}}" for m in metrics),
        f"{'system':<{width}}" + "".join(f"{'delta  p_boot   p_AR ':>{cell}}" for m in metrics),
    ]
    for name, per_metric in tests.items():
        cells = []
        for metric in metrics:
            test = per_metric[metric]
            marks = ["*" if test[key] < alpha else " " for key in ("p_bootstrap_adjusted", "p_randomization_adjusted")]
            text = (
                f"{100 * test['delta']:+.2f} {test['p_bootstrap_adjusted']:.3f}{marks[0]}"
                f" {test['p_randomization_adjusted']:.3f}{marks[1]}"
            )
            cells.append(f"{text:>{cell}}")
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mdsfair-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "systems",
        nargs="*",
        metavar="NAME=PATH",
        help="a system's hypotheses (or fairseq-generate log); a NAME given several times is one system of "
        "several runs (seeds, checkpoints), shown per run and as mean ± sd over the runs",
    )
    parser.add_argument(
        "--ref",
        action="append",
        default=[],
        help="reference file, one per line (repeatable); default: the references stored in --data-bin",
    )
    add_reference_source_arguments(parser)
    parser.add_argument("--fast", action="store_true", help="use rouge-score instead of the ROUGE-1.5.5 script")
    parser.add_argument("--measure", choices=["f", "r", "p"], default="f", help="F1 (default), recall or precision")
    parser.add_argument(
        "--sentence-separator", metavar="STR", help="split summaries into sentences on this marker (see mdsfair-rouge)"
    )
    add_convention_argument(parser)
    parser.add_argument(
        "--mixed",
        action="store_true",
        help="allow rows of different conventions in one table (they are not like for like)",
    )
    parser.add_argument(
        "--allow-different-data-bins",
        action="store_true",
        help="compare systems generated from different data-bins or splits (refused by default: "
        "their cluster i are different clusters, so the paired tests would pair unlike clusters)",
    )
    parser.add_argument(
        "--published",
        metavar="DATASET",
        help="add the papers' published numbers for this data set (multinews, wcep, multixscience, "
        "mred, wikisum, arxiv, pubmed, govreport, cnndm) as rows marked 'published'",
    )
    parser.add_argument("--ci", action="store_true", help="95%% bootstrap confidence intervals (clusters resampled)")
    parser.add_argument(
        "--confidence",
        type=number_between(0, 1, low_inclusive=False, high_inclusive=False),
        default=0.95,
        help="confidence level of --ci (default 0.95)",
    )
    parser.add_argument(
        "--samples", type=at_least(1), default=1000, help="bootstrap resamples and randomization samples (default 1000)"
    )
    parser.add_argument("--seed", type=at_least(0), default=1, help="seed of the resampling (default 1)")
    parser.add_argument(
        "--baseline",
        metavar="NAME",
        help="test every other system against this one: paired bootstrap and approximate randomization",
    )
    parser.add_argument(
        "--alpha",
        type=number_between(0, 1, low_inclusive=False, high_inclusive=False),
        default=0.05,
        help="significance level of the marks (default 0.05)",
    )
    parser.add_argument(
        "--correction",
        choices=["none", "holm", "bonferroni"],
        default="none",
        help="family-wise correction across systems x metrics (default none)",
    )
    parser.add_argument("--per-cluster", metavar="FILE", help="write every system's per-cluster R/P/F (.jsonl or .csv)")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the scores, intervals and significance marks (PNG)")
    parser.add_argument(
        "--json", metavar="PATH", help="also write every system's scores (and intervals, tests) as JSON"
    )
    add_model_metric_arguments(parser)
    return parser


def _check_arguments(parser: argparse.ArgumentParser, args) -> List:
    systems: List = []
    for spec in args.systems:
        if "=" not in spec or not spec.split("=", 1)[0] or not spec.split("=", 1)[1]:
            parser.error(f"expected NAME=PATH, got {spec!r}")
        systems.append(tuple(spec.split("=", 1)))
    try:
        group_runs(systems)
    except RunSpecificationError as error:
        parser.error(str(error))
    if not systems and not args.published:
        parser.error("give at least one NAME=PATH system (or --published DATASET)")
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    if not 0 < args.alpha < 1:
        parser.error("--alpha must be in (0, 1)")
    if not 0 < args.confidence < 1:
        parser.error("--confidence must be in (0, 1)")
    if args.baseline is not None and args.baseline not in dict(systems):
        parser.error(
            f"--baseline {args.baseline}: no system of that name (systems: {', '.join(dict(systems)) or 'none'})"
        )
    if args.plot and not args.plot.lower().endswith(".png"):
        parser.error(f"--plot {args.plot}: the file name must end in .png")
    if args.convention is not None:
        try:
            check_convention_choice(args.convention, args.fast)
        except RougeInputError as error:
            parser.error(str(error))
    return systems


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-compare``; returns the exit status."""
    parser = build_parser()
    args = parse_scoring_arguments(parser, argv)
    if args is None:
        return 0
    systems = _check_arguments(parser, args)
    problem = check_output_paths(
        [("--json", args.json), ("--per-cluster", args.per_cluster), ("--plot", args.plot)],
        inputs=[path for _, path in systems] + list(args.ref),
    )
    if problem is not None:
        parser.error(problem)
    convention = args.convention or ("mdsfair-fast" if args.fast else "mdsfair")
    results: "OrderedDict[str, Dict]" = OrderedDict()
    rows: List[Dict] = []
    notes: List[str] = []
    try:
        from mdsfair.evaluation.conventions import get_convention

        get_convention(convention)
        if args.per_cluster:
            from mdsfair.evaluation.per_cluster import per_cluster_format

            per_cluster_format(args.per_cluster)
        published = []
        if args.published:
            from mdsfair.evaluation.published import published_systems

            published = list(published_systems(args.published).items())
            if not args.mixed and args.convention:
                hidden = [label for label, entry in published if entry["convention"] != convention]
                published = [(label, entry) for label, entry in published if entry["convention"] == convention]
                if hidden:
                    notes.append(
                        f"{len(hidden)} published rows of {args.published} in other conventions not shown "
                        "(--mixed shows them)"
                    )
        conventions = sorted(({convention} if systems else set()) | {entry["convention"] for _, entry in published})
        if len(conventions) > 1 and not args.mixed:
            raise RougeInputError(
                f"the rows would mix the conventions {', '.join(conventions)}: their numbers are not comparable like "
                "for like; choose one with --convention NAME (published rows of other conventions are then left out) "
                "or pass --mixed"
            )
        runs = group_runs(systems)
        labels = run_labels(runs)
        inputs: "OrderedDict[str, ScoringInputs]" = OrderedDict()
        for name, paths in runs.items():
            for label, path in zip(labels[name], paths):
                inputs[label] = load_scoring_inputs(path, args.ref, **reference_source(args))
        counts = {name: len(item.hypotheses) for name, item in inputs.items()}
        if len(set(counts.values())) > 1:
            raise RougeInputError(f"the systems cover different numbers of clusters: {counts}")
        if not args.allow_different_data_bins:
            check_same_data_bin(inputs)
        clusters = next(iter(counts.values())) if counts else 0
        resampling_usable, resampling_warnings = True, []
        if inputs and (args.ci or args.baseline):
            from mdsfair.evaluation import significance
            from mdsfair.evaluation.conventions import ALL_METRICS

            resampling_usable, resampling_warnings = significance.sample_size_problem(
                clusters, interval=args.ci, tests=bool(args.baseline), alpha=args.alpha
            )
            if resampling_usable:
                systems_tested = len(runs) - 1 if args.baseline else 1
                # the ROUGE columns and the model columns asked for (--bertscore, --nsp-coherence)
                asked = {"bertscore": args.bertscore, "nsp-coherence": args.nsp_coherence}
                scored = [metric for metric in ALL_METRICS if asked.get(metric, True)]
                check_resampling_memory(args.samples, clusters, len(scored) * max(1, systems_tested))
        for name, item in inputs.items():
            results[name] = score_inputs(
                item,
                fast=args.fast,
                sentence_separator=args.sentence_separator,
                per_cluster=True,
                convention=convention,
            )
            if wants_model_metrics(args):
                add_model_metrics(results[name], item.hypotheses, item.references, args, per_cluster=True)
            rows.append(
                {
                    "name": name,
                    "convention": convention,
                    "published": False,
                    "scores": {
                        m: v[args.measure] for m, v in results[name].items() if m not in ("info", "per_cluster")
                    },
                }
            )
            nfc = results[name]["info"]["nfc_normalized"]
            if nfc["hypotheses"] or nfc["references"]:
                notes.append(
                    f"{name}: scored in Unicode NFC ({nfc['hypotheses']} hypotheses and "
                    f"{nfc['references']} references were not)"
                )
        for name, run_names in labels.items():
            if len(run_names) > 1:
                last_run = max(index for index, row in enumerate(rows) if row["name"] in run_names)
                rows.insert(last_run + 1, aggregate_row(name, [row for row in rows if row["name"] in run_names]))
        for label, entry in published:
            rows.append(
                {
                    "name": label,
                    "convention": entry["convention"],
                    "published": True,
                    "scores": entry["scores"],
                    "source": f"{entry['paper']}, {entry['table']}",
                    "note": entry["note"],
                }
            )
        if args.per_cluster and results:
            from mdsfair.evaluation.per_cluster import write_per_cluster

            write_per_cluster(args.per_cluster, results)
    except SCORING_ERRORS as error:
        parser.error(str(error))
    metrics = _metrics_of(rows)
    tests = None
    for warning in resampling_warnings:
        logger.warning("--ci/--baseline: %s", warning)
        notes.append(("no intervals or tests: " if not resampling_usable else "") + warning)
    if results and (args.ci or args.baseline) and resampling_usable:
        from mdsfair.evaluation import significance

        per_cluster = {
            name: {m: result["per_cluster"][m][args.measure] for m in result["per_cluster"]}
            for name, result in results.items()
        }
        per_system = run_averaged_scores(per_cluster, labels)
        per_cluster.update(per_system)
        several = [name for name, run_names in labels.items() if len(run_names) > 1]
        if several:
            notes.append(
                f"{', '.join(several)}: intervals and tests of a system of several runs read each cluster's score "
                "averaged over its runs (the clusters are resampled, not the runs)"
            )
        if args.ci:
            for row in rows:
                if row["published"]:
                    continue
                names = list(per_cluster[row["name"]])
                bounds = significance.bootstrap_ci(
                    [per_cluster[row["name"]][m] for m in names], args.samples, args.seed, args.confidence
                )
                row["ci"] = {m: (float(low), float(high)) for m, (low, high) in zip(names, bounds)}
        if args.baseline:
            tests = significance.compare_to_baseline(
                per_system, args.baseline, args.samples, args.seed, args.correction
            )
    print(format_comparison(rows, metrics, show_ci=args.ci))
    count = next(iter(results.values()))["info"].get("num_hypotheses") if results else None
    footer = f"[{MEASURE_NAMES[args.measure]} x 100"
    if count is not None:
        footer += f"; {count} clusters"
    if args.ci and resampling_usable:
        footer += (
            f"; [low,high]: {percent(args.confidence)}% percentile bootstrap over clusters, {args.samples} "
            f"resamples, seed {args.seed}"
        )
    print(footer + "]")
    for row in rows:
        if row["published"]:
            print(f"  published: {row['name']}: {row['source']}" + (f" ({row['note']})" if row.get("note") else ""))
    for note in notes:
        print(f"  note: {note}")
    if tests:
        print()
        print(
            f"Against the baseline {args.baseline!r} (two-sided; p_boot: paired bootstrap, p_AR: approximate "
            f"randomization; {args.samples} samples, seed {args.seed}; correction: {args.correction}; "
            f"* p < {args.alpha:g}):"
        )
        print(format_tests(tests, [m for m in metrics if m in next(iter(tests.values()))], args.alpha))
    if args.plot:
        from mdsfair.evaluation.conventions import TITLES
        from mdsfair.evaluation.plot import draw_comparison, write_png

        caption = (
            f"{len(rows)} rows; convention{'s' if len(set(r['convention'] for r in rows)) > 1 else ''}: "
            f"{', '.join(sorted(set(r['convention'] for r in rows)))}"
        )
        if args.ci and resampling_usable:
            caption += f"; bars: {percent(args.confidence)}% bootstrap CI ({args.samples} resamples)"
        if tests:
            caption += (
                f"; * approximate randomization p < {args.alpha:g} vs {args.baseline} (correction: {args.correction})"
            )
        try:
            figure = draw_comparison(
                rows, metrics, TITLES, MEASURE_NAMES[args.measure], args.baseline, tests, args.alpha, caption
            )
            write_png(args.plot, figure)
        except OSError as error:
            parser.error(f"--plot {args.plot}: {error}")
    if args.json:
        write_json_output(
            parser,
            args.json,
            {
                "systems": results,
                "rows": rows,
                "tests": tests,
                "baseline": args.baseline,
                "runs": labels,
                "notes": notes,
                "settings": {
                    "measure": args.measure,
                    "samples": args.samples,
                    "seed": args.seed,
                    "alpha": args.alpha,
                    "correction": args.correction,
                    "confidence": args.confidence,
                    "convention": convention,
                },
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
