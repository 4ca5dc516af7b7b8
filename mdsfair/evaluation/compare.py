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
"""
import argparse
import logging
import os
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

from mdsfair.argument_types import at_least, number_between
from mdsfair.data.manifest import ManifestError, write_json_atomic
from mdsfair.evaluation.rouge import (
    RougeDependencyError,
    RougeInputError,
    add_convention_argument,
    add_reference_source_arguments,
    list_conventions,
    score_files,
)

MEASURE_NAMES = {"f": "F1", "r": "recall", "p": "precision"}


def _metrics_of(rows: Sequence[Dict]) -> List[str]:
    from mdsfair.evaluation.conventions import ALL_METRICS

    present = {metric for row in rows for metric in row["scores"]}
    return [metric for metric in ALL_METRICS if metric in present]


def format_comparison(rows: Sequence[Dict], metrics: Sequence[str], show_ci: bool = False) -> str:
    """Systems as rows (name, convention, source), metrics as columns, values x100."""
    from mdsfair.evaluation.conventions import TITLES

    width = max(10, max(len(row["name"]) for row in rows) + 2)
    convention_width = max(12, max(len(row["convention"]) for row in rows) + 2)
    cell = 20 if show_ci else 9
    lines = [f"{'system':<{width}}{'convention':<{convention_width}}{'source':<11}"
             + "".join(f"{TITLES[m]:>{cell}}" for m in metrics)]
    for row in rows:
        cells = []
        for metric in metrics:
            value = row["scores"].get(metric)
            if value is None:
                text = "-"
            else:
                text = f"{100 * value:.2f}"
                ci = (row.get("ci") or {}).get(metric)
                if ci is not None:
                    text += f" [{100 * ci[0]:.2f},{100 * ci[1]:.2f}]"
            cells.append(f"{text:>{cell}}")
        source = "published" if row.get("published") else "yours"
        lines.append(f"{row['name']:<{width}}{row['convention']:<{convention_width}}{source:<11}" + "".join(cells))
    return "\n".join(lines)


def format_tests(tests: Dict[str, Dict[str, Dict[str, float]]], metrics: Sequence[str], alpha: float) -> str:
    """Per system and metric: the difference to the baseline (x100), then the
    paired bootstrap and approximate randomization p-values (adjusted), ``*`` below alpha."""
    from mdsfair.evaluation.conventions import TITLES

    width = max(10, max(len(name) for name in tests) + 2)
    cell = 24
    lines = [f"{'':<{width}}" + "".join(f"{TITLES[m]:>{cell}}" for m in metrics),
             f"{'system':<{width}}" + "".join(f"{'delta  p_boot   p_AR ':>{cell}}" for m in metrics)]
    for name, per_metric in tests.items():
        cells = []
        for metric in metrics:
            test = per_metric[metric]
            marks = ["*" if test[key] < alpha else " " for key in ("p_bootstrap_adjusted", "p_randomization_adjusted")]
            text = (f"{100 * test['delta']:+.2f} {test['p_bootstrap_adjusted']:.3f}{marks[0]}"
                    f" {test['p_randomization_adjusted']:.3f}{marks[1]}")
            cells.append(f"{text:>{cell}}")
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mdsfair-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("systems", nargs="*", metavar="NAME=PATH", help="a system's hypotheses (or fairseq-generate log)")
    parser.add_argument(
        "--ref", action="append", default=[],
        help="reference file, one per line (repeatable); default: the references stored in --data-bin",
    )
    add_reference_source_arguments(parser)
    parser.add_argument("--fast", action="store_true", help="use rouge-score instead of the ROUGE-1.5.5 script")
    parser.add_argument("--measure", choices=["f", "r", "p"], default="f", help="F1 (default), recall or precision")
    parser.add_argument("--sentence-separator", metavar="STR",
                        help="split summaries into sentences on this marker (see mdsfair-rouge)")
    add_convention_argument(parser)
    parser.add_argument("--mixed", action="store_true",
                        help="allow rows of different conventions in one table (they are not like for like)")
    parser.add_argument("--published", metavar="DATASET",
                        help="add the papers' published numbers for this data set (multinews, wcep, multixscience, "
                        "mred, wikisum, arxiv, pubmed, govreport, cnndm) as rows marked 'published'")
    parser.add_argument("--ci", action="store_true", help="95%% bootstrap confidence intervals (clusters resampled)")
    parser.add_argument("--confidence", type=number_between(0, 1, low_inclusive=False, high_inclusive=False), default=0.95, help="confidence level of --ci (default 0.95)")
    parser.add_argument("--samples", type=at_least(1), default=1000,
                        help="bootstrap resamples and randomization samples (default 1000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the resampling (default 1)")
    parser.add_argument("--baseline", metavar="NAME",
                        help="test every other system against this one: paired bootstrap and approximate randomization")
    parser.add_argument("--alpha", type=number_between(0, 1, low_inclusive=False, high_inclusive=False), default=0.05, help="significance level of the marks (default 0.05)")
    parser.add_argument("--correction", choices=["none", "holm", "bonferroni"], default="none",
                        help="family-wise correction across systems x metrics (default none)")
    parser.add_argument("--per-cluster", metavar="FILE", help="write every system's per-cluster R/P/F (.jsonl or .csv)")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the scores, intervals and significance marks (PNG)")
    parser.add_argument("--json", metavar="PATH", help="also write every system's scores (and intervals, tests) as JSON")
    return parser


def _check_arguments(parser: argparse.ArgumentParser, args) -> List:
    systems: List = []
    for spec in args.systems:
        if "=" not in spec or not spec.split("=", 1)[0] or not spec.split("=", 1)[1]:
            parser.error(f"expected NAME=PATH, got {spec!r}")
        name, path = spec.split("=", 1)
        if name in dict(systems):
            parser.error(f"system name {name!r} given twice")
        systems.append((name, path))
    if not systems and not args.published:
        parser.error("give at least one NAME=PATH system (or --published DATASET)")
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    if not 0 < args.alpha < 1:
        parser.error("--alpha must be in (0, 1)")
    if not 0 < args.confidence < 1:
        parser.error("--confidence must be in (0, 1)")
    if args.baseline is not None and args.baseline not in dict(systems):
        parser.error(f"--baseline {args.baseline}: no system of that name (systems: {', '.join(dict(systems)) or 'none'})")
    if args.plot and not args.plot.lower().endswith(".png"):
        parser.error(f"--plot {args.plot}: the file name must end in .png")
    if args.convention is not None:
        from mdsfair.evaluation.conventions import get_convention

        try:
            get_convention(args.convention)
        except RougeInputError as error:
            parser.error(str(error))
    if args.fast and args.convention not in (None, "mdsfair-fast"):
        parser.error(f"--fast is the mdsfair-fast convention; it cannot be combined with --convention {args.convention}")
    return systems


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-compare``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_conventions:
        print(list_conventions())
        return 0
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    systems = _check_arguments(parser, args)
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
                    notes.append(f"{len(hidden)} published rows of {args.published} in other conventions not shown "
                                 "(--mixed shows them)")
        conventions = sorted(({convention} if systems else set()) | {entry["convention"] for _, entry in published})
        if len(conventions) > 1 and not args.mixed:
            raise RougeInputError(
                f"the rows would mix the conventions {', '.join(conventions)}: their numbers are not comparable like "
                "for like; choose one with --convention NAME (published rows of other conventions are then left out) "
                "or pass --mixed"
            )
        for name, path in systems:
            results[name] = score_files(
                path, args.ref, fast=args.fast, sentence_separator=args.sentence_separator, data_bin=args.data_bin,
                split=args.split, expected=args.expected, target_lines=args.target_lines, per_cluster=True,
                convention=convention,
            )
            rows.append({"name": name, "convention": convention, "published": False,
                         "scores": {m: v[args.measure] for m, v in results[name].items()
                                    if m not in ("info", "per_cluster")}})
        counts = {name: result["info"]["num_hypotheses"] for name, result in results.items()}
        if len(set(counts.values())) > 1:
            raise RougeInputError(f"the systems cover different numbers of clusters: {counts}")
        for label, entry in published:
            rows.append({"name": label, "convention": entry["convention"], "published": True,
                         "scores": entry["scores"], "source": f"{entry['paper']}, {entry['table']}",
                         "note": entry["note"]})
        if args.per_cluster and results:
            from mdsfair.evaluation.per_cluster import write_per_cluster

            write_per_cluster(args.per_cluster, results)
    except (RougeInputError, RougeDependencyError, ManifestError, OSError) as error:
        parser.error(str(error))
    metrics = _metrics_of(rows)
    tests = None
    if results and (args.ci or args.baseline):
        from mdsfair.evaluation import significance

        per_cluster = {name: {m: result["per_cluster"][m][args.measure] for m in result["per_cluster"]}
                       for name, result in results.items()}
        if args.ci:
            for row in rows:
                if row["published"]:
                    continue
                names = list(per_cluster[row["name"]])
                bounds = significance.bootstrap_ci([per_cluster[row["name"]][m] for m in names], args.samples,
                                                   args.seed, args.confidence)
                row["ci"] = {m: (float(low), float(high)) for m, (low, high) in zip(names, bounds)}
        if args.baseline:
            tests = significance.compare_to_baseline(per_cluster, args.baseline, args.samples, args.seed,
                                                     args.correction)
    print(format_comparison(rows, metrics, show_ci=args.ci))
    count = next(iter(results.values()))["info"].get("num_hypotheses") if results else None
    footer = f"[{MEASURE_NAMES[args.measure]} x 100"
    if count is not None:
        footer += f"; {count} clusters"
    if args.ci:
        footer += (f"; [low,high]: {100 * args.confidence:g}% percentile bootstrap over clusters, {args.samples} "
                   f"resamples, seed {args.seed}")
    print(footer + "]")
    for row in rows:
        if row["published"]:
            print(f"  published: {row['name']}: {row['source']}" + (f" ({row['note']})" if row.get("note") else ""))
    for note in notes:
        print(f"  note: {note}")
    if tests:
        print()
        print(f"Against the baseline {args.baseline!r} (two-sided; p_boot: paired bootstrap, p_AR: approximate "
              f"randomization; {args.samples} samples, seed {args.seed}; correction: {args.correction}; "
              f"* p < {args.alpha:g}):")
        print(format_tests(tests, [m for m in metrics if m in next(iter(tests.values()))], args.alpha))
    if args.plot:
        from mdsfair.evaluation.conventions import TITLES
        from mdsfair.evaluation.plot import plot_comparison

        caption = (f"{len(rows)} rows; convention{'s' if len(set(r['convention'] for r in rows)) > 1 else ''}: "
                   f"{', '.join(sorted(set(r['convention'] for r in rows)))}")
        if args.ci:
            caption += f"; bars: {100 * args.confidence:g}% bootstrap CI ({args.samples} resamples)"
        if tests:
            caption += (f"; * approximate randomization p < {args.alpha:g} vs {args.baseline} "
                        f"(correction: {args.correction})")
        try:
            plot_comparison(args.plot, rows, metrics, TITLES, MEASURE_NAMES[args.measure], args.baseline, tests,
                            args.alpha, caption)
        except OSError as error:
            parser.error(f"--plot {args.plot}: {error}")
    if args.json:
        write_json_atomic(args.json, {
            "systems": results, "rows": rows, "tests": tests, "baseline": args.baseline,
            "settings": {"measure": args.measure, "samples": args.samples, "seed": args.seed, "alpha": args.alpha,
                         "correction": args.correction, "confidence": args.confidence, "convention": convention},
        }, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
