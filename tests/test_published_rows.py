"""Every row of ``published_results.csv`` is the number printed in its paper's table.

``published_results.csv`` cites HierEncDec's Table 5 (all ten data sets, R-1/R-2/R-L;
Table 1 is the same table without R-2) and Table 2 (PRIMERA, copied from Xiao et al.
2022). The tables are read from the paper's text (``shared/papers/hierencdec-shen2023.txt``,
a PDF text extraction: one tab-separated line per system, a cell per data set holding
its scores joined by ``/``), and every row of the CSV must equal the cell of its system,
data set and metric; every cell of Tables 1 and 5 must be in the CSV. The other papers'
rows are read from their texts in ``shared/papers/`` too, each from its system's line of
the cited table.
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


# ----------------------------------------------------------------------------
# The other papers' rows: each table's text differs in layout, so a row is found
# by the text that starts its system's line in the cited table (up to its first
# number), and its value is the column of its data set and metric on that line.
# ----------------------------------------------------------------------------

PAPERS = PAPER_TEXT.parent
OTHER_PAPERS = {
    "Liu & Lapata 2019": "hiertransformer-liu-lapata2019.txt",
    "Liu et al. 2022 (PageSum)": "pagesum-liu2022.txt",
    "Ma et al. 2022": "dape-linguistic-ma2022.txt",
    "Manakul & Gales 2021": "sparse-encdec-attention-manakul2021.txt",
}
# (paper, table, system, convention) -> the text before the row's first number
ROW_LABELS = {
    ("Liu & Lapata 2019", "Table 2", "Lead", "hiersumm"): "Lead",
    ("Liu & Lapata 2019", "Table 2", "LexRank", "hiersumm"): "LexRank",
    ("Liu & Lapata 2019", "Table 2", "HT (1,600 tokens)", "hiersumm"): "HT (1,600 tokens)",
    ("Liu & Lapata 2019", "Table 2", "HT (1,600 tokens) + Similarity Graph", "hiersumm"): (
        "HT (1,600 tokens) + Similarity Graph"
    ),
    ("Liu & Lapata 2019", "Table 2", "HT (1,600 tokens) + Discourse Graph", "hiersumm"): (
        "HT (1,600 tokens) + Discourse Graph"
    ),
    ("Liu & Lapata 2019", "Table 2", "HT (train 1,600 / test 3,000 tokens)", "hiersumm"): (
        "HT (train on 1,600 tokens/test on 3000 tokens)"
    ),
    ("Liu et al. 2022 (PageSum)", "Table 2", "LED (16384)", "pagesum"): "LED [‡] (16384)",
    ("Liu et al. 2022 (PageSum)", "Table 2", "PRIMERA (4096)", "pagesum"): "PRIMERA [‡] (4096)",
    ("Liu et al. 2022 (PageSum)", "Table 2", "PageSum (7168)", "pagesum"): "PageSum (7168)",
    ("Liu et al. 2022 (PageSum)", "Table 2", "PageSum (20480)", "pagesum"): "PageSum (20480)",
    ("Liu et al. 2022 (PageSum)", "Table 3", "PageSum-Discourse (8192)", "pagesum"): "PageSum-Discourse (8192)",
    ("Liu et al. 2022 (PageSum)", "Table 5", "PRIMERA", "primera"): "PRIMERA*",
    ("Liu et al. 2022 (PageSum)", "Table 5", "PRIMERA", "pagesum"): "PRIMERA [‡]",
    ("Liu et al. 2022 (PageSum)", "Table 5", "PageSum-Spatial", "pagesum"): "PageSum-Spatial",
    ("Liu et al. 2022 (PageSum)", "Table 5", "PageSum-Document", "pagesum"): "PageSum-Document",
    ("Manakul & Gales 2021", "Table 2", "BART-large-cnn (all sentences)", "sparse"): "Vanilla All N/A",
    ("Manakul & Gales 2021", "Table 3", "KL-only (r=5)", "sparse"): "KL-only LKL Ir,Apx\nm",
    ("Manakul & Gales 2021", "Table 3", "Int-Apx (r=5)", "sparse"): "Int-Apx LI(Ir,Apx\n\nm ) Ir,Apx\nm",
}
for table in ("Table I", "Table II"):
    for system in ("LexRank", "Transformer", "Hi-MAP", "HT"):
        ROW_LABELS[("Ma et al. 2022", table, system, "ma2022")] = system
    ROW_LABELS[("Ma et al. 2022", table, "Ma et al. 2022", "ma2022")] = "Ours"
# the column of a metric within a data set's group, and where the group starts
METRIC_COLUMNS = {"rouge-1": 0, "rouge-2": 1, "rouge-l": 2, "rouge-lsum": 2, "rouge-su*": 2}
DATASET_OFFSETS = {("Liu et al. 2022 (PageSum)", "Table 2"): {"arxiv": 0, "pubmed": 3, "govreport": 6}}
NUMBER = re.compile(r"\d+\.\d+|(?<!\S)-(?!\S)")  # a score, or '-' for none


def table_block(text: str, table: str) -> str:
    """The text of ``table``: from the caption before it to its own caption (``Table 2:``),
    or, for the IEEE captions above the table (``TABLE II``), from its caption to the next
    caption or section heading."""
    lines = text.splitlines()
    if re.fullmatch(r"Table \d+", table):
        [end] = [i for i, line in enumerate(lines) if line.startswith(f"{table}:")]
        starts = [i for i in range(end) if re.match(r"Table \d+:", lines[i])]
        return "\n".join(lines[(starts[-1] + 1 if starts else 0) : end])
    [start] = [i for i, line in enumerate(lines) if line.strip() == table.upper()]
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"(TABLE [IVX]+$|[A-Z]\. )", lines[i]))
    return "\n".join(lines[start + 1 : end])


def printed_value(row: Dict, texts: Dict[str, str]) -> float:
    """The number the row's paper prints in the row's cell."""
    label = ROW_LABELS[(row["paper"], row["table"], row["system"], row["convention"])]
    block = table_block(texts[row["paper"]], row["table"])
    starts = [m.end() for m in re.finditer(rf"(?m)^{re.escape(label)}\s+(?=[\d-])", block)]
    assert len(starts) == 1, f"{row['paper']} {row['table']}: {label!r} starts {len(starts)} lines"
    offset = DATASET_OFFSETS.get((row["paper"], row["table"]), {}).get(row["dataset"], 0)
    cell = NUMBER.findall(block[starts[0] :])[offset + METRIC_COLUMNS[row["metric"]]]
    assert cell != "-", f"{row}: the paper prints no number there"
    return float(cell)


@pytest.mark.skipif(
    not all((PAPERS / name).exists() for name in OTHER_PAPERS.values()), reason="the papers' texts are not available"
)
def test_every_other_papers_row_is_the_number_in_its_table():
    texts = {paper: (PAPERS / name).read_text(encoding="utf-8") for paper, name in OTHER_PAPERS.items()}
    rows = [row for row in read_published() if row["paper"] != PAPER]
    assert {row["paper"] for row in rows} == set(OTHER_PAPERS)
    wrong = [
        f"{cell_key(row)} {row['paper']} {row['table']}" for row in rows if printed_value(row, texts) != row["value"]
    ]
    assert wrong == []
    # a number given to the neighbouring system's line or metric would be caught
    lead = next(row for row in rows if cell_key(row) == ("Lead", "wikisum", "rouge-2"))
    assert printed_value(dict(lead, system="LexRank"), texts) == 11.67
    assert printed_value(dict(lead, metric="rouge-l"), texts) == 26.89
    govreport = next(row for row in rows if cell_key(row) == ("PageSum (7168)", "govreport", "rouge-1"))
    assert printed_value(dict(govreport, dataset="pubmed"), texts) == 48.24


def test_the_readme_says_why_bart_long_graph_is_not_supported_and_pagesum_compares_against_it():
    """README.md's sentence on BART-Long-Graph names the paper PageSum cites and its Table 5."""
    from tests.utils import paper_text

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    title = "Efficiently summarizing text and graph encodings of multi-document clusters"
    assert f'Not supported: BART-Long-Graph (Pasunuru et al. 2021, "{title}"; PageSum\'s Table 5)' in readme
    pagesum = paper_text("pagesum-liu2022.txt")
    assert "include another model BART-Long-Graph (Pasunuru et al., 2021)" in pagesum
    assert "The results are shown in Tab. 5" in pagesum
    assert title in pagesum
