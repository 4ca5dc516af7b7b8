"""The conversion driver (:func:`convert`) and ``mdsfair-convert``, both read from the registry.

``mdsfair-convert FORMAT INPUT... -o OUTPUT`` has one subcommand per
registered format (:data:`~.registry.CONVERTERS`): the common flags below plus
the format's own (its ``add_arguments``). The common flags of the bad-input
policy become one :class:`~.common.ConversionOptions`, built once here; besides
it, the command passes on exactly the format's own options
(:func:`~.registry.format_options`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from mdsfair.argument_types import check_output_paths
from mdsfair.data.manifest import write_json_atomic
from mdsfair.raw_contract import InputFormatError

from .common import ConversionOptions, ConversionReport, Inputs, PathLike, as_paths
from .registry import CONVERTER_ARGUMENTS, CONVERTERS, format_options, get_converter


def convert(
    format_name: str,
    inputs: Inputs,
    output_path: PathLike,
    split: str = "train",
    options: ConversionOptions = ConversionOptions(),
    **format_options_: Any,
) -> ConversionReport:
    """Convert ``inputs`` of ``format_name`` into a raw-contract JSONL file at ``output_path``.

    ``options`` is the bad-input policy every format shares (e.g.
    ``ConversionOptions(skip_bad=True)``) and the report to count into (a new
    one when it has none); ``format_options_`` are the format's own keyword
    options (e.g. ``max_articles=10``). The file is written to
    ``<output>.<pid>.partial`` and renamed on success, so a failed conversion leaves
    no output. Returns the :class:`ConversionReport`. An unregistered
    ``format_name`` raises ValueError naming the known formats."""
    generator_function = get_converter(format_name)
    accepted = format_options(format_name)
    unknown = sorted(set(format_options_) - set(accepted))
    if unknown:
        raise TypeError(f"format {format_name!r} does not take {unknown}; it takes {accepted}")
    paths = as_paths(inputs)
    output = Path(output_path)
    if options.report is None:
        options = dataclasses.replace(options, report=ConversionReport(format_name=format_name, split=split))
    report = options.report
    report.output_path = str(output)
    generator = generator_function(paths, split, options=options, **format_options_)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f"{output.name}.{os.getpid()}.partial")  # one per run: concurrent runs never share it
    try:
        with open(partial, "w", encoding="utf-8", newline="\n") as handle:
            for cluster in generator:
                handle.write(json.dumps(cluster, ensure_ascii=False) + "\n")
        os.replace(partial, output)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return report


def build_parser() -> argparse.ArgumentParser:
    """The ``mdsfair-convert`` argument parser: one subcommand per registered format."""
    parser = argparse.ArgumentParser(
        prog="mdsfair-convert",
        description="Convert a public multi-document summarization release into mdsfair's raw JSONL "
        "contract ({id, documents, summary}) and print a report of what was written, "
        "skipped and dropped.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="input file(s) in the format's release layout (.gz accepted)"
    )
    common.add_argument("-o", "--output", required=True, help="output JSONL file")
    common.add_argument(
        "--split",
        default="train",
        help="split name, used for ids without a dataset id and for the empty-summary rule (default: %(default)s)",
    )
    common.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip bad records and count them by reason instead of stopping at the first",
    )
    common.add_argument(
        "--allow-empty-summary",
        action="store_true",
        help="write clusters with an empty summary in non-training splits (never allowed in train)",
    )
    common.add_argument(
        "--error-on-empty-document",
        action="store_true",
        help="treat an empty document inside a cluster as bad input instead of dropping and counting it",
    )
    common.add_argument("--report-json", default=None, metavar="PATH", help="also write the report as JSON to PATH")
    subparsers = parser.add_subparsers(dest="format_name", metavar="FORMAT", required=True)
    for name, generator in CONVERTERS.items():
        summary = (generator.__doc__ or name).strip().splitlines()[0].replace("``", "")
        subparser = subparsers.add_parser(name, parents=[common], help=summary, description=summary)
        add_format_arguments = CONVERTER_ARGUMENTS.get(name)
        if add_format_arguments is not None:
            add_format_arguments(subparser)
    return parser


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mdsfair-convert``; returns the exit status (0 ok, 1 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = check_output_paths(
        [("-o/--output", args.output), ("--report-json", args.report_json)],
        inputs=args.inputs,
        creating_folders=["-o/--output"],  # convert() creates the output's folder
    )
    if problem is not None:
        parser.error(problem)
    accepted = set(format_options(args.format_name))
    own_options = {key: value for key, value in vars(args).items() if key in accepted}
    options = ConversionOptions(
        skip_bad=args.skip_bad,
        allow_empty_summary=args.allow_empty_summary,
        error_on_empty_document=args.error_on_empty_document,
    )
    try:
        report = convert(args.format_name, args.inputs, args.output, split=args.split, options=options, **own_options)
    except InputFormatError as err:
        print(f"mdsfair-convert: error: {err}", file=sys.stderr)
        if err.skippable and not args.skip_bad:
            print("mdsfair-convert: use --skip-bad to skip and count bad records", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:
        print(f"mdsfair-convert: error: {err}", file=sys.stderr)
        return 1
    print(report.format())
    if args.report_json:
        try:  # atomic: a failure while writing (a full disk, Ctrl-C) keeps the earlier report whole
            write_json_atomic(args.report_json, report.to_dict(), trailing_newline=True, indent=2)
        except OSError as err:
            print(f"mdsfair-convert: error: cannot write --report-json {args.report_json}: {err}", file=sys.stderr)
            return 1
    return 0
