"""``mdsfair-human-eval``: blind human-evaluation sheets for N clusters and K
systems, and the systems' scores from the completed sheets.

* ``mdsfair-human-eval export NAME=FILE ... --references REF --out DIR``
  writes ``DIR/best-worst/sheet-NN.csv`` (Best-Worst Scaling, Liu & Lapata
  2019 Sec. 5) or ``DIR/rating/sheet-NN.csv`` (1-5 ratings, Ma et al. 2022
  Sec. IV-D), one per annotator, with ``--questions`` the QA protocol's
  ``DIR/qa/sheet-NN.csv``, and ``DIR/key.json`` (which summary is which
  system). The sheets and their checks: :mod:`mdsfair.evaluation.human_eval_sheets`.
* ``mdsfair-human-eval score DIR`` reads the completed sheets back and prints
  each system's score with a bootstrap confidence interval over clusters
  (:mod:`mdsfair.evaluation.human_eval_scores`), and with ``--baseline`` each
  other system's difference from it and the paired bootstrap's p-value;
  ``--json`` writes them.

The summaries are read as ``mdsfair-compare`` reads them: a plain file (one
summary per line) or a fairseq-generate log
(:func:`mdsfair.evaluation.hypotheses.read_hypotheses`), one per cluster of
the references file.

Pure Python at start-up (numpy only for the intervals; no torch / fairseq).
"""

import argparse
import os
import sys
from typing import Dict, List, Optional, Sequence

from mdsfair.argument_types import at_least, check_output_paths, number_between, output_folder_problem
from mdsfair.evaluation.human_eval_sheets import (
    CRITERION_QUESTIONS,
    DEFAULT_CRITERIA,
    KEY_NAME,
    PROTOCOLS,
    RATING_SCALE,
    ExportInputs,
    export_sheets,
    read_questions,
)
from mdsfair.evaluation.inputs import RougeInputError, read_lines

PROG = "mdsfair-human-eval"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="{export,score}")
    export = commands.add_parser("export", help="write blind, randomised sheets and their key")
    export.add_argument(
        "systems", nargs="+", metavar="NAME=FILE", help="a system's summaries (one per line, or a fairseq-generate log)"
    )
    export.add_argument(
        "--references", required=True, metavar="FILE", help="the gold summaries, one per line (line i = cluster i)"
    )
    export.add_argument(
        "--sources", metavar="FILE", help="the clusters' source text, one per line, shown to the judges (optional)"
    )
    export.add_argument(
        "--hide-references",
        action="store_true",
        help="leave the gold summary off the best-worst / rating sheets (Liu & Lapata showed it; QA sheets never do)",
    )
    export.add_argument("--out", required=True, metavar="DIR", help="folder for the sheets and key.json (created)")
    export.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="best-worst",
        help="best-worst: pick the best and worst of --tuple-size summaries (Liu & Lapata 2019); rating: score "
        "each summary 1-5 per criterion (Ma et al. 2022) (default best-worst)",
    )
    export.add_argument(
        "--criteria",
        nargs="+",
        metavar="NAME",
        help="one judgment per criterion (default: best-worst 'overall', taking informativeness, fluency and "
        "succinctness into account, as Liu & Lapata; rating: fluency conciseness informativeness, as Ma et al.)",
    )
    export.add_argument(
        "--clusters", type=at_least(1), metavar="N", help="judge N clusters drawn with --seed (default: all)"
    )
    export.add_argument(
        "--tuple-size",
        type=at_least(2),
        metavar="T",
        help="summaries per best-worst item; every T-subset of the systems is an item (default min(3, K))",
    )
    export.add_argument(
        "--annotators", type=at_least(1), default=1, help="sheets to write, one per annotator (default 1)"
    )
    export.add_argument(
        "--questions",
        metavar="FILE.jsonl",
        help='QA protocol: one line per cluster, {"cluster": i, "questions": [{"question": ..., "answer": ...}]}',
    )
    export.add_argument("--seed", type=at_least(0), default=1, help="seed of the cluster draw and orders (default 1)")

    score = commands.add_parser("score", help="score the systems from completed sheets")
    score.add_argument("folder", metavar="DIR", help="the folder export wrote, its sheets completed")
    score.add_argument(
        "--confidence",
        type=number_between(0, 1, low_inclusive=False, high_inclusive=False),
        default=0.95,
        help="confidence level of the bootstrap intervals (default 0.95)",
    )
    score.add_argument("--samples", type=at_least(1), default=1000, help="bootstrap resamples (default 1000)")
    score.add_argument("--seed", type=at_least(0), default=1, help="seed of the resampling (default 1)")
    score.add_argument("--no-ci", action="store_true", help="scores only, no bootstrap intervals")
    score.add_argument(
        "--baseline",
        metavar="NAME",
        help="test every other system against this one: the paired bootstrap over clusters (delta and p)",
    )
    score.add_argument(
        "--correction",
        choices=["none", "holm", "bonferroni"],
        default="none",
        help="family-wise correction of the p-values across systems x criteria (default none)",
    )
    score.add_argument("--json", metavar="PATH", help="also write the scores as JSON")
    return parser


def parse_systems(parser: argparse.ArgumentParser, specs: Sequence[str]) -> Dict[str, str]:
    systems: Dict[str, str] = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        if not name or not path:
            parser.error(f"expected NAME=FILE, got {spec!r}")
        if name in systems:
            parser.error(f"system {name!r} given twice")
        systems[name] = path
    return systems


def read_export_inputs(systems: Dict[str, str], references_path: str, sources_path: Optional[str]) -> ExportInputs:
    """The summaries of every system, one per cluster of the references file."""
    from mdsfair.evaluation.hypotheses import check_hypothesis_ids, read_hypotheses

    references = read_lines(references_path)
    if not references:
        raise RougeInputError(f"references file {references_path} is empty (0 lines)")
    why = f"{references_path} has {len(references)} references"
    summaries = {}
    for name, path in systems.items():
        hypotheses = read_hypotheses(path, [references_path], None, None, None, None, False, {})
        check_hypothesis_ids(hypotheses.ids, len(hypotheses.texts), len(references), path, why)
        ids = hypotheses.ids if hypotheses.ids is not None else range(len(hypotheses.texts))
        by_cluster = dict(zip(ids, hypotheses.texts))
        summaries[name] = [by_cluster[cluster] for cluster in range(len(references))]
    sources = None
    if sources_path is not None:
        sources = read_lines(sources_path)
        if len(sources) != len(references):
            raise RougeInputError(f"{sources_path} has {len(sources)} lines but {why}")
    return ExportInputs(summaries, references, sources)


def run_export(parser: argparse.ArgumentParser, args) -> int:
    systems = parse_systems(parser, args.systems)
    criteria = args.criteria or list(DEFAULT_CRITERIA[args.protocol])
    if len(set(criteria)) != len(criteria) or not all(name.isidentifier() for name in criteria):
        parser.error(f"--criteria {' '.join(criteria)}: each criterion once, a word of letters, digits or _")
    tuple_size = args.tuple_size or min(3, len(systems))
    if args.protocol == "best-worst" and len(systems) < 2:
        parser.error("best-worst needs at least 2 systems (--protocol rating judges one alone)")
    if args.protocol == "best-worst" and not 2 <= tuple_size <= len(systems):
        parser.error(f"--tuple-size {tuple_size}: best-worst needs 2..{len(systems)} (the systems given) per item")
    problem = output_folder_problem("--out", args.out)
    if problem is None and os.path.exists(os.path.join(args.out, KEY_NAME)):
        problem = f"--out {args.out}: holds a {KEY_NAME} already (sheets that may be filled in); choose a new folder"
    if problem is not None:
        parser.error(problem)
    inputs = read_export_inputs(systems, args.references, args.sources)
    if args.hide_references:
        inputs.references = None
    total = len(next(iter(inputs.systems.values())))
    questions = read_questions(args.questions, total) if args.questions else None
    key = export_sheets(
        inputs, args.out, args.protocol, criteria, args.clusters, args.annotators, args.seed, tuple_size, questions
    )
    items = len(next(iter(key["sheets"].values())))
    print(
        f"{args.protocol}: {len(key['sheets'])} sheet(s) of {items} items each: {len(key['clusters'])} of "
        f"{key['total_clusters']} clusters (seed {args.seed}: {', '.join(map(str, key['clusters']))}) x "
        f"{len(systems)} systems; criteria: "
        + "; ".join(f"{name} ({CRITERION_QUESTIONS.get(name, 'as you define it')})" for name in criteria)
    )
    if key.get("qa_sheets"):
        print(f"qa: {len(key['qa_sheets'])} sheet(s), {len(questions)} clusters with questions")
        undrawn = sorted(set(questions) - set(key["clusters"]))
        if undrawn:
            print(
                f"note: {args.questions} has questions for clusters the {args.protocol} sheets do not hold "
                f"({', '.join(map(str, undrawn))}); Liu & Lapata asked both on the same clusters"
            )
    print(f"key: {os.path.join(args.out, KEY_NAME)} (keep it from the judges)")
    return 0


def format_table(heading: str, result: Dict, ci: Optional[float], digits: int, counted: str) -> List[str]:
    """One measure's table: system, score, interval, best/worst (best-worst
    only), judgments; best first. With intervals, the sample-size notes of
    :func:`mdsfair.evaluation.significance.sample_size_problem` follow."""
    from mdsfair.evaluation.significance import SMALL_SAMPLE_CLUSTERS, sample_size_problem

    entries = result["systems"]
    has_counts = any("best" in entry for entry in entries.values())
    has_tests = any("p" in entry for entry in entries.values())
    header = ["system", "score"] + ([f"{ci:.0%} CI"] if ci else []) + (["best", "worst"] if has_counts else [])
    rows = [header + [counted] + (["delta", "p"] if has_tests else [])]
    for name, entry in sorted(entries.items(), key=lambda pair: -pair[1]["score"]):
        row = [name, f"{entry['score']:.{digits}f}"]
        if ci:
            row.append("-" if entry["low"] is None else f"[{entry['low']:.{digits}f}, {entry['high']:.{digits}f}]")
        if has_counts:
            row += [str(entry["best"]), str(entry["worst"])]
        row.append(str(entry["judgments"]))
        if has_tests:
            row += [f"{entry['delta']:+.{digits}f}", f"{entry['p_adjusted']:.4f}"] if "p" in entry else ["-", "-"]
        rows.append(row)
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [f"{heading}: {result['clusters']} clusters"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    if ci:
        lines += [f"note: {warning}" for warning in sample_size_problem(result["clusters"], tests=False)[1]]
    if has_tests and result["clusters"] < SMALL_SAMPLE_CLUSTERS:
        lines.append(
            f"note: only {result['clusters']} clusters: below {SMALL_SAMPLE_CLUSTERS} the paired bootstrap's "
            "p-values are too small (it treats the clusters' spread as known); read them with care"
        )
    return lines


def adjust_pvalues(report: Dict, protocols: Sequence[str], correction: str) -> None:
    """Set every test's ``p_adjusted``: the p-values of all systems x
    criteria (and QA) as one family, corrected by
    :func:`mdsfair.evaluation.significance.adjust_pvalues` (``none``: as they are)."""
    entries = [
        entry
        for protocol in protocols
        for result in ([report.get("qa")] if protocol == "qa" else report[protocol].values())
        if result
        for entry in result["systems"].values()
        if "p" in entry
    ]
    if not entries:
        return
    from mdsfair.evaluation.significance import adjust_pvalues as adjust

    for entry, adjusted in zip(entries, adjust([entry["p"] for entry in entries], correction)):
        entry["p_adjusted"] = float(adjusted)


def run_score(args) -> int:
    from mdsfair.data.manifest import write_json_atomic
    from mdsfair.evaluation.human_eval_scores import read_judgments, read_key, score_judgments

    key = read_key(args.folder)
    main, qa = read_judgments(args.folder, key)
    if args.baseline is not None and args.baseline not in key["systems"]:
        raise RougeInputError(f"--baseline {args.baseline}: not a system of {KEY_NAME} ({', '.join(key['systems'])})")
    options = dict(
        samples=args.samples,
        seed=args.seed,
        confidence=args.confidence,
        intervals=not args.no_ci,
        baseline=args.baseline,
    )
    ci = None if args.no_ci else args.confidence
    report = {"protocol": key["protocol"], "confidence": ci, "baseline": args.baseline, "correction": args.correction}
    report["incomplete"] = {}
    report[key["protocol"]] = score_judgments(main, key["systems"], 1.0, **options)
    if qa is not None:
        report["qa"] = score_judgments(qa, key["systems"], 100.0, **options).get("qa")
    adjust_pvalues(report, [key["protocol"], "qa"], args.correction)
    lines = []
    for criterion, result in report[key["protocol"]].items():
        if key["protocol"] == "best-worst":
            heading = f"Best-Worst Scaling, {criterion} ((best - worst) / judgments, -1..1)"
        else:
            heading = f"Rating, {criterion} (mean, {RATING_SCALE[0]}..{RATING_SCALE[1]})"
        lines += format_table(heading, result, ci, 3, "judgments")
    if report.get("qa"):
        heading = "QA (mean question score in %: 1 correct, 0.5 partially correct, 0 otherwise)"
        lines += format_table(heading, report["qa"], ci, 2, "questions")
    if args.baseline is not None:
        lines.append(
            f"delta, p: against {args.baseline}, paired bootstrap over clusters ({args.samples} resamples); "
            f"correction {args.correction}"
        )
    for judgments in (main, qa):
        for sheet, items in (judgments.incomplete if judgments else {}).items():
            report["incomplete"][sheet] = items
            lines.append(
                f"{sheet}: {len(items)} incomplete item(s) left out ({', '.join(items[:10])}"
                f"{', ...' if len(items) > 10 else ''})"
            )
    print("\n".join(lines))
    if args.json:
        write_json_atomic(args.json, report, trailing_newline=True, indent=1, ensure_ascii=False)
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-human-eval``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "score" and args.json:
        problem = check_output_paths([("--json", args.json)])
        if problem:
            parser.error(problem)
    try:
        return run_export(parser, args) if args.command == "export" else run_score(args)
    except (RougeInputError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(cli_main())
