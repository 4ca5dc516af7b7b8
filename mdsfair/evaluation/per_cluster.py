"""``--per-cluster FILE``: every cluster's R/P/F per metric, as JSONL or CSV.

One record per system and cluster, clusters in input order (``cluster`` is
the line index of the hypothesis file, which is also the id of a
fairseq-generate log: both cover ids ``0 .. N-1``):

* ``.jsonl``: ``{"system": NAME, "cluster": ID, "convention": NAME,
  "rouge-1": {"r": .., "p": .., "f": ..}, ...}`` per line;
* ``.csv``: columns ``system, cluster, convention, rouge-1_r, rouge-1_p,
  rouge-1_f, ...``.

Values are fractions in [0, 1], as the scorer computed them (the official
script prints each to 5 decimals). How their mean relates to the reported
average: see ``docs/evaluation.md`` (the official script's average is the
mean of its bootstrap-resample means; ``--fast`` and the rouge-score presets
report the plain mean).
"""

import csv
import json
import os
from typing import Dict, List

from mdsfair.data.manifest import atomic_text_file
from mdsfair.evaluation.inputs import RougeInputError

FORMATS = {".jsonl": "jsonl", ".csv": "csv"}


def per_cluster_format(path: str) -> str:
    """``jsonl`` or ``csv`` from the file's extension; :class:`RougeInputError` otherwise."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in FORMATS:
        raise RougeInputError(f"--per-cluster {path}: the file name must end in .jsonl or .csv")
    return FORMATS[extension]


def per_cluster_records(results: Dict[str, Dict]) -> List[Dict]:
    """``{system: result with "per_cluster"}`` -> one record per system and cluster."""
    records = []
    for system, result in results.items():
        scores = result["per_cluster"]
        metrics = list(scores)
        count = len(scores[metrics[0]]["f"])
        convention = result.get("info", {}).get("convention")
        for index in range(count):
            record = {"system": system, "cluster": index, "convention": convention}
            for metric in metrics:
                record[metric] = {measure: scores[metric][measure][index] for measure in ("r", "p", "f")}
            records.append(record)
    return records


def write_per_cluster(path: str, results: Dict[str, Dict]) -> int:
    """Write the records of :func:`per_cluster_records` to ``path`` (format by
    extension; through :func:`mdsfair.data.manifest.atomic_text_file`, so a
    failed write leaves neither a part nor a temporary file). Returns the count."""
    kind = per_cluster_format(path)
    records = per_cluster_records(results)
    with atomic_text_file(path, newline="") as handle:
        if kind == "jsonl":
            for record in records:
                handle.write(json.dumps(record) + "\n")
        else:
            metrics = [key for key in records[0] if key not in ("system", "cluster", "convention")] if records else []
            writer = csv.writer(handle)
            writer.writerow(["system", "cluster", "convention"] + [f"{m}_{x}" for m in metrics for x in "rpf"])
            for record in records:
                writer.writerow(
                    [record["system"], record["cluster"], record["convention"] or ""]
                    + [record[m][x] for m in metrics for x in "rpf"]
                )
    return len(records)


def read_per_cluster(path: str) -> List[Dict]:
    """Read a file written by :func:`write_per_cluster` back into records."""
    kind = per_cluster_format(path)
    with open(path, encoding="utf-8", newline="") as handle:
        if kind == "jsonl":
            return [json.loads(line) for line in handle if line.strip()]
        rows = list(csv.DictReader(handle))
    records = []
    for row in rows:
        record = {
            "system": row.pop("system"),
            "cluster": int(row.pop("cluster")),
            "convention": row.pop("convention") or None,
        }
        for key, value in row.items():
            metric, measure = key.rsplit("_", 1)
            record.setdefault(metric, {})[measure] = float(value)
        records.append(record)
    return records
