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
``part``), or one of the composed blocks of :data:`COMPOSED` (``memory``:
the CPU and H100 memory files side by side; ``plot:NAME``: a plot and the
files it is drawn from; ``index``: every results file and its device).

    python benchmarks/render_docs.py            # rewrite the blocks in the pages, redraw the plots
    python benchmarks/render_docs.py --check    # list the blocks that differ from the files (exit 1)
    python benchmarks/render_docs.py --block led_sparse_cpu   # print one block

``tests/test_figures.py`` runs the check, checks every results file and the
plots, and refuses a speed ratio or a MiB/GiB figure written in a page
outside a rendered block.
"""

import argparse
import glob
import os
import re
import sys
from typing import Callable, Dict, List, Optional, Tuple

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


def figure(key: str, value) -> str:
    """One table cell: a number, a median (min-max), text, or nothing."""
    if value is None:
        return ""
    if isinstance(value, dict):
        median, minimum, maximum = value["median"], value["minimum"], value["maximum"]
        spec, suffix = spec_of(key, median)
        if minimum is None or maximum is None:
            return f"{median:{spec}}{suffix}"
        return f"{median:{spec}}{suffix} ({minimum:{spec}}-{maximum:{spec}})"
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
}


def header(key: str) -> str:
    words = key.split("_")
    return " ".join(HEADER_WORDS.get(word, word) for word in words).replace("per s", "/ s")


def table(rows: List[dict], skip=("part", "runs")) -> str:
    keys: List[str] = []
    for row in rows:
        keys += [key for key in row if key not in keys and key not in skip]
    lines = [
        "| " + " | ".join(header(key) for key in keys) + " |",
        "|"
        + "|".join("---:" if any(isinstance(r.get(key), (int, float, dict)) for r in rows) else "---" for key in keys)
        + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(figure(key, row.get(key)) for key in keys) + " |")
    return "\n".join(lines)


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
        f"Command: `{record['command']}`",
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
        f"CPU commands: `{files['cpu']['command']}`",
        "",
        f"H100 command: `{files['h100']['command']}`",
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
    lines = ["| results file | benchmark | device | date | provenance |", "|---|---|---|---|---|"]
    devices: Dict[str, set] = {}
    for name in results.names():
        record = results.load(name)
        devices.setdefault(record["benchmark"], set()).add(record["device_kind"])
        provenance = "measured" if record["provenance"] == "measured" else "transcribed"
        lines.append(
            f"| `{name}.json` | `{record['benchmark']}` | {record['device']} | {record['date']} | {provenance} |"
        )
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


def speed_points() -> List[Tuple[str, str, Tuple[float, float, float]]]:
    """``(label, device kind, (median, min, max))`` of the speed-ratio plot:
    each a ratio of the stock model's time to the system's (a file's time
    ratio the other way round is inverted, min and max swapped)."""
    points = []
    for row in _rows("led_sparse_cpu"):
        if row["model"] == "led_sparse":
            points.append(
                (
                    f"led_sparse vs led, generation, {row['source_tokens']:,} tok",
                    "cpu",
                    _mmm(row["total_speedup_vs_led"]),
                )
            )
    for name, kind in (("sparse_decoder_cpu", "cpu"), ("sparse_decoder_h100", "cuda")):
        for row in _rows(name):
            if row["attention"] == "r=5" and row["batch_size"] == 4 and row["source_tokens"] == 4096:
                points.append(
                    (
                        f"sparse r=5 vs full, generation, 4,096 tok, {row['target_steps']} steps",
                        kind,
                        _mmm(row["total_vs_full"]),
                    )
                )
    for name, kind in (("hierencdec_cpu", "cpu"), ("hierencdec_h100", "cuda")):
        for row in _rows(name):
            if row["documents"] == 16 and row.get("run", 2) == 2:
                points.append(
                    (
                        f"HierEncDec encoder vs BART, batch {row.get('batch_size', 1)}",
                        kind,
                        _mmm(row["bart_vs_blocked"]),
                    )
                )
    for name, kind in (("hiertransformer_cpu", "cpu"), ("hiertransformer_h100", "cuda")):
        for row in _rows(name):
            if "ht_vs_flat" in row and row.get("attention", "default").startswith("default") and row.get("run", 3) == 3:
                points.append(
                    (f"HT vs flat transformer, training, {row['source_tokens']:,} tok", kind, _mmm(row["ht_vs_flat"]))
                )
    for name, kind in (("pagesum_cpu", "cpu"), ("pagesum_h100", "cuda")):
        rows = [r for r in _rows(name) if r.get("part") == "encoder" and r.get("dense_vs_pagesum_time")]
        if rows:
            row = rows[-1]
            points.append(
                (
                    f"PageSum encoder vs dense BART, {row['source_tokens']:,} tok",
                    kind,
                    _mmm(row["dense_vs_pagesum_time"]),
                )
            )
    for name, kind in (("dape_transformer_cpu", "cpu"), ("dape_transformer_h100", "cuda")):
        rows = [r for r in _rows(name) if r["system"] == "dape"]
        if rows:
            row = rows[-1]
            points.append(
                (
                    f"DAPE vs transformer, training, {row['source_tokens']:,} tok",
                    kind,
                    _mmm(row["time_vs_transformer"], invert=True),
                )
            )
    return points


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
        for index, (label, kind, (median, low, high)) in enumerate(points):
            axis.barh(index, median, color=colors[kind], alpha=0.8)
            axis.errorbar(median, index, xerr=[[median - low], [high - median]], color="black", capsize=3)
        axis.set_yticks(range(len(points)), [label for label, _, _ in points], fontsize=8)
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


COMPOSED: Dict[str, Callable[[], str]] = {"memory": memory_block, "index": index_block}


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
