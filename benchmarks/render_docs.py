"""The documentation's figures, generated from the results files (issue 32,
item 3): every table of measurements in the pages and every plot under
``docs/images/`` comes from here, and from nothing but
``benchmarks/results/*.json`` (:mod:`benchmarks.results`).

A page holds a rendered block between two markers::

    <!-- results:NAME -->
    ...what render(NAME) returns...
    <!-- /results -->

``NAME`` is a results file (``led_sparse_cpu``: its header, naming device,
command, commit, date and provenance, then its rows as a table, one table per
``part``; a table wider than the page at 1,280 pixels is split into several
that repeat the settings columns, :func:`table`), or one of the composed
blocks of :data:`COMPOSED` (``headline``: each system's speed against what it
improves on, CPU and GPU, one row per system; ``memory``: the CPU and H100
memory files side by side; ``plot:NAME``: a plot and the files it is drawn
from; ``index``: every results file and its device).

    python benchmarks/render_docs.py            # rewrite the blocks in the pages, redraw the plots
    python benchmarks/render_docs.py --check    # list the blocks that differ from the files (exit 1)
    python benchmarks/render_docs.py --block led_sparse_cpu   # print one block

``tests/test_figures.py`` runs the check, checks every results file and the
plots, keeps every rendered table within the page's width, and refuses a
speed ratio or a MiB/GiB figure written in a page outside a rendered block.
"""

import argparse
import glob
import os
import re
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import results

REPO_ROOT = results.REPO_ROOT
IMAGES = os.path.join(REPO_ROOT, "docs", "images")
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w:.-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


def pages() -> List[str]:
    """Every page that may hold rendered blocks (and that the figure test reads)."""
    found = sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"), recursive=True))
    found += [os.path.join(REPO_ROOT, "README.md")]
    found += sorted(glob.glob(os.path.join(REPO_ROOT, "examples", "*", "README.md")))
    return [path for path in found if os.path.exists(path)]


# ---------------------------------------------------------------- formatting

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


#: the maintainers' folder of real data samples, outside the project
MAINTAINERS_DATA = "../shared/data"


def command_block(command: str) -> str:
    """A results file's command as a code block, one command a line (a file
    joins several with ``; ``): it scrolls inside its block where it is long,
    and is never broken inside an option. The maintainers' data folder
    (``../shared/data``, which a clone does not have) is shown as
    ``RAW_DATA``: a folder of raw-format data sets of the reader's own (the
    results file's notes say what the run read there)."""
    shown = command.replace("; ", "\n").replace(MAINTAINERS_DATA, "RAW_DATA")
    return "```bash\n" + shown + "\n```"


def describe(name: str, record: dict) -> str:
    """The header of a results file: device, torch, threads, repeats, command, commit, date, provenance."""
    device = record["device"]
    threads = record.get("threads")
    parts = [
        f"**{device}**",
        f"torch {record['torch'] or 'not recorded'}",
        f"{threads} thread{'s' if threads != 1 else ''}" if threads else None,
        f"dtype {record['dtype']}" if record.get("dtype") else None,
        ("one run per figure" if record.get("repeats") == 1 else f"median (min-max) of {record['repeats']} repeats")
        if record.get("repeats")
        else "repeats: not recorded per file (see the notes)",
    ]
    lines = [
        "; ".join(part for part in parts if part) + ".",
        "",
        "Command:",
        "",
        command_block(record["command"]),
        "",
        f"Commit `{(record['commit'] or 'not recorded')[:10]}`, {record['date']}; results file "
        f"`benchmarks/results/{name}.json`; "
        + ("measured by the benchmark" if record["provenance"] == "measured" else record["provenance"])
        + (
            f"; load average {record['load_average']} when it started (a shared machine: timings vary, "
            "ratios are taken within each repeat)"
            if record.get("load_average") is not None
            else ""
        )
        + ".",
    ]
    if record.get("notes"):
        lines += ["", record["notes"]]
    return "\n".join(lines)


def render_file(name: str) -> str:
    record = results.load(name)
    out = [describe(name, record), ""]
    parts = list(dict.fromkeys(row.get("part") for row in record["rows"]))
    for part in parts:
        if part is not None:
            out += [f"*{part}*", ""]
        out += [table([row for row in record["rows"] if row.get("part") == part]), ""]
    return "\n".join(out).rstrip("\n")


# ---------------------------------------------------------------- composed blocks


def memory_block() -> str:
    """Activation memory of one training step per system and length, fp32,
    plain and checkpointed, CPU and H100 side by side (measured cells only)."""
    files = {"cpu": results.load("memory_cpu"), "h100": results.load("memory_h100")}
    cells: Dict[Tuple[str, int], Dict[str, dict]] = {}
    for kind, record in files.items():
        for row in record["rows"]:
            if row["dtype"] != "fp32":
                continue
            cells.setdefault((row["arch"], row["source_tokens"]), {})[f"{kind}_{row['variant']}"] = row
    order = list(dict.fromkeys(row["arch"] for row in files["cpu"]["rows"]))
    lines = [
        f"CPU: {files['cpu']['device']}, `benchmarks/results/memory_cpu.json` "
        f"({files['cpu']['provenance']}). H100: {files['h100']['device']}, torch {files['h100']['torch']}, "
        f"`benchmarks/results/memory_h100.json` ({files['h100']['provenance']}).",
        "",
        "CPU commands:",
        "",
        command_block(files["cpu"]["command"]),
        "",
        "H100 command:",
        "",
        command_block(files["h100"]["command"]),
        "",
        "Activation memory of one training step (batch 1, fp32, Adam), MiB above what the model, batch and "
        "optimizer state hold; median (min-max) where a cell has several runs; empty where the cell was not "
        "measured.",
        "",
        "| system | source tokens | CPU plain MiB | CPU checkpointed MiB | H100 plain MiB | H100 checkpointed MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arch in order:
        for n in sorted(n for a, n in cells if a == arch):
            row = cells[(arch, n)]
            values = [
                figure("activation_mib", row[key]["activation_mib"]) if key in row else ""
                for key in ("cpu_plain", "cpu_checkpointed", "h100_plain", "h100_checkpointed")
            ]
            lines.append(f"| {arch} | {n:,} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def index_block() -> str:
    """Every results file: benchmark, device, provenance; and the benchmarks
    that have no GPU figures."""
    lines = [
        "Each results file (`benchmarks/results/NAME.json`), the benchmark that wrote it (`benchmarks/SCRIPT`), "
        "its device, the day it was measured and whether the benchmark wrote it (measured) or it was transcribed "
        "from an earlier log.",
        "",
        "| results file | benchmark | device | day | provenance |",
        "|---|---|---|---|---|",
    ]
    devices: Dict[str, set] = {}
    for name in results.names():
        record = results.load(name)
        devices.setdefault(record["benchmark"], set()).add(record["device_kind"])
        provenance = "measured" if record["provenance"] == "measured" else "transcribed"
        day = record["date"].split("T")[0].replace("/", " to ").replace("-", RANGE_HYPHEN)
        script = os.path.basename(record["benchmark"])
        lines.append(f"| `{name}` | `{script}` | {record['device']} | {day} | {provenance} |")
    scripts = sorted(
        f"benchmarks/{os.path.basename(p)}"
        for p in glob.glob(os.path.join(REPO_ROOT, "benchmarks", "*.py"))
        if os.path.basename(p) not in ("measure.py", "results.py", "harness.py", "render_docs.py", "__init__.py")
    )
    no_gpu = [s for s in scripts if "cuda" not in devices.get(s, set())]
    no_file = [s for s in scripts if s not in devices]
    lines += [
        "",
        "Benchmarks without GPU figures: " + ", ".join(f"`{s}`" for s in no_gpu) + "."
        if no_gpu
        else "Every benchmark has GPU figures.",
    ]
    if no_file:
        lines += ["", "Benchmarks without a results file yet: " + ", ".join(f"`{s}`" for s in no_file) + "."]
    return "\n".join(lines)


# ---------------------------------------------------------------- plots

PLOTS: Dict[str, Tuple[str, List[str], str]] = {
    "memory_vs_length": (
        "memory_vs_length.png",
        ["memory_cpu", "memory_h100"],
        "Activation memory of one training step (fp32, batch 1, without checkpointing) against "
        "the source length, per system; left the CPU, right the H100; bars are min-max where a "
        "cell has several runs.",
    ),
    "speed_ratios": (
        "speed_ratios.png",
        [
            "led_sparse_cpu",
            "sparse_decoder_cpu",
            "sparse_decoder_h100",
            "hierencdec_cpu",
            "hierencdec_h100",
            "hiertransformer_cpu",
            "hiertransformer_h100",
            "pagesum_cpu",
            "pagesum_h100",
            "dape_transformer_cpu",
            "dape_transformer_h100",
        ],
        "Speed of each system against its stock counterpart (above 1: faster), median with min-max "
        "bars over the repeats, as each results file gives it; CPU and H100.",
    ),
    "checkpointing": (
        "checkpointing.png",
        ["activation_checkpointing_cpu", "activation_checkpointing_h100"],
        "Peak memory of one training step with and without --checkpoint-activations (2,048 source "
        "tokens, batch 1, fp32), median with min-max bars; CPU and H100.",
    ),
}


def _rows(name: str) -> List[dict]:
    return results.load(name)["rows"] if os.path.exists(os.path.join(results.RESULTS_DIR, name + ".json")) else []


def _device_title(name: str) -> str:
    """A plot panel's title: the device its file names (short), and the file."""
    path = os.path.join(results.RESULTS_DIR, name + ".json")
    device = results.load(name)["device"] if os.path.exists(path) else "?"
    device = "CPU, model not recorded" if "not recorded" in device else device.replace("(R)", "")
    return f"{device}\n({name}.json)"


def _mmm(cell, invert: bool = False) -> Tuple[float, float, float]:
    median, low, high = cell["median"], cell["minimum"], cell["maximum"]
    low, high = (median if low is None else low), (median if high is None else high)
    return (1 / median, 1 / high, 1 / low) if invert else (median, low, high)


class SpeedPoint(NamedTuple):
    """One figure of the speed-ratio plot and of the headline table."""

    system: str  # the system's key in SYSTEMS
    label: str  # the plot's label
    kind: str  # the device kind: cpu or cuda
    setting: str  # what was measured, for the headline table
    size: Tuple[int, ...]  # orders one system's settings on one device; the headline shows the largest
    ratio: Tuple[float, float, float]  # median, min, max
    source: str  # the results file


def speed_points() -> List[SpeedPoint]:
    """The points of the speed-ratio plot: each a ratio of the stock model's
    time to the system's (a file's time ratio the other way round is
    inverted, min and max swapped)."""
    points = []
    for row in _rows("led_sparse_cpu"):
        if row["model"] == "led_sparse":
            tokens = row["source_tokens"]
            points.append(
                SpeedPoint(
                    "led_sparse",
                    f"led_sparse vs led, generation, {tokens:,} tok",
                    "cpu",
                    f"{tokens:,} tokens",
                    (tokens,),
                    _mmm(row["total_speedup_vs_led"]),
                    "led_sparse_cpu",
                )
            )
    for name, kind in (("sparse_decoder_cpu", "cpu"), ("sparse_decoder_h100", "cuda")):
        for row in _rows(name):
            if row["attention"] == "r=5" and row["batch_size"] == 4 and row["source_tokens"] == 4096:
                steps = row["target_steps"]
                points.append(
                    SpeedPoint(
                        "sparse_decoder",
                        f"sparse r=5 vs full, generation, 4,096 tok, {steps} steps",
                        kind,
                        f"4,096 tokens, batch 4, {steps} steps",
                        (steps,),
                        _mmm(row["total_vs_full"]),
                        name,
                    )
                )
    for name, kind in (("hierencdec_cpu", "cpu"), ("hierencdec_h100", "cuda")):
        for row in _rows(name):
            if row["documents"] == 16 and row.get("run", 2) == 2:
                batch = row.get("batch_size", 1)
                points.append(
                    SpeedPoint(
                        "hierencdec",
                        f"HierEncDec encoder vs BART, batch {batch}",
                        kind,
                        f"batch {batch}",
                        (batch,),
                        _mmm(row["bart_vs_blocked"]),
                        name,
                    )
                )
    for name, kind in (("hiertransformer_cpu", "cpu"), ("hiertransformer_h100", "cuda")):
        for row in _rows(name):
            if "ht_vs_flat" in row and row.get("attention", "default").startswith("default") and row.get("run", 3) == 3:
                tokens = row["source_tokens"]
                points.append(
                    SpeedPoint(
                        "hiertransformer",
                        f"HT vs flat transformer, training, {tokens:,} tok",
                        kind,
                        f"{tokens:,} tokens",
                        (tokens,),
                        _mmm(row["ht_vs_flat"]),
                        name,
                    )
                )
    for name, kind in (("pagesum_cpu", "cpu"), ("pagesum_h100", "cuda")):
        rows = [r for r in _rows(name) if r.get("part") == "encoder" and r.get("dense_vs_pagesum_time")]
        if rows:
            tokens = rows[-1]["source_tokens"]
            points.append(
                SpeedPoint(
                    "pagesum",
                    f"PageSum encoder vs dense BART, {tokens:,} tok",
                    kind,
                    f"{tokens:,} tokens",
                    (tokens,),
                    _mmm(rows[-1]["dense_vs_pagesum_time"]),
                    name,
                )
            )
    for name, kind in (("dape_transformer_cpu", "cpu"), ("dape_transformer_h100", "cuda")):
        rows = [r for r in _rows(name) if r["system"] == "dape"]
        if rows:
            tokens = rows[-1]["source_tokens"]
            points.append(
                SpeedPoint(
                    "dape",
                    f"DAPE vs transformer, training, {tokens:,} tok",
                    kind,
                    f"{tokens:,} tokens",
                    (tokens,),
                    _mmm(rows[-1]["time_vs_transformer"], invert=True),
                    name,
                )
            )
    return points


# The page of every benchmark's tables, which the headline table links to (the
# two pages lie side by side in docs/).
DETAILS_PAGE = "docs/performance-details.md"

# The headline table's rows: per system, its name, what it is measured against
# and the section (anchor) of the details page with its measurements.
SYSTEMS: Dict[str, Tuple[str, str, str]] = {
    "led_sparse": (
        "LED encoder + sparse decoder (`led_sparse`), whole generation",
        "LED (`led`): full cross-attention",
        "#led_sparse-against-led-generation-cpu",
    ),
    "sparse_decoder": (
        "Sparse decoder (`sparse_bart`, r = 5), whole generation",
        "the same model with full cross-attention",
        "#sparse-decoder-generation-benchmarkssparse_decoderpy",
    ),
    "hierencdec": (
        "HierEncDec encoder, 16 documents of 4,096 tokens, forward and backward",
        "BART's encoder",
        "#hierencdec-the-document-blocked-encoder-benchmarkshierencdecpy",
    ),
    "hiertransformer": (
        "Hierarchical Transformer, training",
        "the flat transformer of the same size",
        "#hierarchical-transformer-against-the-flat-transformer-benchmarkshiertransformerpy",
    ),
    "pagesum": (
        "PageSum encoder",
        "BART's dense encoder",
        "#pagesum-encoder-and-decoder-benchmarkspagesumpy",
    ),
    "dape": (
        "DAPE, training",
        "the transformer of the same size",
        "#dape-the-cost-of-dependency-guided-attention-benchmarksdape_transformerpy",
    ),
}


# A CPU run that started at a higher load average than this shared the machine
# with other jobs (the CPUs measured have 2 cores): its ratios moved with the load.
LOADED = 2.0


def headline_block() -> str:
    """One row per system: its speed against what it improves on, on the CPU
    and on the GPU, each the largest setting measured on that device; a figure
    from a loaded machine is marked."""
    points = speed_points()
    devices: Dict[str, List[str]] = {"cpu": [], "cuda": []}
    loaded = False
    lines = ["| system | against | CPU | GPU | measurements |", "|---|---|---|---|---|"]
    for system, (name, against, details) in SYSTEMS.items():
        cells = []
        for kind in ("cpu", "cuda"):
            measured = [point for point in points if point.system == system and point.kind == kind]
            if not measured:
                cells.append("not measured")
                continue
            point = max(measured, key=lambda point: point.size)
            record = results.load(point.source)
            device = record["device"].split(", ")[0]  # a file may name its threads after the model
            devices[kind] += [device] if device not in devices[kind] else []
            median, low, high = point.ratio
            cell = f"{figure('vs', {'median': median, 'minimum': low, 'maximum': high})} at {point.setting}"
            if (record.get("load_average") or 0) > LOADED:
                cell += f" (loaded machine: load average {record['load_average']:g})"
                loaded = True
            cells.append(cell)
        link = os.path.basename(DETAILS_PAGE) + details
        lines.append(f"| {name} | {against} | {cells[0]} | {cells[1]} | [details]({link}) |")
    lines += [
        "",
        "Speed: the time of what the system is measured against over the system's time (above 1: the system "
        "is faster), median (min-max) over the repeats of one run. Where a system was measured at several "
        "settings on a device, the table shows the largest and the plot below shows them all. CPU: "
        + ", ".join(devices["cpu"])
        + "; GPU: "
        + ", ".join(devices["cuda"])
        + ". Each figure's command, threads, dtype and results file are in its section of the details page"
        + (
            '. A figure marked "loaded machine" comes from a run that shared its 2-core CPU with other '
            f"jobs (a load average above {LOADED:g} at its start): the load moved its ratio more than its "
            "spread shows, and its section says what else was measured."
            if loaded
            else "."
        ),
    ]
    return "\n".join(lines)


def draw(name: str) -> str:
    """Draw one plot to ``docs/images/``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    filename = PLOTS[name][0]
    colors = {"cpu": "tab:blue", "cuda": "tab:orange"}
    plain = FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}")
    if name == "memory_vs_length":
        fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
        archs = sorted({row["arch"] for file in ("memory_cpu", "memory_h100") for row in _rows(file)})
        palette = plt.get_cmap("tab20")
        style = {arch: (palette(index % 20), "-" if index % 2 == 0 else "--") for index, arch in enumerate(archs)}
        for axis, (file, title) in zip(axes, (("memory_cpu", "CPU"), ("memory_h100", "NVIDIA H100"))):
            series: Dict[str, List[Tuple[int, Tuple[float, float, float]]]] = {}
            for row in _rows(file):
                if row["dtype"] == "fp32" and row["variant"] == "plain":
                    series.setdefault(row["arch"], []).append((row["source_tokens"], _mmm(row["activation_mib"])))
            for arch, points in sorted(series.items()):
                points.sort()
                xs = [n for n, _ in points]
                ys = [m[0] for _, m in points]
                errors = [[m[0] - m[1] for _, m in points], [m[2] - m[0] for _, m in points]]
                axis.errorbar(
                    xs,
                    ys,
                    yerr=errors,
                    marker="o",
                    markersize=3,
                    capsize=2,
                    label=arch,
                    color=style[arch][0],
                    linestyle=style[arch][1],
                )
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.xaxis.set_major_locator(FixedLocator([256, 512, 1024, 2048, 4096, 8192, 16384]))
            axis.tick_params(axis="x", labelsize=8)
            axis.xaxis.set_minor_locator(NullLocator())
            axis.xaxis.set_major_formatter(plain)
            axis.yaxis.set_major_formatter(plain)
            axis.set_title(_device_title(file), fontsize=10)
            axis.set_xlabel("source tokens")
            axis.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("activation memory of a training step (MiB)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=8, loc="center right")
        fig.subplots_adjust(right=0.82)
    elif name == "speed_ratios":
        points = speed_points()
        fig, axis = plt.subplots(figsize=(10, 0.35 * len(points) + 1.2))
        for index, point in enumerate(points):
            median, low, high = point.ratio
            axis.barh(index, median, color=colors[point.kind], alpha=0.8)
            axis.errorbar(median, index, xerr=[[median - low], [high - median]], color="black", capsize=3)
        axis.set_yticks(range(len(points)), [point.label for point in points], fontsize=8)
        axis.axvline(1.0, color="black", linewidth=0.8)
        axis.set_xscale("log")
        axis.xaxis.set_major_locator(FixedLocator([0.125, 0.25, 0.5, 1, 2, 4, 8, 16]))
        axis.xaxis.set_minor_locator(NullLocator())
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
        axis.set_xlabel("speed against the stock model (stock time / system time; log scale)")
        axis.invert_yaxis()
        from matplotlib.patches import Patch

        axis.legend(
            handles=[Patch(color=colors["cpu"], label="CPU"), Patch(color=colors["cuda"], label="H100")],
            loc="lower right",
        )
    elif name == "checkpointing":
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for axis, (file, title) in zip(
            axes, (("activation_checkpointing_cpu", "CPU"), ("activation_checkpointing_h100", "NVIDIA H100"))
        ):
            rows = _rows(file)
            for offset, key, label in ((-0.2, "plain_mib", "plain"), (0.2, "checkpointed_mib", "checkpointed")):
                values = [_mmm(row[key]) for row in rows]
                axis.bar(
                    [i + offset for i in range(len(rows))],
                    [v[0] for v in values],
                    width=0.4,
                    label=label,
                    yerr=[[v[0] - v[1] for v in values], [v[2] - v[0] for v in values]],
                    capsize=2,
                )
            axis.set_xticks(range(len(rows)), [row["arch"] for row in rows], rotation=30, ha="right", fontsize=8)
            axis.set_title(_device_title(file), fontsize=10)
            axis.set_ylabel("peak memory of a training step (MiB)")
            axis.legend()
    else:
        raise KeyError(name)
    if name != "memory_vs_length":
        fig.tight_layout()
    os.makedirs(IMAGES, exist_ok=True)
    path = os.path.join(IMAGES, filename)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def plot_block(name: str) -> str:
    filename, sources, caption = PLOTS[name]
    files = ", ".join(f"`benchmarks/results/{source}.json`" for source in sources)
    return f"![{caption}](images/{filename})\n\n{caption} Drawn from {files}."


COMPOSED: Dict[str, Callable[[], str]] = {"memory": memory_block, "index": index_block, "headline": headline_block}


def render(name: str) -> str:
    """The body of the block ``NAME`` (without its markers)."""
    if name in COMPOSED:
        return COMPOSED[name]()
    if name.startswith("plot:"):
        return plot_block(name[len("plot:") :])
    return render_file(name)


def blocks(text: str) -> List[Tuple[str, str]]:
    """``(name, body)`` of every rendered block of a page."""
    return [(m.group("name"), m.group("body")) for m in BLOCK.finditer(text)]


def body(name: str) -> str:
    """What stands between the markers of block ``NAME``: its rendering, set
    off by blank lines so that Markdown reads its tables."""
    return "\n" + render(name) + "\n\n"


def rendered(text: str) -> str:
    """The page with every block re-rendered."""
    return BLOCK.sub(lambda m: m.group(1) + body(m.group("name")) + m.group(4), text)


def check() -> List[str]:
    """The blocks that differ from what their files render, by page and name."""
    stale = []
    for path in pages():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        for (name, body), (_, new) in zip(blocks(text), blocks(rendered(text))):
            if body != new:
                stale.append(f"{os.path.relpath(path, REPO_ROOT)}: block {name}")
    return stale


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list the blocks that differ")
    parser.add_argument("--block", help="print one block and exit")
    parser.add_argument("--no-plots", action="store_true", help="rewrite the pages only")
    options = parser.parse_args(argv)
    if options.block:
        print(render(options.block))
        return 0
    if options.check:
        stale = check()
        print("\n".join(stale) if stale else "every rendered block matches its results files")
        return 1 if stale else 0
    for path in pages():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        new = rendered(text)
        if new != text:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(new)
            print(f"rewrote {os.path.relpath(path, REPO_ROOT)}")
    if not options.no_plots:
        for name in PLOTS:
            print(f"drew {os.path.relpath(draw(name), REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
