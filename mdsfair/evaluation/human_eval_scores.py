"""Reading completed human-evaluation sheets back and scoring the systems,
for ``mdsfair-human-eval score`` (the sheets and protocols:
:mod:`mdsfair.evaluation.human_eval_sheets`).

Every row is checked against ``key.json``: an unknown or repeated item, a
choice that is not one of the item's letters, the same summary chosen best
and worst, a half-filled row, a rating outside 1..5 or a QA score other than
1, 0.5 or 0 is a ``FILE:LINE`` error. A row left wholly blank (and an item
whose row was deleted) is *incomplete*: counted, reported and left out.

The scores, per system (and per criterion):

* Best-Worst Scaling (Liu & Lapata 2019 Sec. 5, Table 4 "Rating"): the share
  of the system's judgments in which it was chosen best minus the share in
  which it was chosen worst, ``(best - worst) / judgments``, from -1 (always
  worst) to 1 (always best).
* Rating (Ma et al. 2022, Table VII): the mean rating over clusters and raters.
* QA (Liu & Lapata 2019 Table 4 "QA"): the mean of all question scores
  (1 correct, 0.5 partially correct, 0 otherwise), in percent.

Each is a ratio of sums over clusters, ``sum_c a_c / sum_c n_c``, so its
confidence interval is the percentile bootstrap over clusters (the clusters
are the sample; every sheet's judgments of a cluster stay together), drawn
with :func:`mdsfair.evaluation.significance.bootstrap_counts` and shared by
all systems. ``--baseline`` tests every other system against one with the
paired bootstrap on the same resamples
(:func:`paired_ratio_bootstrap`).
"""

import csv
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from mdsfair.evaluation.human_eval_sheets import KEY_FORMAT, KEY_NAME, QA_COLUMNS, QA_SCORES, RATING_SCALE
from mdsfair.evaluation.inputs import RougeInputError

#: measure -> system -> cluster -> [sum of scores, judgments]
Tally = Dict[str, Dict[str, Dict[int, List[float]]]]


@dataclass
class SheetJudgments:
    """What the sheets hold: per measure (a criterion, or ``qa``) and system,
    per cluster the sum of scores and the number of judgments; best-worst's
    best and worst counts; the incomplete items per sheet."""

    protocol: str
    scores: Tally = field(default_factory=lambda: defaultdict(lambda: defaultdict(dict)))
    best_worst_counts: Dict[str, Dict[str, List[int]]] = field(default_factory=dict)
    incomplete: Dict[str, List[str]] = field(default_factory=dict)
    sheets: int = 0


def read_key(folder: str) -> Dict:
    """``FOLDER/key.json``, as ``mdsfair-human-eval export`` wrote it."""
    path = os.path.join(folder, KEY_NAME)
    if not os.path.isfile(path):
        raise RougeInputError(f"{path} not found: give the folder mdsfair-human-eval export wrote")
    with open(path, encoding="utf-8") as handle:
        try:
            key = json.load(handle)
        except json.JSONDecodeError as error:
            raise RougeInputError(f"{path}:{error.lineno}: not JSON ({error.msg})") from None
    if not isinstance(key, dict) or key.get("format") != KEY_FORMAT:
        raise RougeInputError(f"{path}: not a key written by mdsfair-human-eval export (format {KEY_FORMAT!r})")
    return key


def sheet_rows(path: str, columns: Sequence[str]) -> Iterator[Tuple[int, Dict[str, str]]]:
    """``(line, row)`` of a sheet's rows, ``line`` the row's first line in the
    file (a summary may span lines); the header must be ``columns``."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header != list(columns):
            raise RougeInputError(f"{path}:1: the header is {header}, expected {list(columns)} (as exported)")
        line = reader.line_num + 1
        for row in reader:
            if any(cell.strip() for cell in row):
                if len(row) != len(columns):
                    raise RougeInputError(f"{path}:{line}: {len(row)} fields, expected {len(columns)}")
                yield line, dict(zip(columns, row))
            line = reader.line_num + 1


def _items_by_id(items: Sequence[Dict]) -> Dict[str, Dict]:
    return {item["item"]: item for item in items}


def _known_item(path: str, line: int, row: Dict[str, str], items: Dict[str, Dict]) -> Dict:
    item = row["item"].strip()
    if item not in items:
        raise RougeInputError(f"{path}:{line}: item {item!r} is not an item of this sheet in {KEY_NAME}")
    return items[item]


def item_rows(path: str, columns: Sequence[str], items: Dict[str, Dict]) -> Iterator[Tuple[int, Dict[str, str], Dict]]:
    """``(line, row, item)`` of a sheet with one row per item: each row's item
    one of the key's for this sheet, and no item twice."""
    seen: Dict[str, int] = {}
    for line, row in sheet_rows(path, columns):
        item = _known_item(path, line, row, items)
        if item["item"] in seen:
            raise RougeInputError(f"{path}:{line}: item {item['item']} again (first on line {seen[item['item']]})")
        seen[item["item"]] = line
        yield line, row, item


def _add(judgments: SheetJudgments, measure: str, system: str, cluster: int, score: float) -> None:
    cell = judgments.scores[measure][system].setdefault(cluster, [0.0, 0])
    cell[0] += score
    cell[1] += 1


def _record_incomplete(judgments: SheetJudgments, name: str, expected: Sequence[str], complete: Sequence[str]) -> None:
    missing = [item for item in expected if item not in set(complete)]
    if missing:
        judgments.incomplete[name] = missing


def read_best_worst_sheet(path: str, name: str, key: Dict, judgments: SheetJudgments) -> None:
    """Add one best-worst sheet's choices to ``judgments``."""
    items = _items_by_id(key["sheets"][name])
    complete = []
    for line, row, item in item_rows(path, key["columns"], items):
        choices = {
            column: row[column].strip().upper()
            for column in key["columns"]
            if column.split("_")[0] in ("best", "worst")
        }
        if not any(choices.values()):
            continue
        letters = item["systems"]
        picked = []
        for criterion in key["criteria"]:
            best, worst = choices[f"best_{criterion}"], choices[f"worst_{criterion}"]
            for kind, letter in (("best", best), ("worst", worst)):
                if letter not in letters:
                    what = "no choice" if not letter else f"{letter!r} is not a summary of this item"
                    raise RougeInputError(
                        f"{path}:{line}: item {item['item']}, {kind}_{criterion}: {what} (one of "
                        f"{', '.join(sorted(letters))}; leave the whole row blank to skip the item)"
                    )
            if best == worst:
                raise RougeInputError(
                    f"{path}:{line}: item {item['item']}, {criterion}: summary {best} chosen both best and worst"
                )
            picked.append((criterion, letters[best], letters[worst]))
        for criterion, best_system, worst_system in picked:
            for system in letters.values():
                score = 1.0 if system == best_system else -1.0 if system == worst_system else 0.0
                _add(judgments, criterion, system, item["cluster"], score)
                counts = judgments.best_worst_counts.setdefault(criterion, {}).setdefault(system, [0, 0])
                counts[0] += system == best_system
                counts[1] += system == worst_system
        complete.append(item["item"])
    _record_incomplete(judgments, name, list(items), complete)


def read_rating_sheet(path: str, name: str, key: Dict, judgments: SheetJudgments) -> None:
    """Add one rating sheet's scores (1..5 per criterion) to ``judgments``."""
    items = _items_by_id(key["sheets"][name])
    low, high = RATING_SCALE
    complete = []
    for line, row, item in item_rows(path, key["columns"], items):
        values = {criterion: row[criterion].strip() for criterion in key["criteria"]}
        if not any(values.values()):
            continue
        ratings = {}
        for criterion, value in values.items():
            if value not in {str(score) for score in range(low, high + 1)}:
                what = "no rating" if not value else f"{value!r} is not a rating"
                raise RougeInputError(
                    f"{path}:{line}: item {item['item']}, {criterion}: {what} (an integer {low}..{high}; leave the "
                    "whole row blank to skip the item)"
                )
            ratings[criterion] = float(value)
        for criterion, rating in ratings.items():
            _add(judgments, criterion, item["system"], item["cluster"], rating)
        complete.append(item["item"])
    _record_incomplete(judgments, name, list(items), complete)


def read_question_sheet(path: str, name: str, key: Dict, judgments: SheetJudgments) -> None:
    """Add one QA sheet's graded answers to ``judgments`` (measure ``qa``)."""
    items = _items_by_id(key["qa_sheets"][name])
    graded: Dict[str, Dict[int, float]] = defaultdict(dict)
    lines: Dict[Tuple[str, int], int] = {}
    blank = set()
    for line, row in sheet_rows(path, QA_COLUMNS):
        item = _known_item(path, line, row, items)
        number_text = row["question_number"].strip()
        if not number_text.isdigit() or not 1 <= int(number_text) <= item["questions"]:
            raise RougeInputError(
                f"{path}:{line}: item {item['item']}: question_number {number_text!r} is not 1..{item['questions']}"
            )
        number = int(number_text)
        if (item["item"], number) in lines:
            raise RougeInputError(
                f"{path}:{line}: item {item['item']}, question {number} again (first on line "
                f"{lines[item['item'], number]})"
            )
        lines[item["item"], number] = line
        score = row["score"].strip().lower()
        if not score:
            blank.add(item["item"])
            continue
        if score not in QA_SCORES:
            raise RougeInputError(
                f"{path}:{line}: item {item['item']}, question {number}: score {row['score']!r} is not 1, 0.5 or 0 "
                "(correct, partially correct, wrong)"
            )
        graded[item["item"]][number] = QA_SCORES[score]
    complete = []
    for item_id, scores in graded.items():
        item = items[item_id]
        if len(scores) != item["questions"]:
            missing = sorted(set(range(1, item["questions"] + 1)) - set(scores))
            raise RougeInputError(
                f"{path}: item {item_id}: questions {', '.join(map(str, missing))} are not scored but others are "
                "(score every question of an item, or none to skip it)"
            )
        for score in scores.values():
            _add(judgments, "qa", item["system"], item["cluster"], score)
        complete.append(item_id)
    _record_incomplete(judgments, name, list(items), complete)


def read_judgments(folder: str, key: Dict) -> Tuple[SheetJudgments, Optional[SheetJudgments]]:
    """Every sheet the key names: the protocol's judgments, and the QA ones
    (``None`` without QA sheets)."""
    reader = read_best_worst_sheet if key["protocol"] == "best-worst" else read_rating_sheet
    main = SheetJudgments(key["protocol"])
    for name in key["sheets"]:
        reader(os.path.join(folder, name), name, key, main)
        main.sheets += 1
    if not key.get("qa_sheets"):
        return main, None
    qa = SheetJudgments("qa")
    for name in key["qa_sheets"]:
        read_question_sheet(os.path.join(folder, name), name, key, qa)
        qa.sheets += 1
    return main, qa


def resampled_ratios(sums, counts, samples: int, seed: int):
    """``[samples, rows]``: ``sum_c w_c sums[r, c] / sum_c w_c counts[r, c]``
    for bootstrap weights ``w`` (the clusters drawn with replacement, the
    same draws for every row); NaN where a row has no judgment in the draw."""
    import numpy as np

    from mdsfair.evaluation.significance import bootstrap_counts

    sums, counts = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    draws = bootstrap_counts(sums.shape[1], samples, seed)
    resampled_counts = draws @ counts.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(resampled_counts > 0, (draws @ sums.T) / resampled_counts, np.nan)


def ratio_bootstrap_ci(sums, counts, samples: int, seed: int, confidence: float):
    """Percentile bootstrap interval of ``sum_c sums[r, c] / sum_c counts[r, c]``
    per row ``r`` (``[rows, clusters]``); ``[rows, 2]`` (a resample in which a
    row has no judgment is left out of that row's quantiles)."""
    import numpy as np

    tail = (1 - confidence) / 2
    return np.nanquantile(resampled_ratios(sums, counts, samples, seed), [tail, 1 - tail], axis=0).T


def paired_ratio_bootstrap(sums, counts, baseline: int, samples: int, seed: int):
    """The paired bootstrap test of :func:`mdsfair.evaluation.significance.paired_bootstrap`
    (Koehn 2004; Berg-Kirkpatrick et al. 2012, two-sided: a resampled
    difference ``delta*`` counts when ``|delta* - delta| >= |delta|``) for the
    ratio scores, every row against row ``baseline`` on the same resampled
    clusters. Returns ``(delta, p)`` per row, ``p = (count + 1) / (valid + 1)``
    over the resamples in which both rows have judgments."""
    import numpy as np

    from mdsfair.evaluation.significance import TIE_TOLERANCE

    sums, counts = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    observed = sums.sum(axis=1) / counts.sum(axis=1)
    delta = observed - observed[baseline]
    ratios = resampled_ratios(sums, counts, samples, seed)
    differences = ratios - ratios[:, baseline : baseline + 1]
    valid = ~np.isnan(differences)
    tolerance = TIE_TOLERANCE * np.maximum(1.0, np.abs(delta))
    with np.errstate(invalid="ignore"):
        extreme = (valid & (np.abs(differences - delta) >= np.abs(delta) - tolerance)).sum(axis=0)
    return delta, (extreme + 1) / (valid.sum(axis=0) + 1)


def score_judgments(
    judgments: SheetJudgments,
    systems: Sequence[str],
    scale: float,
    samples: int,
    seed: int,
    confidence: float,
    intervals: bool,
    baseline: Optional[str] = None,
) -> Dict[str, Dict[str, Dict]]:
    """Per measure: ``clusters`` judged and per system (``systems``): ``score``
    (``scale`` x the ratio of sums), ``judgments``, best/worst counts for
    best-worst, ``low`` / ``high`` when ``intervals`` (``None`` with fewer
    than 2 clusters), and against ``baseline`` (when it was judged on the
    measure) ``delta`` (``scale`` x the difference) and ``p``."""
    results: Dict[str, Dict[str, Dict]] = {}
    for measure, per_system in judgments.scores.items():
        clusters = sorted({cluster for cells in per_system.values() for cluster in cells})
        names = [name for name in systems if name in per_system]
        sums = [[per_system[name].get(cluster, [0.0, 0])[0] for cluster in clusters] for name in names]
        counts = [[per_system[name].get(cluster, [0.0, 0])[1] for cluster in clusters] for name in names]
        bounds = tests = None
        if intervals and len(clusters) >= 2:
            bounds = ratio_bootstrap_ci(sums, counts, samples, seed, confidence)
        if baseline in names and len(clusters) >= 2:
            tests = paired_ratio_bootstrap(sums, counts, names.index(baseline), samples, seed)
        results[measure] = {"clusters": len(clusters), "systems": {}}
        for row, name in enumerate(names):
            entry = {
                "score": scale * sum(sums[row]) / sum(counts[row]),
                "judgments": int(sum(counts[row])),
                "clusters": sum(1 for count in counts[row] if count),
            }
            if measure in judgments.best_worst_counts:
                entry["best"], entry["worst"] = judgments.best_worst_counts[measure][name]
            if intervals:
                entry["low"] = None if bounds is None else scale * float(bounds[row, 0])
                entry["high"] = None if bounds is None else scale * float(bounds[row, 1])
            if tests is not None and name != baseline:
                entry["delta"], entry["p"] = scale * float(tests[0][row]), float(tests[1][row])
            results[measure]["systems"][name] = entry
    return results
