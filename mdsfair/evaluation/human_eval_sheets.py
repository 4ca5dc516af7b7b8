"""Blind, randomised human-evaluation sheets (CSV) and their key, for
``mdsfair-human-eval export``.

Three protocols, as the papers ran them:

* **Best-Worst Scaling** (Liu & Lapata 2019, Sec. 5 "Human Evaluation";
  Louviere et al. 2015): judges see the gold summary and the summaries of
  ``tuple_size`` of the K systems (HT: 3 of 4) and pick the best and the worst
  "in relation to the gold standard", taking informativeness, fluency and
  succinctness into account. Every ``tuple_size``-subset of the systems is one
  item per cluster (HT's 4 systems, 3 per item: 4 items a cluster, each system
  in 3), so every system meets every other equally often.
* **Rating** (Ma et al. 2022, DAPE Sec. IV-D, Table VII): judges score each
  summary alone from 1 (very bad) to 5 (very good) on text fluency,
  conciseness and informativeness (DAPE: 10 Multi-News clusters, 4 models,
  3 raters).
* **Question answering** (Liu & Lapata 2019 Sec. 5, after Clarke & Lapata
  2010): questions written from the gold summary; a participant answers them
  from one system summary alone (no gold summary shown), and a grader marks
  each answer 1 (correct), 0.5 (partially correct) or 0.
  The questions come from a JSONL file, one line per cluster:
  ``{"cluster": 3, "questions": [{"question": "...", "answer": "..."}]}``
  (``cluster``: the 0-based line of the cluster in the references file).

Blindness: a sheet names no system; its summaries are labelled ``A``, ``B``,
... (best-worst) or stand alone (rating, QA), and the order of the items and
of the summaries within an item is drawn anew for every sheet (one sheet per
annotator; HT: 5 responses per item) from ``random.Random(seed)``, so one seed
gives the same sheets. ``key.json`` maps each sheet's items back to clusters
and systems; QA's gold answers go to ``qa/sheet-NN.answers.csv`` (item,
question number, answer: no system), for the grader.

Pure Python (no torch / fairseq / numpy import).
"""

import csv
import itertools
import json
import os
import random
import string
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from mdsfair.data.manifest import atomic_text_file, write_json_atomic
from mdsfair.evaluation.inputs import RougeInputError

KEY_NAME = "key.json"
KEY_FORMAT = "mdsfair-human-eval key 1"
PROTOCOLS = ("best-worst", "rating")
#: The criteria each protocol names by default: HT judged once, taking its three
#: criteria into account; DAPE rated each of its three aspects.
DEFAULT_CRITERIA = {"best-worst": ("overall",), "rating": ("fluency", "conciseness", "informativeness")}
CRITERION_QUESTIONS = {
    "overall": "taking informativeness, fluency and succinctness into account",
    "informativeness": "does the summary convey important facts about the topic in question?",
    "fluency": "is the summary fluent and grammatical?",
    "succinctness": "does the summary avoid repetition?",
    "conciseness": "is the summary concise, without repeated or useless information?",
}
RATING_SCALE = (1, 5)
QA_SCORES = {"1": 1.0, "0.5": 0.5, "0": 0.0, "correct": 1.0, "partial": 0.5, "partially correct": 0.5, "wrong": 0.0}


@dataclass
class ExportInputs:
    """What the sheets show: per system its summaries, one per cluster; the
    references (and sources) in the same cluster order."""

    systems: Dict[str, List[str]]
    references: Optional[List[str]]
    sources: Optional[List[str]] = None


def sheet_name(folder: str, number: int, annotators: int) -> str:
    """``FOLDER/sheet-01.csv``: numbered to the width of the annotator count."""
    return f"{folder}/sheet-{number:0{max(2, len(str(annotators)))}d}.csv"


def best_worst_columns(tuple_size: int, criteria: Sequence[str], with_reference: bool, with_source: bool) -> List[str]:
    """A best-worst sheet's header: the item, what the judge reads, then a
    ``best_C`` and ``worst_C`` column per criterion for a summary letter."""
    shown = ["item"] + (["source"] if with_source else []) + (["reference"] if with_reference else [])
    summaries = [f"summary_{letter}" for letter in string.ascii_uppercase[:tuple_size]]
    return shown + summaries + [f"{choice}_{criterion}" for criterion in criteria for choice in ("best", "worst")]


def rating_columns(criteria: Sequence[str], with_reference: bool, with_source: bool) -> List[str]:
    """A rating sheet's header: the item, what the judge reads, a column per criterion."""
    shown = ["item"] + (["source"] if with_source else []) + (["reference"] if with_reference else [])
    return shown + ["summary"] + list(criteria)


QA_COLUMNS = ["item", "question_number", "summary", "question", "response", "score"]


def sample_clusters(total: int, count: Optional[int], rng: random.Random) -> List[int]:
    """``count`` clusters drawn without replacement (all when ``None``), in order."""
    if count is None:
        return list(range(total))
    if count > total:
        raise RougeInputError(f"--clusters {count}: the systems have only {total} clusters")
    return sorted(rng.sample(range(total), count))


def read_questions(path: str, total: int) -> Dict[int, List[Dict[str, str]]]:
    """The QA protocol's questions file (module docstring), checked line by line."""
    questions: Dict[int, List[Dict[str, str]]] = {}
    with open(path, encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as error:
                raise RougeInputError(f"{where}: not JSON ({error.msg})") from None
            cluster = entry.get("cluster") if isinstance(entry, dict) else None
            if not isinstance(cluster, int) or isinstance(cluster, bool) or not 0 <= cluster < total:
                raise RougeInputError(f"{where}: 'cluster' must be a line index 0..{total - 1} of the references")
            if cluster in questions:
                raise RougeInputError(f"{where}: cluster {cluster} has questions on an earlier line already")
            items = entry.get("questions")
            if not isinstance(items, list) or not items:
                raise RougeInputError(f"{where}: cluster {cluster}: 'questions' must be a non-empty list")
            for number, item in enumerate(items, 1):
                if not isinstance(item, dict) or not all(
                    isinstance(item.get(field), str) and item[field].strip() for field in ("question", "answer")
                ):
                    raise RougeInputError(
                        f"{where}: cluster {cluster}, question {number}: needs a non-empty 'question' and 'answer'"
                    )
            questions[cluster] = [{"question": item["question"], "answer": item["answer"]} for item in items]
    if not questions:
        raise RougeInputError(f"{path}: no questions")
    return questions


def _write_csv(path: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    with atomic_text_file(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def _shown(inputs: ExportInputs, cluster: int) -> List[str]:
    return ([inputs.sources[cluster]] if inputs.sources else []) + (
        [inputs.references[cluster]] if inputs.references else []
    )


def export_sheets(
    inputs: ExportInputs,
    out_dir: str,
    protocol: str,
    criteria: Sequence[str],
    clusters: Optional[int],
    annotators: int,
    seed: int,
    tuple_size: int,
    questions: Optional[Dict[int, List[Dict[str, str]]]] = None,
) -> Dict:
    """Write the sheets and ``key.json`` into ``out_dir``; return the key."""
    names = list(inputs.systems)
    total = len(next(iter(inputs.systems.values())))
    rng = random.Random(seed)
    chosen = sample_clusters(total, clusters, rng)
    key: Dict = {
        "format": KEY_FORMAT,
        "protocol": protocol,
        "criteria": list(criteria),
        "systems": names,
        "seed": seed,
        "total_clusters": total,
        "clusters": chosen,
        "annotators": annotators,
        "sheets": {},
    }
    if protocol == "best-worst":
        key["tuple_size"] = tuple_size
        tuples = [(cluster, group) for cluster in chosen for group in itertools.combinations(names, tuple_size)]
        header = best_worst_columns(tuple_size, criteria, bool(inputs.references), bool(inputs.sources))
    else:
        tuples = [(cluster, (name,)) for cluster in chosen for name in names]
        header = rating_columns(criteria, bool(inputs.references), bool(inputs.sources))
    key["columns"] = header
    os.makedirs(os.path.join(out_dir, protocol), exist_ok=True)
    for number in range(1, annotators + 1):
        order = rng.sample(tuples, len(tuples))
        items, rows = [], []
        for index, (cluster, group) in enumerate(order, 1):
            item = f"{index:03d}"
            shuffled = rng.sample(group, len(group))
            if protocol == "best-worst":
                items.append({"item": item, "cluster": cluster, "systems": dict(zip(string.ascii_uppercase, shuffled))})
            else:
                items.append({"item": item, "cluster": cluster, "system": shuffled[0]})
            shown = _shown(inputs, cluster) + [inputs.systems[name][cluster] for name in shuffled]
            rows.append([item] + shown + [""] * (len(header) - 1 - len(shown)))
        name = sheet_name(protocol, number, annotators)
        _write_csv(os.path.join(out_dir, name), header, rows)
        key["sheets"][name] = items
    if questions:
        key["qa_sheets"] = export_question_sheets(inputs, out_dir, questions, annotators, rng)
    write_json_atomic(os.path.join(out_dir, KEY_NAME), key, trailing_newline=True, indent=1, ensure_ascii=False)
    return key


def export_question_sheets(
    inputs: ExportInputs, out_dir: str, questions: Dict[int, List[Dict[str, str]]], annotators: int, rng: random.Random
) -> Dict[str, List[Dict]]:
    """The QA protocol's sheets: per annotator, every (cluster with questions,
    system) item in a random order, one row per question, no gold summary; and
    beside each sheet its answers file for the grader."""
    os.makedirs(os.path.join(out_dir, "qa"), exist_ok=True)
    pairs = [(cluster, name) for cluster in sorted(questions) for name in inputs.systems]
    sheets = {}
    for number in range(1, annotators + 1):
        items, rows, answers = [], [], []
        for index, (cluster, name) in enumerate(rng.sample(pairs, len(pairs)), 1):
            item = f"{index:03d}"
            items.append({"item": item, "cluster": cluster, "system": name, "questions": len(questions[cluster])})
            for question_number, entry in enumerate(questions[cluster], 1):
                rows.append([item, str(question_number), inputs.systems[name][cluster], entry["question"], "", ""])
                answers.append([item, str(question_number), entry["question"], entry["answer"]])
        name = sheet_name("qa", number, annotators)
        _write_csv(os.path.join(out_dir, name), QA_COLUMNS, rows)
        _write_csv(
            os.path.join(out_dir, name[: -len(".csv")] + ".answers.csv"),
            ["item", "question_number", "question", "answer"],
            answers,
        )
        sheets[name] = items
    return sheets
