"""The tables of the documentation's results blocks (:mod:`benchmarks.render_docs`):
a results file's rows as Markdown, every figure formatted by what its key says it
is (a ratio, a percentage, MiB, seconds; a median with its min-max), every header
spelled out, and a table wider than the page at 1,280 pixels split into several
that repeat the settings columns (:func:`table`; the width estimate is
:func:`table_width_em`)."""

import re
from typing import List, Tuple

RATIO = re.compile(r"(^|_)(vs|speedup|ratio)(_|$)")


def spec_of(key: str, value: float) -> Tuple[str, str]:
    """The format of a figure by what its key says it is: ``(spec, suffix)``."""
    if RATIO.search(key):
        return ".2f", "x"
    if key.endswith("_pct"):
        return ".0f", "%"
    if "mib_per" in key:
        return ".2f", ""
    if key.endswith("_mib"):
        return (",.0f" if abs(value) >= 100 else ".1f"), ""
    if key.endswith("_gib"):
        return ".2f", ""
    if key.endswith("_ms"):
        return ".2f", ""
    if "per_s" in key or "per_cpu_s" in key:
        return (",.0f" if abs(value) >= 100 else ".2f"), ""
    if key.startswith("loss"):
        return ".2f", ""
    if key.endswith("_s") or key == "seconds":
        return (".3f" if abs(value) < 10 else ".2f"), ""
    if isinstance(value, int):
        return ",", ""
    return ".3g", ""


# a range's hyphen: U+2011, the non-breaking hyphen, so that a narrow column wraps a
# spread at its space ("0.612" above "(0.584-0.717)"), never inside the range
RANGE_HYPHEN = "\u2011"


def figure(key: str, value) -> str:
    """One table cell: a number, a median (min-max), text, or nothing."""
    if value is None:
        return ""
    if isinstance(value, dict):
        median, minimum, maximum = value["median"], value["minimum"], value["maximum"]
        spec, suffix = spec_of(key, median)
        if minimum is None or maximum is None:
            return f"{median:{spec}}{suffix}"
        return f"{median:{spec}}{suffix} ({minimum:{spec}}{RANGE_HYPHEN}{maximum:{spec}})"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if key in (
            "beam",
            "batch",
            "batch_size",
            "call",
            "run",
            "steps",
            "pages",
            "documents",
            "overflows",
            "target_steps",
            "sentences",
            "threads",
        ):
            return str(value)
        spec, suffix = spec_of(key, value)
        return f"{value:{spec}}{suffix}"
    if isinstance(value, list):
        return ", ".join(figure(key, item) for item in value)
    return str(value).replace("|", "\\|")


HEADER_WORDS = {
    "mib": "MiB",
    "gib": "GiB",
    "ms": "ms",
    "s": "s",
    "vs": "vs",
    "ht": "HT",
    "bart": "BART",
    "pct": "%",
    "led": "LED",
    "1k": "1k",
    "ckpt": "ckpt",
    "call": "run",
}


def header(key: str) -> str:
    words = key.split("_")
    return " ".join(HEADER_WORDS.get(word, word) for word in words).replace("per s", "/ s")


# ---------------------------------------------------------------- table widths

# No table scrolls sideways at the documentation's default width. At a window
# 1,280 pixels wide the Material theme gives a table 765 pixels between its two
# sidebars (the text column and .8rem on either side), and sets a table's text
# at .64rem (12.8 pixels): 59.8 em. The browser narrows a column down to its
# longest word (docs/stylesheets/extra.css lets a cell wrap between words
# only), so a table fits when the sum of its columns' longest words, plus each
# column's padding, does. The width of a word is estimated from Roboto's
# advance widths (em, by character class; code is Roboto Mono at .85 em,
# headers bold), a little above Chromium's own (tools/site_widths.py measures
# the built site); TABLE_EM keeps a tenth of the width for the estimate's error.
TABLE_EM = 54.0
CELL_PADDING_EM = 1.2  # extra.css: .6em on either side of a cell
CODE_CHARACTER_EM = 0.6 * 0.85
BOLD = 1.06
CHARACTER_EM = [
    ("0123456789", 0.56),
    (".,:;'|!il", 0.25),
    ("()[]{}", 0.34),
    ("-\u2011", 0.38),
    ("%@&mwMW", 0.86),
    ("ABCDEFGHJKLNOPQRSTUVXYZ", 0.65),
    ("frtjI ", 0.33),
]
INLINE_CODE = re.compile(r"`([^`]*)`")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def character_em(character: str) -> float:
    for characters, width in CHARACTER_EM:
        if character in characters:
            return width
    return 0.52


def longest_word_em(cell: str, bold: bool = False) -> float:
    """The width (em) of the longest word of a Markdown table cell, in code or
    not: where the browser need break it no further (it may break a word after
    a hyphen too; the estimate does not count on it)."""
    cell = LINK.sub(lambda m: m.group(1), cell.replace("\\|", "|").replace("**", ""))
    words = []
    for index, piece in enumerate(INLINE_CODE.split(cell)):
        if index % 2 == 1:
            words += [len(word) * CODE_CHARACTER_EM for word in piece.split()]
        else:
            words += [sum(character_em(c) for c in word) for word in piece.split()]
    return max(words, default=0.0) * (BOLD if bold else 1.0)


def cells(line: str) -> List[str]:
    """The cells of one Markdown table line (``\\|`` is a cell's own bar)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def table_width_em(markdown: str) -> float:
    """The narrowest the browser can make a Markdown table (em of its text)."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    columns: List[float] = []
    for number, line in enumerate(lines):
        if number == 1:
            continue  # the alignment row
        for index, cell in enumerate(cells(line)):
            width = longest_word_em(cell, bold=number == 0)
            if index == len(columns):
                columns.append(width)
            columns[index] = max(columns[index], width)
    return sum(width + CELL_PADDING_EM for width in columns)


def tables_of(markdown: str) -> List[str]:
    """Every table of a Markdown text (a run of lines that start with ``|``)."""
    found, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append("\n".join(current))
            current = []
    return found


# the columns of counts that say what a row measured (a setting, not a measurement)
SETTING_COUNTS = {
    "batch",
    "batch_size",
    "beam",
    "call",
    "documents",
    "pages",
    "paragraphs",
    "rows",
    "run",
    "sentences",
    "source_tokens",
    "steps",
    "target_steps",
    "threads",
    "words",
}


def is_setting(key: str, rows: List[dict]) -> bool:
    """Whether a column says what a row measured (a name, or a count such as
    the source length) rather than holding a measured figure."""
    values = [row[key] for row in rows if row.get(key) is not None]
    return key in SETTING_COUNTS or all(isinstance(value, str) for value in values)


def single_table(rows: List[dict], keys: List[str]) -> str:
    lines = [
        "| " + " | ".join(header(key) for key in keys) + " |",
        "|"
        + "|".join("---:" if any(isinstance(r.get(key), (int, float, dict)) for r in rows) else "---" for key in keys)
        + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(figure(key, row.get(key)) for key in keys) + " |")
    return "\n".join(lines)


def table(rows: List[dict], skip=("part", "runs")) -> str:
    """The rows as one Markdown table, or, where that would be wider than
    :data:`TABLE_EM`, as several: each repeats the settings columns (what a
    row measured) and takes the next measured columns that fit."""
    keys: List[str] = []
    for row in rows:
        keys += [key for key in row if key not in keys and key not in skip]
    whole = single_table(rows, keys)
    if table_width_em(whole) <= TABLE_EM:
        return whole
    settings = [key for key in keys if is_setting(key, rows)]
    groups: List[List[str]] = [[]]
    for key in (key for key in keys if key not in settings):
        if groups[-1] and table_width_em(single_table(rows, settings + groups[-1] + [key])) > TABLE_EM:
            groups.append([])
        groups[-1].append(key)
    return "\n\n".join(single_table(rows, settings + group) for group in groups)
