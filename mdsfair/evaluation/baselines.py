"""``mdsfair-baseline``: the extractive baselines of
:mod:`mdsfair.evaluation.extractive_baselines` (Lead, LexRank, TextRank, MMR,
greedy oracle) on raw-contract JSONL clusters, one summary per line::

    mdsfair-baseline --method lead|lexrank|textrank|mmr|oracle|summpip INPUT.jsonl -o OUT.txt

and SummPip (:mod:`mdsfair.evaluation.summpip`), which fuses clusters of
sentences into new ones (its flags: ``--summpip-*``).

LexRank, TextRank and MMR rank sentences or, with ``--unit paragraph``, whole
paragraphs. The length of Lead and of those three is a sentence count
(``--lead-sentences``, ``--num-sentences``; three by default), a word budget (``--lead-tokens W`` /
``--max-words W``), a data set's budget (``--budget-preset multinews``) or
each cluster's own reference length (``--budget-from-reference``, an oracle
length, labelled as such in the output); ``--score`` prints ROUGE of the
summaries against the clusters' references.

Three-sentence Lead, the default without a budget, suits CNN/DailyMail-length
summaries, not multi-document ones (a Multi-News reference has ~264 words).
:data:`BUDGET_PRESETS` gives one word budget per data set, with where each
number comes from; an oracle length uses the reference, so its scores are not
those of a system that could run without it.
"""

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from mdsfair.argument_types import at_least, check_output_paths, number_between
from mdsfair.data.manifest import atomic_text_file
from mdsfair.evaluation.extractive_baselines import (
    DEFAULT_NUM_SENTENCES,
    LEAD_ORDERS,
    MMR_LAMBDA,
    TEXT_UNITS,
    TEXTRANK_TOLERANCE,
    greedy_oracle,
    lead,
    lexrank,
    mmr,
    read_clusters,
    reference_summaries,
    reference_word_budget,
    textrank,
)
from mdsfair.evaluation.summpip import (
    add_summpip_arguments,
    summpip_argument_problem,
    summpip_from_args,
    summpip_length_description,
)
from mdsfair.raw_contract import InputFormatError
from mdsfair.text import split_sentences

logger = logging.getLogger(__name__)

METHODS = ("lead", "lexrank", "textrank", "mmr", "oracle", "summpip")
RANKING_METHODS = ("lexrank", "textrank", "mmr")  # the methods that take --unit, --num-sentences and --max-words


@dataclass(frozen=True)
class BudgetPreset:
    """A data set's word budget for Lead and LexRank, and where the number comes from."""

    dataset: str
    words: int
    source: str


# Per-data-set word budgets (``--budget-preset``). Each ``source`` says what the
# number is and where it was read; where no source states a budget for the
# extractive baselines, the budget is the data set's mean reference length.
BUDGET_PRESETS: Dict[str, BudgetPreset] = {
    "multinews": BudgetPreset(
        "Multi-News",
        264,
        "mean reference length, 263.66 words (Fabbri et al. 2019, Table 3; quoted by Ma et al. 2022, "
        "Sec. IV-A). No source read states a word budget for the paper's Lead, which is First-k (the first "
        "k sentences of every article); the authors' released lexrank.py and textrank.py "
        "(github.com/Alex-Fabbri/Multi-News, code/extractive_code) stop at the sentence that reaches "
        "500 words, their mmr_summarizer.py at 100",
    ),
    "wcep": BudgetPreset(
        "WCEP",
        40,
        "the authors' extractive baselines: max_len=40, len_type='words' (github.com/complementizer/"
        "wcep-mds-dataset, experiments/baselines.py defaults and the README's settings); they skip a "
        "sentence that would exceed 40 words, mdsfair cuts it at the 40th word",
    ),
    "multixscience": BudgetPreset(
        "Multi-XScience",
        116,
        "mean related-work length, 116.44 words (github.com/yaolu/Multi-XScience README, Lu et al. 2020; "
        "Ma et al. 2022 quote 116). No source read states a budget for its extractive baselines",
    ),
    "wikisum": BudgetPreset(
        "WikiSum",
        139,
        "mean target length, 139.4 tokens (Liu & Lapata 2019, Sec. 4, which does not say whether words or "
        "subword pieces). Their Lead (title + ranked paragraphs) and LexRank take each cluster's own "
        "target length instead, an oracle: --budget-from-reference (with --lead-title for the Lead)",
    ),
    "peersum": BudgetPreset(
        "PeerSum",
        113,
        "no source read states a budget or the mean meta-review length (the PeerSum README and dataset "
        "card give none); 112.8 words is the mean over the 90 meta-reviews of the PeerSum sample in "
        "../shared/data/peersum_sample",
    ),
}


def cluster_word_budget(cluster: Mapping, args: argparse.Namespace) -> Optional[int]:
    """The word budget of one cluster under the command line's length options (None: a sentence count)."""
    if args.budget_from_reference:
        return reference_word_budget(cluster)
    if args.budget_preset is not None:
        return BUDGET_PRESETS[args.budget_preset].words
    return args.lead_tokens if args.method == "lead" else args.max_words


def length_description(args: argparse.Namespace) -> str:
    """How long the summaries are, as printed with them (an oracle length says so)."""
    if args.method == "summpip":
        return summpip_length_description(args)
    if args.method == "oracle":
        limit = args.oracle_max_sentences
        return "until ROUGE stops improving" + (f", at most {limit} sentences" if limit else "")
    if args.budget_from_reference:
        return "ORACLE LENGTH: each cluster's word budget is its reference's word count"
    if args.budget_preset is not None:
        preset = BUDGET_PRESETS[args.budget_preset]
        return f"{preset.words} words (--budget-preset {args.budget_preset})"
    words = args.lead_tokens if args.method == "lead" else args.max_words
    if words is not None:
        return f"{words} words"
    sentences = args.lead_sentences if args.method == "lead" else args.num_sentences
    units = "paragraphs" if args.method in RANKING_METHODS and args.unit == "paragraph" else "sentences"
    return f"{sentences or DEFAULT_NUM_SENTENCES} {units}"


def summarize_cluster(cluster: Mapping, args: argparse.Namespace) -> List[str]:
    """Run the baseline chosen on the command line on one cluster."""
    if args.method == "summpip":
        return summpip_from_args(cluster, args)
    if args.method == "lead":
        budget = cluster_word_budget(cluster, args)
        return lead(
            cluster,
            num_sentences=None if budget is not None else args.lead_sentences,
            num_tokens=budget,
            order=args.lead_order,
            include_title=args.lead_title,
        )
    if args.method in RANKING_METHODS:
        length = {
            "num_sentences": args.num_sentences or DEFAULT_NUM_SENTENCES,
            "max_words": cluster_word_budget(cluster, args),
            "unit": args.unit,
        }
        if args.method == "lexrank":
            return lexrank(
                cluster,
                threshold=args.threshold,
                damping=args.damping,
                weighted=args.weighted,
                redundancy_threshold=args.redundancy_threshold,
                **length,
            )
        if args.method == "textrank":
            return textrank(cluster, damping=args.damping, tolerance=args.textrank_tolerance, **length)
        return mmr(cluster, trade_off=args.mmr_lambda, **length)
    return greedy_oracle(cluster, max_sentences=args.oracle_max_sentences, stemming=not args.no_stemming)


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mdsfair-baseline``."""
    parser = argparse.ArgumentParser(
        prog="mdsfair-baseline",
        description="Extractive baselines (Lead, LexRank, TextRank, MMR, greedy oracle) on raw-contract JSONL "
        "clusters; writes one summary per line.",
    )
    parser.add_argument("input", help="raw-contract JSONL: one {id, documents, summary[, title]} object per line")
    parser.add_argument("-o", "--output", required=True, help="output file: one summary per line, in input order")
    parser.add_argument("--method", choices=METHODS, required=True, help="which baseline to run")
    parser.add_argument(
        "--separator",
        default=" ",
        help="string placed between the sentences of a summary (default: one space; must not contain a newline)",
    )
    budget_group = parser.add_argument_group(
        "word budget of lead, lexrank, textrank and mmr",
        "a word is a whitespace-separated token; the sentence that crosses the budget is cut at the word",
    )
    budget_choice = budget_group.add_mutually_exclusive_group()
    budget_choice.add_argument(
        "--budget-preset",
        choices=sorted(BUDGET_PRESETS),
        help="the data set's word budget: "
        + ", ".join(f"{name} {preset.words}" for name, preset in sorted(BUDGET_PRESETS.items()))
        + " (sources in the README and BUDGET_PRESETS); replaces --lead-sentences/--lead-tokens and "
        "--num-sentences/--max-words",
    )
    budget_choice.add_argument(
        "--budget-from-reference",
        action="store_true",
        help="ORACLE length: each cluster's budget is its reference's word count (mean over several "
        "references); uses the reference, labelled as an oracle in the output",
    )
    lead_group = parser.add_argument_group("lead")
    lead_limit = lead_group.add_mutually_exclusive_group()
    lead_limit.add_argument(
        "--lead-sentences",
        type=at_least(1),
        help=f"lead: number of sentences (default {DEFAULT_NUM_SENTENCES} without a word budget)",
    )
    lead_limit.add_argument(
        "--lead-tokens",
        type=at_least(1),
        help="lead: word budget instead: exactly the first N words of the reading order (last sentence cut at the word)",
    )
    lead_group.add_argument(
        "--lead-order",
        choices=LEAD_ORDERS,
        default="sequential",
        help="lead: document after document, or one sentence of each document in turn",
    )
    lead_group.add_argument(
        "--lead-title",
        action="store_true",
        help="lead: put the cluster's title first (Liu & Lapata 2019's WikiSum Lead: title + ranked paragraphs)",
    )
    lexrank_group = parser.add_argument_group("lexrank, textrank and mmr")
    lexrank_group.add_argument(
        "--num-sentences",
        type=at_least(1),
        help="lexrank, textrank, mmr: sentences (paragraphs with --unit paragraph) to select without a word "
        f"budget (default {DEFAULT_NUM_SENTENCES})",
    )
    lexrank_group.add_argument(
        "--max-words",
        type=at_least(1),
        help="lexrank, textrank, mmr: word budget instead of --num-sentences (last sentence cut at the word)",
    )
    lexrank_group.add_argument(
        "--unit",
        choices=TEXT_UNITS,
        default="sentence",
        help="lexrank, textrank, mmr: rank sentences, or whole paragraphs (blank-line separated), as Liu & "
        "Lapata 2019 rank WikiSum's paragraphs (default: sentence)",
    )
    lexrank_group.add_argument(
        "--threshold",
        type=number_between(0, 1, high_inclusive=False),
        default=0.1,
        help="lexrank: cosine threshold for a graph edge (default 0.1, Erkan & Radev)",
    )
    lexrank_group.add_argument(
        "--damping",
        type=number_between(0, 1, low_inclusive=False, high_inclusive=False),
        default=0.85,
        help="lexrank and textrank: PageRank damping factor (default 0.85)",
    )
    lexrank_group.add_argument(
        "--weighted", action="store_true", help="lexrank: weight edges by similarity (continuous LexRank)"
    )
    lexrank_group.add_argument(
        "--redundancy-threshold",
        type=number_between(0, 1, low_inclusive=False),
        help="lexrank: skip sentences whose cosine similarity to a chosen one exceeds this (off by default)",
    )
    lexrank_group.add_argument(
        "--textrank-tolerance",
        type=number_between(0, 1, low_inclusive=False, high_inclusive=False),
        default=TEXTRANK_TOLERANCE,
        help="textrank: stop the power iteration when no sentence's score changes by this much "
        f"(default {TEXTRANK_TOLERANCE:g})",
    )
    lexrank_group.add_argument(
        "--mmr-lambda",
        type=number_between(0, 1),
        default=MMR_LAMBDA,
        help="mmr: weight of relevance to the cluster centroid against redundancy with the sentences already "
        f"chosen, lambda of Carbonell & Goldstein 1998 (default {MMR_LAMBDA:g}, the value of the Multi-News "
        "authors' mmr_summarizer.py)",
    )
    add_summpip_arguments(parser)
    oracle_group = parser.add_argument_group("oracle")
    oracle_group.add_argument(
        "--oracle-max-sentences",
        type=at_least(1),
        help="oracle: stop after this many sentences (default: when ROUGE stops improving)",
    )
    oracle_group.add_argument("--no-stemming", action="store_true", help="oracle and --score: no Porter stemming")
    parser.add_argument(
        "--score",
        nargs="?",
        const="official",
        choices=["official", "fast"],
        help="also print ROUGE of the summaries against the JSONL references "
        "(official ROUGE-1.5.5 by default, or 'fast' for rouge-score)",
    )
    return parser


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-baseline``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if "\n" in args.separator:
        parser.error("--separator must not contain a newline (one summary per line)")
    for name in ("lead_sentences", "lead_tokens", "num_sentences", "max_words", "oracle_max_sentences"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    budget_flag = (
        "--budget-preset" if args.budget_preset else "--budget-from-reference" if args.budget_from_reference else None
    )
    if args.method == "summpip":
        problem = summpip_argument_problem(args, budget_flag)
        if problem is not None:
            parser.error(problem)
    if budget_flag is not None:
        if args.method == "oracle":
            parser.error(
                f"{budget_flag} applies to lead, lexrank, textrank and mmr; the oracle stops when ROUGE stops improving"
            )
        own = ("lead_sentences", "lead_tokens") if args.method == "lead" else ("num_sentences", "max_words")
        given = [f"--{name.replace('_', '-')}" for name in own if getattr(args, name) is not None]
        if given:
            parser.error(f"{budget_flag} sets the length; it cannot be combined with {' / '.join(given)}")
    problem = check_output_paths([("-o/--output", args.output)], inputs=[args.input])
    if problem is not None:
        parser.error(problem)
    try:
        clusters = read_clusters(args.input)
    except (InputFormatError, OSError) as error:
        parser.error(str(error))
    if not clusters:
        parser.error(f"{args.input} holds no clusters")
    summaries = []
    for cluster in clusters:
        try:
            sentences = summarize_cluster(cluster, args)
        except ValueError as error:
            parser.error(f"{args.input}, cluster {cluster['id']!r}: {error}")
        sentences = [" ".join(sentence.split()) for sentence in sentences]
        if not sentences:
            logger.warning("cluster %r: the %s baseline produced an empty summary", cluster["id"], args.method)
        summaries.append(sentences)
    try:
        with atomic_text_file(args.output) as handle:  # no partial file on an error or Ctrl-C
            for sentences in summaries:
                handle.write(args.separator.join(sentences) + "\n")
    except OSError as error:
        parser.error(f"-o/--output {args.output}: {error.strerror or error}")
    length = length_description(args)
    print(f"wrote {len(summaries)} {args.method} summaries ({length}) to {args.output}", file=sys.stderr)
    if args.score:
        from mdsfair.evaluation.inputs import RougeInputError
        from mdsfair.evaluation.rouge155 import RougeDependencyError
        from mdsfair.evaluation.score_table import format_table
        from mdsfair.evaluation.scoring import score_sentences

        references = [[split_sentences(text) for text in reference_summaries(c)] for c in clusters]
        try:
            result = score_sentences(summaries, references, fast=args.score == "fast", stemming=not args.no_stemming)
        except (RougeInputError, RougeDependencyError) as error:
            parser.error(f"--score: {error}")
        print(f"{args.method} ({length})")
        print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
