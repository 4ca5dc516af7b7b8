"""The published rows of Shen et al. 2023 (HierEncDec) are the numbers printed in the paper.

``published_results.csv`` cites HierEncDec's Table 5 (all ten data sets, R-1/R-2/R-L;
Table 1 is the same table without R-2) and Table 2 (PRIMERA, copied from Xiao et al.
2022). The tables are read from the paper's text (``shared/papers/hierencdec-shen2023.txt``,
a PDF text extraction: one tab-separated line per system, a cell per data set holding
its scores joined by ``/``), and every row of the CSV must equal the cell of its system,
data set and metric; every cell of Tables 1 and 5 must be in the CSV.
"""

import csv
import re
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from mdsfair.evaluation.published import PUBLISHED_CSV, published_datasets, published_systems, read_published
from mdsfair.preprocess.converters import CONVERTERS
from mdsfair.preprocess.converters.wikidomains import WIKIDOMAINS

PAPER_TEXT = Path(__file__).resolve().parents[2] / "shared" / "papers" / "hierencdec-shen2023.txt"
PAPER = "Shen et al. 2023 (HierEncDec)"

# The paper's column headers -> mdsfair's data set names (the converters' names; the
# four WikiAsp domains as wikidomains-<domain folder>).
DATASETS = {
    "Mutlinews": "multinews",  # sic, Tables 1 and 5's spelling (Table 2 spells it right)
    "WCEP": "wcep",
    "M-XSc": "multixscience",
    "RT": "rottentomatoes",
    "MReD": "mred",
    "MReD+": "mred_plus",
    "MeanOfTrans": "wikidomains-meanoftransportation",
    "Town": "wikidomains-town",
    "Software": "wikidomains-software",
    "Film": "wikidomains-film",
}
METRICS = {"R-1": "rouge-1", "R-2": "rouge-2", "R-L": "rouge-l"}

Cells = Dict[Tuple[str, str, str], float]  # (system, dataset, metric) -> value

pytestmark = pytest.mark.skipif(not PAPER_TEXT.exists(), reason="the HierEncDec paper text is not available")


def system_name(label: str) -> str:
    """``LED (Beltagy et al., 2020)`` -> ``LED``, ``PRIMERA*`` -> ``PRIMERA``."""
    return re.sub(r"\s*\([^()]*\d{4}\)$", "", label.strip()).rstrip("*").strip()


def table_lines(lines: List[str], caption: str) -> List[str]:
    """The lines of the table whose caption starts with ``caption`` (e.g. ``Table 5:``):
    from the last header line (``System``/``Dataset`` + tab) before the caption to the caption."""
    [end] = [i for i, line in enumerate(lines) if line.startswith(caption)]
    start = max(i for i in range(end) if re.match(r"(System|Dataset)\t", lines[i]))
    return [line for line in lines[start:end] if line.strip()]


def parse_system_by_dataset_table(lines: List[str], caption: str) -> Cells:
    """Tables 1 and 5: a header of data sets, a line of metric names per data set
    (``R-1/R-L``), then one line per system with one ``/``-joined cell per data set."""
    header, metric_line, *rows = table_lines(lines, caption)
    columns = header.split("\t")[1:]
    metric_names = metric_line.strip("\t").split("\t")
    assert [DATASETS[c] for c in columns] and len(metric_names) == len(columns), caption
    cells: Cells = {}
    for row in rows:
        label, *values = row.split("\t")
        assert len(values) == len(columns), f"{caption} {label!r}: {len(values)} cells for {len(columns)} data sets"
        for column, names, cell in zip(columns, metric_names, values):
            numbers = [part.strip() for part in cell.split("/")]
            names = names.split("/")
            assert len(numbers) == len(names), f"{caption} {label!r} {column}: {cell!r} for {names}"
            for name, number in zip(names, numbers):
                key = (system_name(label), DATASETS[column], METRICS[name])
                assert key not in cells, f"{caption}: {key} twice"
                cells[key] = float(number)
    return cells


def parse_table_2(lines: List[str]) -> Cells:
    """Table 2: ``Dataset, System, #Param, R-1, R-2, R-L``; a blank data set cell
    continues the data set of the line above."""
    header, *rows = table_lines(lines, "Table 2:")
    assert header.split("\t") == ["Dataset", "System", "#Param", "R-1", "R-2", "R-L"]
    cells: Cells = {}
    dataset = None
    for row in rows:
        column, label, _, *values = row.split("\t")
        dataset = DATASETS[column.replace("Multinews", "Mutlinews")] if column else dataset
        for name, value in zip(("R-1", "R-2", "R-L"), values, strict=True):
            cells[(system_name(label), dataset, METRICS[name])] = float(value)
    return cells


def cell_key(row: Dict) -> Tuple[str, str, str]:
    return (row["system"], row["dataset"], row["metric"])


def rows_of(rows: List[Dict], table: str) -> List[Dict]:
    """The CSV rows that cite ``PAPER``'s ``table``."""
    return [row for row in rows if row["paper"] == PAPER and row["table"] == table]


def mismatches(rows: List[Dict], table: str, cells: Cells) -> List[str]:
    """Every row citing ``PAPER``'s ``table`` whose value is not the paper's cell."""
    problems = []
    for row in rows_of(rows, table):
        key = cell_key(row)
        if key not in cells:
            problems.append(f"{row}: no such cell in {table}")
        elif cells[key] != row["value"]:
            problems.append(f"{row}: {table} prints {cells[key]}")
    return problems


@pytest.fixture(scope="module")
def paper_lines() -> List[str]:
    return PAPER_TEXT.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def table_5(paper_lines) -> Cells:
    return parse_system_by_dataset_table(paper_lines, "Table 5:")


def test_the_parser_reads_all_ten_data_sets_and_six_systems(paper_lines, table_5):
    table_1 = parse_system_by_dataset_table(paper_lines, "Table 1:")
    systems = {"LongT5-base", "BART-base + HierEncDec", "LED", "BART-large", "BART-large + HierEncDec"}
    systems.add("BART-large-cnn + HierEncDec")
    for table, metrics in ((table_1, {"rouge-1", "rouge-l"}), (table_5, set(METRICS.values()))):
        assert {key[0] for key in table} == systems
        assert {key[1] for key in table} == set(DATASETS.values())
        assert {key[2] for key in table} == metrics
        assert len(table) == len(systems) * len(DATASETS) * len(metrics)
    # spot checks against the printed page (LED's cells carry a stray space in the text)
    assert table_1[("LED", "wcep", "rouge-l")] == 37.6
    assert table_5[("LongT5-base", "rottentomatoes", "rouge-2")] == 9.4
    assert table_5[("BART-large-cnn + HierEncDec", "wikidomains-film", "rouge-1")] == 45.9


def test_the_data_set_names_are_the_converters():
    assert {"rottentomatoes", "mred_plus", "wikidomains"} <= set(CONVERTERS)
    wikipedia = {name for name in DATASETS.values() if name.startswith("wikidomains-")}
    assert wikipedia == {f"wikidomains-{domain.lower()}" for domain in WIKIDOMAINS}


def test_every_table_5_row_is_the_papers_number(table_5):
    rows = read_published()
    assert mismatches(rows, "Table 5", table_5) == []
    published = [cell_key(row) for row in rows_of(rows, "Table 5")]
    assert len(published) == len(set(published)), "a cell is published twice"
    assert set(published) == set(table_5), "every cell of Table 5, and nothing else, is a published row"


def test_table_1_prints_the_published_r1_and_rl(paper_lines):
    """Table 1 is Table 5 without R-2: its every cell is the CSV's row of that cell."""
    table_1 = parse_system_by_dataset_table(paper_lines, "Table 1:")
    published = {cell_key(row): row["value"] for row in rows_of(read_published(), "Table 5")}
    assert {key: published.get(key) for key in table_1} == table_1


def test_table_2_primera_rows_are_the_papers_numbers(paper_lines):
    table_2 = parse_table_2(paper_lines)
    rows = read_published()
    assert mismatches(rows, "Table 2", table_2) == []
    primera = {key for key in table_2 if key[0] == "PRIMERA"}
    assert {cell_key(row) for row in rows_of(rows, "Table 2")} == primera
    # Table 2's HierEncDec row repeats the published Table 5 numbers
    table_5_values = {cell_key(row): row["value"] for row in rows_of(rows, "Table 5")}
    for key, value in table_2.items():
        if key not in primera:
            assert table_5_values[key] == value, key


def test_a_number_moved_to_another_system_is_caught(table_5, tmp_path):
    """The check fails when a cell's number is given to another system or changed by 0.1."""
    with open(PUBLISHED_CSV, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    moved = [dict(r) for r in rows]
    led, base = (
        moved.index(next(r for r in moved if cell_key(r) == (s, "rottentomatoes", "rouge-1")))
        for s in ("LED", "BART-large")
    )
    moved[led]["value"], moved[base]["value"] = moved[base]["value"], moved[led]["value"]
    path = tmp_path / "moved.csv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(moved)
    assert len(mismatches(read_published(str(path)), "Table 5", table_5)) == 2
    nudged = read_published()
    [town] = [row for row in nudged if cell_key(row) == ("LED", "wikidomains-town", "rouge-l")]
    town["value"] = round(town["value"] + 0.1, 1)
    assert len(mismatches(nudged, "Table 5", table_5)) == 1


def test_mdsfair_compare_lists_the_new_data_sets():
    new = ["rottentomatoes", "mred_plus"] + [f"wikidomains-{domain.lower()}" for domain in WIKIDOMAINS]
    assert set(new) <= set(published_datasets())
    for dataset in new:
        systems = published_systems(dataset)
        assert [entry["system"] for entry in systems.values()] == [
            "LongT5-base",
            "BART-base + HierEncDec",
            "LED",
            "BART-large",
            "BART-large + HierEncDec",
            "BART-large-cnn + HierEncDec",
        ]
        assert all(set(entry["scores"]) == {"rouge-1", "rouge-2", "rouge-l"} for entry in systems.values())
        assert systems["LED [Shen et al. 2023, Table 5]"]["convention"] == "led-hierencdec"
