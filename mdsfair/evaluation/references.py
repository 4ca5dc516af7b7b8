"""The references of a data-bin split, for ROUGE: every reference of every
cluster, as ``mdsfair-preprocess`` stored them (full length, cleaned text).

A split's rows have their references in parallel text files (see
:mod:`mdsfair.preprocess.references`): ``{split}.summary.txt`` (the reference
the row's target encodes) and, when some cluster has several references, the
further files its manifest entry lists in ``reference_files``
(``{split}.summary.2.txt``, ...; an empty line = no further reference for
that row). :func:`data_bin_references` gathers them per row.

Pure Python (no torch / fairseq import), for ``mdsfair-rouge``.
"""

import os
from typing import Dict, List, Tuple

from mdsfair.data.manifest import MANIFEST_NAME, read_manifest
from mdsfair.evaluation.inputs import RougeInputError, read_lines


def split_reference_files(data_bin: str, split: str) -> Tuple[List[str], Dict]:
    """Paths of the split's reference files (``{split}.summary.txt`` first)
    and the split's manifest entry (``{}`` when the data-bin has no manifest)."""
    manifest_path = os.path.join(data_bin, MANIFEST_NAME)
    report: Dict = {}
    if os.path.isfile(manifest_path):
        splits = read_manifest(data_bin).get("splits", {})
        if split not in splits:
            raise RougeInputError(
                f"{manifest_path} lists no split {split!r} (listed: {', '.join(sorted(splits)) or 'none'})"
            )
        report = splits[split]
    names = report.get("reference_files") or [f"{split}.summary.txt"]
    return [os.path.join(data_bin, name) for name in names], report


def data_bin_references(data_bin: str, split: str) -> Tuple[List[List[str]], str]:
    """Every reference of every row of a data-bin split, checked against the
    manifest's row count.

    Returns:
        ``(references, path)``: per row, its non-empty references (the one its
        target encodes first); ``path`` names the files read
        (``{split}.summary.txt``, or ``{split}.summary.txt + 2 more``).
    """
    paths, report = split_reference_files(data_bin, split)
    columns = []
    for path in paths:
        if not os.path.isfile(path):
            raise RougeInputError(
                f"{path} not found: is {data_bin} a data-bin written by mdsfair-preprocess with a split {split!r}? "
                "(give --data-bin / --split, or REF files)"
            )
        columns.append(read_lines(path))
    rows = report.get("examples", report.get("clusters"))
    for path, column in zip(paths, columns):
        if rows is not None and len(column) != rows:
            raise RougeInputError(
                f"{path} has {len(column)} lines but {os.path.join(data_bin, MANIFEST_NAME)} lists {rows} rows "
                f"in split {split!r}: the data-bin is inconsistent; preprocess it again"
            )
        if len(column) != len(columns[0]):
            raise RougeInputError(f"{path} has {len(column)} lines but {paths[0]} has {len(columns[0])}")
    references = [[column[row] for column in columns if column[row].strip()] for row in range(len(columns[0]))]
    for row, refs in enumerate(references):
        if not refs:
            raise RougeInputError(f"{paths[0]}:{row + 1}: empty reference (every cluster needs one to be scored)")
    name = paths[0] if len(paths) == 1 else f"{paths[0]} + {len(paths) - 1} more"
    return references, name
