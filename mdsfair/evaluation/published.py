"""The seeds' and baselines' published ROUGE numbers (``published_results.csv``).

Each row: ``dataset, system, metric, value, convention, paper, table, note``.
``metric`` is mdsfair's name for what the authors' code computed (so a
paper's "R-L" is ``rouge-lsum`` where their script scored sentence lines,
e.g. PageSum), ``value`` is the paper's number (x100), ``convention`` the
preset of :mod:`mdsfair.evaluation.conventions` that reproduces how it was
scored, and ``paper`` + ``table`` where it is printed. Only numbers printed
in the papers are listed; a row marked "reported in ..." is a number the
paper copied from another paper (its convention is that paper's).
"""

import csv
import os
from collections import OrderedDict
from typing import Dict, List

from mdsfair.evaluation.inputs import RougeInputError

PUBLISHED_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "published_results.csv")
COLUMNS = ("dataset", "system", "metric", "value", "convention", "paper", "table", "note")


def read_published(path: str = PUBLISHED_CSV) -> List[Dict]:
    """Every row, ``value`` as a float; a malformed row is refused with its line number."""
    from mdsfair.evaluation.conventions import ALL_METRICS, CONVENTIONS

    rows = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise RougeInputError(f"{path}:1: expected the columns {','.join(COLUMNS)}")
        for row in reader:
            line = reader.line_num
            try:
                row["value"] = float(row["value"])
            except ValueError:
                raise RougeInputError(f"{path}:{line}: value {row['value']!r} is not a number") from None
            if row["metric"] not in ALL_METRICS:
                raise RougeInputError(f"{path}:{line}: unknown metric {row['metric']!r}")
            if row["convention"] not in CONVENTIONS:
                raise RougeInputError(f"{path}:{line}: unknown convention {row['convention']!r}")
            rows.append(row)
    return rows


def published_datasets(path: str = PUBLISHED_CSV) -> List[str]:
    return sorted({row["dataset"] for row in read_published(path)})


def published_systems(dataset: str, path: str = PUBLISHED_CSV) -> "OrderedDict[str, Dict]":
    """The published rows of ``dataset`` as table rows: ``{label: {"system",
    "convention", "paper", "table", "note", "scores": {metric: fraction}}}``,
    one per system, convention, paper and table, in file order."""
    rows = [row for row in read_published(path) if row["dataset"] == dataset]
    if not rows:
        raise RougeInputError(
            f"--published {dataset}: no published results for this data set; known: {', '.join(published_datasets(path))}"
        )
    systems: "OrderedDict[str, Dict]" = OrderedDict()
    for row in rows:
        key = (row["system"], row["convention"], row["paper"], row["table"])
        label = f"{row['system']} [{row['paper'].split(' (')[0]}, {row['table']}]"
        entry = systems.setdefault(
            label,
            {
                "system": row["system"],
                "convention": row["convention"],
                "paper": row["paper"],
                "table": row["table"],
                "note": row["note"],
                "scores": {},
                "key": key,
            },
        )
        entry["scores"][row["metric"]] = row["value"] / 100
    return systems
