"""``mdsfair-synth``: a deterministic synthetic multi-document summarization data set.

The data set lives in a small closed world that is fully determined by a seed:
a pool of invented topic entities (each with a fixed type such as *bridge* or
*festival*), invented cities and organisations, and small pools of people,
awards and numeric values.

A *cluster* is about one topic entity with ``K`` facts (4-6 by default) drawn
afresh for every cluster; its relevant documents state the facts, spread over
several documents and repeated across them, among filler sentences and
sentences about other entities, and its distractor documents are about other
entities only (:mod:`mdsfair.preprocess.synthetic_clusters`).

The reference summary states every topic fact exactly once, in a fixed
canonical order and with canonical templates that differ from the document
templates (``"Varnel is a suspension bridge in Calden. It was opened to
traffic in 1987. ..."``). A summarizer therefore has to select the topic
facts, fuse them across documents, drop duplicates and rewrite them in the
canonical form; extracting leading or central sentences (Lead, LexRank)
scores far below that (see :func:`mdsfair.preprocess.synthetic_report.baseline_gap_report`).

Files follow the raw contract of the pipeline: one cluster per JSON line,
``{"id": str, "title": str, "documents": [str, ...], "summary": str}``.

Determinism: the same seed and options give byte-identical files. Every split
draws from its own random stream, cluster ids carry the split name, and a
cluster's content signature (topic entity and fact values) is hashed into a
split bucket, so a (topic, facts) combination of the test split can never
occur in the training split.

The world itself (entity types, fact slots, templates, invented names) is
:mod:`mdsfair.preprocess.synthetic_world`, the sentences and the reference
summary :mod:`mdsfair.preprocess.synthetic_sentences`, the clusters
:mod:`mdsfair.preprocess.synthetic_clusters` and the baseline gap check
:mod:`mdsfair.preprocess.synthetic_report`; this module writes the splits and
is the command.
"""

import argparse
import json
import os
import sys
from typing import Dict, Optional, Sequence

from mdsfair.argument_types import at_least, os_errors_in_one_line, output_folder_problem
from mdsfair.preprocess.synthetic_clusters import DEFAULT_OPTIONS, generate_clusters
from mdsfair.preprocess.synthetic_report import baseline_gap_report
from mdsfair.preprocess.synthetic_sentences import SLOT_ORDER

# The options of generate_clusters that mdsfair-synth sets, in the order of its --help: the option
# (its flag: dashes for underscores), the least value it takes and what it is; the default is
# DEFAULT_OPTIONS's.
CLUSTER_FLAGS = (
    ("num_docs", 1, "relevant documents per cluster"),
    ("distractor_docs", 0, "distractor documents about other entities per cluster"),
    ("min_facts", 1, "minimum facts in a summary"),
    ("max_facts", 1, f"maximum facts in a summary, at most {len(SLOT_ORDER)}"),
    ("min_facts_per_doc", 1, "minimum topic facts stated by a relevant document"),
    ("max_facts_per_doc", 1, "maximum topic facts stated by a relevant document"),
    ("min_fact_mentions", 1, "target number of documents stating each fact, capacity permitting"),
    ("noise_sentences", 0, "mean filler sentences per document, varied by +-1"),
    ("distractor_sentences", 0, "sentences about other entities inside each relevant document"),
    ("max_paragraphs", 1, "maximum paragraphs per document"),
    ("num_names", 1, "size of the entity name pool of the world"),
)


def write_dataset(
    out_dir: str, seed: int = 1, train: int = 2000, valid: int = 200, test: int = 200, **options
) -> Dict[str, str]:
    """Write ``train.jsonl``, ``valid.jsonl`` and ``test.jsonl`` under ``out_dir``.

    ``options`` are those of :func:`generate_clusters`. Returns the path of
    every written split. Same arguments give byte-identical files.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split, count in (("train", train), ("valid", valid), ("test", test)):
        path = os.path.join(out_dir, f"{split}.jsonl")
        clusters = generate_clusters(count, seed=seed, split=split, **options)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            for cluster in clusters:
                handle.write(json.dumps(cluster, ensure_ascii=False) + "\n")
        paths[split] = path
    return paths


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``mdsfair-synth``."""
    d = DEFAULT_OPTIONS
    parser = argparse.ArgumentParser(
        prog="mdsfair-synth",
        description="Write a deterministic synthetic multi-document summarization data set "
        "(train/valid/test .jsonl in the raw contract).",
    )
    parser.add_argument(
        "--out-dir", required=True, help="directory to write train.jsonl, valid.jsonl and test.jsonl into"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="random seed of the clusters (and of the world unless --world-seed is set) (default: 1)",
    )
    parser.add_argument(
        "--world-seed",
        type=int,
        default=None,
        help="seed of the closed world of names and value pools (default: same as --seed)",
    )
    parser.add_argument("--train", type=at_least(0), default=2000, help="number of training clusters (default: 2000)")
    parser.add_argument("--valid", type=at_least(0), default=200, help="number of validation clusters (default: 200)")
    parser.add_argument("--test", type=at_least(0), default=200, help="number of test clusters (default: 200)")
    for option, least, description in CLUSTER_FLAGS:
        parser.add_argument(
            "--" + option.replace("_", "-"),
            type=at_least(least),
            default=d[option],
            help=f"{description} (default: {d[option]})",
        )
    parser.add_argument(
        "--report",
        type=at_least(0),
        default=0,
        metavar="N",
        help="after writing, print ROUGE of Lead, LexRank and oracle proxies on N test clusters (default: 0, off)",
    )
    return parser


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    """Refuse, with an argparse error naming the flags, settings
    :func:`mdsfair.preprocess.synthetic_clusters.resolve_options` and the
    world would refuse: every ``--min-X`` above its ``--max-X``, more facts
    than slots, facts the documents cannot hold, a name pool smaller than the
    world needs; and an ``--out-dir`` that cannot be written."""
    pairs = [
        ("--min-facts", args.min_facts, "--max-facts", args.max_facts),
        ("--min-facts-per-doc", args.min_facts_per_doc, "--max-facts-per-doc", args.max_facts_per_doc),
    ]
    for low_flag, low, high_flag, high in pairs:
        if low > high:
            parser.error(f"{low_flag} {low} is above {high_flag} {high}: the minimum must not exceed the maximum")
    if args.max_facts > len(SLOT_ORDER):
        parser.error(
            f"--max-facts {args.max_facts}: a summary has at most {len(SLOT_ORDER)} facts ({', '.join(SLOT_ORDER)})"
        )
    if args.num_docs * args.max_facts_per_doc < args.max_facts:
        parser.error(
            f"--num-docs {args.num_docs} x --max-facts-per-doc {args.max_facts_per_doc} is below "
            f"--max-facts {args.max_facts}: every summary fact must be stated by some document"
        )
    if args.num_names < 8:
        parser.error(f"--num-names {args.num_names}: the world needs at least 8 names")
    problem = output_folder_problem("--out-dir", args.out_dir)
    if problem is not None:
        parser.error(problem)


@os_errors_in_one_line("mdsfair-synth")
def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-synth``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.train + args.valid + args.test == 0:  # would write three empty files and exit 0
        parser.error("--train, --valid and --test are all 0: there would be no cluster to write")
    check_arguments(parser, args)
    options = {option: getattr(args, option) for option, _, _ in CLUSTER_FLAGS}
    options["world_seed"] = args.world_seed
    paths = write_dataset(args.out_dir, seed=args.seed, train=args.train, valid=args.valid, test=args.test, **options)
    counts = {"train": args.train, "valid": args.valid, "test": args.test}
    for split, path in paths.items():
        print(f"wrote {path} ({counts.get(split, '?')} clusters)")
    if args.report > 0:
        report = baseline_gap_report(args.report, seed=args.seed, split="test", **options)
        print(f"ROUGE F1 on {args.report} test clusters (x100): system rouge1 rouge2 rougeL")
        for name, scores in report.items():
            print(f"{name:14s} {scores['rouge1']:6.2f} {scores['rouge2']:6.2f} {scores['rougeL']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
