"""``mdsfair-rouge``: files2rouge-compatible official ROUGE, or a fast scorer, of one system.

Command line (``mdsfair-rouge`` or ``python -m mdsfair.evaluation.rouge``)::

    mdsfair-rouge HYP REF                      # official ROUGE-1.5.5
    mdsfair-rouge HYP --ref a.txt --ref b.txt  # several references
    mdsfair-rouge generate.log                 # fairseq-generate output, references from its data-bin
    mdsfair-rouge HYP --data-bin DIR --split test   # plain hypotheses, references from a data-bin
    mdsfair-rouge HYP REF --fast               # rouge-score + our ROUGE-SU4

HYP is one hypothesis per line or a fairseq-generate log; REF files are
parallel to it (several files: several references per cluster; positional
REF arguments and repeated ``--ref`` alike), else the references are the
data-bin's stored summaries. What is read and checked, and how:
:mod:`mdsfair.evaluation.file_scoring`; the numbers (``--fast``,
``--multi-ref-mode``, Unicode NFC): :mod:`mdsfair.evaluation.scoring`; a
paper's scorer and settings (``--convention``):
:mod:`mdsfair.evaluation.conventions`. The table shows F1 (or ``--measure``)
x100; ``--json`` writes every score as a fraction in [0, 1] and
``--per-cluster`` every cluster's (:mod:`mdsfair.evaluation.per_cluster`).
"""

import argparse
import logging
import sys
from typing import Optional, Sequence

from mdsfair.argument_types import at_least, check_output_paths
from mdsfair.evaluation.file_scoring import MAX_SUMMARY_WORDS, load_scoring_inputs, score_inputs
from mdsfair.evaluation.model_metrics import add_model_metric_arguments, add_model_metrics, wants_model_metrics
from mdsfair.evaluation.score_table import format_table
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


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mdsfair-rouge``."""
    parser = argparse.ArgumentParser(
        prog="mdsfair-rouge",
        description=(
            "files2rouge-compatible ROUGE (official ROUGE-1.5.5, or --fast rouge-score) "
            "reporting R-1, R-2, R-L, R-Lsum and R-SU4."
        ),
    )
    parser.add_argument(
        "hyp",
        help="hypotheses, one per line, or a fairseq-generate log (D-/H- lines, sorted by id)",
    )
    parser.add_argument(
        "refs",
        nargs="*",
        metavar="REF",
        help="reference file(s), one reference per line, parallel to HYP; several files = "
        "several references per hypothesis (default: the references stored in --data-bin)",
    )
    parser.add_argument(
        "--ref",
        action="append",
        default=[],
        dest="extra_refs",
        metavar="REF",
        help="another reference file (repeatable; same as a positional REF)",
    )
    add_reference_source_arguments(parser)
    parser.add_argument(
        "--fast",
        action="store_true",
        help="score with rouge-score (+ a Python ROUGE-SU4) instead of the ROUGE-1.5.5 Perl script",
    )
    parser.add_argument(
        "--measure",
        choices=["f", "r", "p", "all"],
        default="f",
        help="what the table shows: F1 (default), recall, precision, or all three",
    )
    parser.add_argument("--json", metavar="PATH", help="also write all scores (fractions in [0, 1]) as JSON here")
    parser.add_argument(
        "--max-summary-words",
        type=at_least(1),
        default=MAX_SUMMARY_WORDS,
        metavar="N",
        help=f"refuse, before scoring, a hypothesis or reference of more than N words: ROUGE's memory and time "
        f"grow with the square of a summary's length (default: {MAX_SUMMARY_WORDS:,})",
    )
    parser.add_argument(
        "--per-cluster",
        metavar="FILE",
        help="write every cluster's R/P/F per metric here, by cluster id: JSONL (FILE.jsonl) or CSV (FILE.csv) "
        "(also added to --json); see docs/evaluation.md for how their mean relates to the reported average",
    )
    add_convention_argument(parser)
    parser.add_argument(
        "--sentence-separator",
        metavar="STR",
        help="split summaries into sentences on this marker (e.g. '<q>') instead of the rule-based splitter",
    )
    parser.add_argument(
        "--no-stemming",
        action="store_true",
        help="turn off Porter stemming (files2rouge -nm); stemming is on by default as in files2rouge",
    )
    parser.add_argument(
        "--multi-ref-mode",
        choices=["average", "best"],
        default="average",
        help="official scorer, several references: pool counts over references (-f A, default) "
        "or take the best reference (-f B); --fast always takes the best F1 per metric",
    )
    parser.add_argument(
        "--resamples",
        type=at_least(1),
        default=1000,
        help="official scorer: bootstrap resamples (-r, files2rouge: 1000); the script's confidence "
        "intervals and its reported averages are computed over these resamples",
    )
    parser.add_argument(
        "--gpt2-encoder-json",
        metavar="PATH",
        help="GPT-2 encoder.json, to decode GPT-2 BPE ids in a fairseq-generate log",
    )
    parser.add_argument(
        "--gpt2-vocab-bpe", metavar="PATH", help="GPT-2 vocab.bpe, to decode GPT-2 BPE ids in a fairseq-generate log"
    )
    parser.add_argument(
        "--keep-rouge-files",
        metavar="DIR",
        help="official scorer: write the SPL files and ROUGE configurations into DIR and keep them",
    )
    add_model_metric_arguments(parser)
    return parser


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-rouge``; returns the exit status."""
    parser = build_parser()
    args = parse_scoring_arguments(parser, argv)
    if args is None:
        return 0
    if args.resamples < 1:
        parser.error("--resamples must be at least 1")
    if args.fast and args.multi_ref_mode != "average":
        logger.warning("--multi-ref-mode only applies to the official scorer; --fast takes the best F1")
    problem = check_output_paths(
        [("--json", args.json), ("--per-cluster", args.per_cluster)], inputs=[args.hyp, *args.refs, *args.extra_refs]
    )
    if problem is not None:
        parser.error(problem)
    try:
        if args.per_cluster:
            from mdsfair.evaluation.per_cluster import per_cluster_format

            per_cluster_format(args.per_cluster)
        if args.convention:
            check_convention_choice(args.convention, args.fast)
        inputs = load_scoring_inputs(
            args.hyp,
            list(args.refs) + list(args.extra_refs),
            args.gpt2_encoder_json,
            args.gpt2_vocab_bpe,
            max_summary_words=args.max_summary_words,
            **reference_source(args),
        )
        result = score_inputs(
            inputs,
            fast=args.fast,
            sentence_separator=args.sentence_separator,
            stemming=not args.no_stemming,
            multi_ref_mode=args.multi_ref_mode,
            resamples=args.resamples,
            keep_files=args.keep_rouge_files,
            per_cluster=bool(args.per_cluster),
            convention=args.convention,
        )
        if wants_model_metrics(args):
            add_model_metrics(result, inputs.hypotheses, inputs.references, args, per_cluster=bool(args.per_cluster))
        if args.per_cluster:
            from mdsfair.evaluation.per_cluster import write_per_cluster

            write_per_cluster(args.per_cluster, {args.hyp: result})
    except SCORING_ERRORS as error:
        parser.error(str(error))
    measures = ("f", "r", "p") if args.measure == "all" else (args.measure,)
    print(format_table(result, measures))
    if args.json:
        write_json_output(parser, args.json, result, trailing_newline=True)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
