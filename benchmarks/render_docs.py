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
that repeat the settings columns), or one of the composed blocks of
:data:`COMPOSED` (``headline``: each system's speed against what it improves
on, CPU and GPU, one row per system; ``memory``: the CPU and H100 memory files
side by side; ``plot:NAME``: a plot and the files it is drawn from; ``index``:
every results file and its device).

This module holds the blocks and the command; the tables are
:mod:`benchmarks.render_tables`, the headline :mod:`benchmarks.render_headline`
and the plots :mod:`benchmarks.render_plots`.

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
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import results
from benchmarks.render_headline import headline_block
from benchmarks.render_plots import PLOTS, draw, plot_block
from benchmarks.render_tables import RANGE_HYPHEN, figure, table

REPO_ROOT = results.REPO_ROOT
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w:.-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


def pages() -> List[str]:
    """Every page that may hold rendered blocks (and that the figure test reads)."""
    found = sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"), recursive=True))
    found += [os.path.join(REPO_ROOT, "README.md")]
    found += sorted(glob.glob(os.path.join(REPO_ROOT, "examples", "*", "README.md")))
    return [path for path in found if os.path.exists(path)]


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
        if os.path.basename(p)
        not in (
            "measure.py",
            "results.py",
            "harness.py",
            "against_full.py",
            "render_docs.py",
            "render_tables.py",
            "render_headline.py",
            "render_plots.py",
            "__init__.py",
        )
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
