"""``mdsfair-compare``: one ROUGE table for several systems on the same references.

    mdsfair-compare --ref test.summary.txt model=gen.out lead=lead.txt lexrank=lexrank.txt
    mdsfair-compare --data-bin data-bin --split test model=gen.out lead=lead.txt

Each system is ``NAME=PATH`` (a plain hypothesis file or a fairseq-generate log);
rows are systems, columns R-1, R-2, R-L, R-Lsum, R-SU4 (F1 x 100), scored with the
official ROUGE-1.5.5 script (or ``--fast``) exactly as ``mdsfair-rouge`` does:
the references are the ``--ref`` files or the data-bin's stored ones, and every
system must cover every cluster (a fairseq-generate log with missing ids is refused).
"""
import argparse
import sys
from typing import Dict, List, Optional, Sequence

from mdsfair.data.manifest import write_json_atomic
from mdsfair.evaluation.rouge import (
    COLUMN_TITLES,
    METRICS,
    RougeDependencyError,
    RougeInputError,
    add_reference_source_arguments,
    score_files,
)


def format_comparison(results: Dict[str, Dict], measure: str = "f") -> str:
    """Systems as rows, ROUGE metrics as columns, values x100."""
    width = max(10, max(len(name) for name in results) + 2)
    lines = [f"{'system':<{width}}" + "".join(f"{title:>9}" for title in COLUMN_TITLES)]
    for name, result in results.items():
        lines.append(f"{name:<{width}}" + "".join(f"{100 * result[m][measure]:>9.2f}" for m in METRICS))
    return "\n".join(lines)


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-compare``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="mdsfair-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("systems", nargs="+", metavar="NAME=PATH", help="a system's hypotheses (or fairseq-generate log)")
    parser.add_argument(
        "--ref", action="append", default=[],
        help="reference file, one per line (repeatable); default: the references stored in --data-bin",
    )
    add_reference_source_arguments(parser)
    parser.add_argument("--fast", action="store_true", help="use rouge-score instead of the ROUGE-1.5.5 script")
    parser.add_argument("--measure", choices=["f", "r", "p"], default="f", help="F1 (default), recall or precision")
    parser.add_argument("--json", metavar="PATH", help="also write every system's scores as JSON here")
    args = parser.parse_args(argv)
    systems: List = []
    for spec in args.systems:
        if "=" not in spec:
            parser.error(f"expected NAME=PATH, got {spec!r}")
        systems.append(spec.split("=", 1))
    results = {}
    try:
        for name, path in systems:
            results[name] = score_files(
                path, args.ref, fast=args.fast, data_bin=args.data_bin, split=args.split,
                expected=args.expected, target_lines=args.target_lines,
            )
    except (RougeInputError, RougeDependencyError, OSError) as error:
        parser.error(str(error))
    scorer = "rouge-score (--fast)" if args.fast else "official ROUGE-1.5.5"
    print(format_comparison(results, args.measure))
    print(f"[{scorer}; {args.measure.upper()} x 100; {results[systems[0][0]]['info'].get('num_hypotheses')} clusters]")
    if args.json:
        write_json_atomic(args.json, results, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
