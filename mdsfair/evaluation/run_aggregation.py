"""Several runs of one system in ``mdsfair-compare``: mean ± standard deviation,
and the per-cluster scores the paired tests read.

A system given more than once (``model=seed1.out model=seed2.out model=seed3.out``)
is one system of several runs: random seeds (HierEncDec, Shen et al. 2023, Sec. 5.3:
"the average of 3 runs from random seeds") or checkpoints (the Hierarchical
Transformer, Liu & Lapata 2019, Sec. 4: "the 5 best checkpoints based on performance
on the validation set", each decoded, "averaged results on the test set").
Each run is scored alone and keeps its row (``model#1``, ``model#2``, ...); the
system's row holds, per metric, the mean of the runs' scores and their sample
standard deviation (divisor ``k - 1`` for ``k`` runs: :func:`mean_and_sample_sd`).

**Paired tests and intervals of a system of several runs** use one score per
cluster: the mean over the system's runs of the cluster's score
(:func:`run_averaged_scores`). The unit of resampling stays the cluster: the
question a test answers is whether another test set drawn like this one would
show the difference, and the clusters are what such a test set draws. The runs
are repeated measurements of each cluster (the same input summarized by the
same recipe under another seed or checkpoint), not further clusters, so they are
averaged inside the cluster; the run-to-run spread then enters each cluster's
score, and the two tests of :mod:`mdsfair.evaluation.significance` apply
unchanged: the bootstrap resamples clusters, approximate randomization swaps the
two systems' run-averaged scores within a cluster. Two further properties follow:

* the observed difference, the mean over clusters of the run-averaged
  differences, equals the difference of the two systems' mean-over-runs of
  their mean-over-clusters scores (both are plain means of the same numbers),
  so the test's delta is the difference of the rows' means (for a scorer whose
  aggregate is the plain mean over clusters: ``--fast`` and the rouge-score
  conventions);
* the two systems may have different numbers of runs (3 seeds against one
  baseline output), which pairing run ``i`` of one system with run ``i`` of
  the other cannot do, and no arbitrary pairing of unrelated seeds is made.

Treating the ``k x clusters`` run scores as independent clusters instead would
count every cluster ``k`` times and so make intervals too narrow and p-values too
small; testing each run separately would give ``k`` p-values for one question.

Pure Python (no torch, fairseq or numpy import).
"""

import math
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

#: Between a system's name and the number of one of its runs in the run's row (``model#2``).
RUN_MARK = "#"


class RunSpecificationError(ValueError):
    """Systems and runs that cannot be told apart in one table."""


def group_runs(systems: Sequence[Tuple[str, str]]) -> "OrderedDict[str, List[str]]":
    """``(name, path)`` pairs -> ``{name: [path of each run]}``, systems in the order
    of their first run, runs in the order given.

    Raises:
        RunSpecificationError: one file given twice as runs of one system (its
            scores would count twice in the mean), or a run's row name
            (``NAME#i``) that is also the name of a system.
    """
    runs: "OrderedDict[str, List[str]]" = OrderedDict()
    for name, path in systems:
        paths = runs.setdefault(name, [])
        if path in paths:
            raise RunSpecificationError(
                f"{name}={path} given twice: a run given twice would count twice in {name}'s mean; "
                "give each run's file once"
            )
        paths.append(path)
    for name, labels in run_labels(runs).items():
        for label in labels:
            if label != name and label in runs:
                raise RunSpecificationError(
                    f"system {label!r} has the name of run {label.rsplit(RUN_MARK, 1)[1]} of system {name!r}; "
                    f"rename it (a name without '{RUN_MARK}')"
                )
    return runs


def run_labels(runs: Dict[str, Sequence[str]]) -> "OrderedDict[str, List[str]]":
    """``{name: paths}`` -> ``{name: row name of each run}``: the name itself for a
    system of one run, ``NAME#1 .. NAME#k`` for a system of ``k`` runs."""
    return OrderedDict(
        (name, [name] if len(paths) == 1 else [f"{name}{RUN_MARK}{index}" for index in range(1, len(paths) + 1)])
        for name, paths in runs.items()
    )


def mean_and_sample_sd(values: Sequence[float]) -> Tuple[float, Optional[float]]:
    """The mean of ``values`` and their sample standard deviation
    ``sqrt(sum((x - mean)^2) / (k - 1))`` (``None`` for a single value: a
    spread needs two runs)."""
    count = len(values)
    if count == 0:
        raise ValueError("no values to average")
    mean = math.fsum(values) / count
    if count == 1:
        return mean, None
    return mean, math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (count - 1))


def aggregate_row(name: str, run_rows: Sequence[Dict]) -> Dict:
    """The table row of a system of several runs, from its runs' rows
    (``scores``: {metric: value}): per metric the mean over the runs
    (``scores``) and their sample standard deviation (``sd``), with ``runs``,
    the number of runs. A metric is aggregated only when every run has it."""
    metrics = [metric for metric in run_rows[0]["scores"] if all(metric in row["scores"] for row in run_rows)]
    scores, spreads = {}, {}
    for metric in metrics:
        scores[metric], spreads[metric] = mean_and_sample_sd([row["scores"][metric] for row in run_rows])
    return {
        "name": name,
        "convention": run_rows[0]["convention"],
        "published": False,
        "scores": scores,
        "sd": spreads,
        "runs": len(run_rows),
    }


def run_averaged_scores(
    per_cluster: Dict[str, Dict[str, Sequence[float]]], labels: Dict[str, Sequence[str]]
) -> "OrderedDict[str, Dict[str, List[float]]]":
    """Each system's per-cluster scores averaged over its runs.

    Args:
        per_cluster: ``{run's row name: {metric: per-cluster scores}}``.
        labels: ``{system: its runs' row names}`` (:func:`run_labels`).

    Returns:
        ``{system: {metric: [mean over the runs of cluster i's score, ...]}}``;
        a system of one run keeps its scores as they are.
    """
    averaged: "OrderedDict[str, Dict[str, List[float]]]" = OrderedDict()
    for system, run_names in labels.items():
        runs = [per_cluster[label] for label in run_names]
        averaged[system] = {
            metric: [math.fsum(cluster) / len(runs) for cluster in zip(*(run[metric] for run in runs))]
            for metric in runs[0]
        }
    return averaged


def row_title(row: Dict) -> str:
    """The name a table prints for ``row``: ``NAME (mean ± sd over k runs)`` for a
    system of several runs, the name otherwise."""
    if row.get("runs"):
        return f"{row['name']} (mean ± sd over {row['runs']} runs)"
    return row["name"]


def score_spread(row: Dict, metric: str) -> str:
    """`` ± SD`` (x100, 2 decimals) after a system's mean over its runs; empty for
    any other row."""
    spread = (row.get("sd") or {}).get(metric)
    return "" if spread is None else f" ± {100 * spread:.2f}"


#: The width the `` ± SD`` of :func:`score_spread` adds to a table cell.
SPREAD_WIDTH = len(" ± 00.00")
