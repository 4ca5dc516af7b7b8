"""The performance headline (``docs/performance.md``): each system's speed
against what it improves on, CPU and GPU, one row per system
(:func:`headline_block`), from the speed points the plot of speed ratios draws
too (:func:`speed_points`); each row links to its section of the details page
(:data:`DETAILS_PAGE`)."""

import os
from typing import Dict, List, NamedTuple, Tuple

from benchmarks import results
from benchmarks.render_tables import figure


def rows_of(name: str) -> List[dict]:
    """The rows of results file ``name``; none where the file is absent."""
    return results.load(name)["rows"] if os.path.exists(os.path.join(results.RESULTS_DIR, name + ".json")) else []


def median_min_max(cell, invert: bool = False) -> Tuple[float, float, float]:
    """A cell's median, minimum and maximum (the median where a bound is not
    recorded); ``invert``: of the reciprocal, min and max swapped."""
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
    for row in rows_of("led_sparse_cpu"):
        if row["model"] == "led_sparse":
            tokens = row["source_tokens"]
            points.append(
                SpeedPoint(
                    "led_sparse",
                    f"led_sparse vs led, generation, {tokens:,} tok",
                    "cpu",
                    f"{tokens:,} tokens",
                    (tokens,),
                    median_min_max(row["total_speedup_vs_led"]),
                    "led_sparse_cpu",
                )
            )
    for name, kind in (("sparse_decoder_cpu", "cpu"), ("sparse_decoder_h100", "cuda")):
        for row in rows_of(name):
            if row["attention"] == "r=5" and row["batch_size"] == 4 and row["source_tokens"] == 4096:
                steps = row["target_steps"]
                points.append(
                    SpeedPoint(
                        "sparse_decoder",
                        f"sparse r=5 vs full, generation, 4,096 tok, {steps} steps",
                        kind,
                        f"4,096 tokens, batch 4, {steps} steps",
                        (steps,),
                        median_min_max(row["total_vs_full"]),
                        name,
                    )
                )
    for name, kind in (("hierencdec_cpu", "cpu"), ("hierencdec_h100", "cuda")):
        for row in rows_of(name):
            if row["documents"] == 16 and row.get("run", 2) == 2:
                batch = row.get("batch_size", 1)
                points.append(
                    SpeedPoint(
                        "hierencdec",
                        f"HierEncDec encoder vs BART, batch {batch}",
                        kind,
                        f"batch {batch}",
                        (batch,),
                        median_min_max(row["bart_vs_blocked"]),
                        name,
                    )
                )
    for name, kind in (("hiertransformer_cpu", "cpu"), ("hiertransformer_h100", "cuda")):
        for row in rows_of(name):
            if "ht_vs_flat" in row and row.get("attention", "default").startswith("default") and row.get("run", 3) == 3:
                tokens = row["source_tokens"]
                points.append(
                    SpeedPoint(
                        "hiertransformer",
                        f"HT vs flat transformer, training, {tokens:,} tok",
                        kind,
                        f"{tokens:,} tokens",
                        (tokens,),
                        median_min_max(row["ht_vs_flat"]),
                        name,
                    )
                )
    for name, kind in (("pagesum_cpu", "cpu"), ("pagesum_h100", "cuda")):
        rows = [r for r in rows_of(name) if r.get("part") == "encoder" and r.get("dense_vs_pagesum_time")]
        if rows:
            tokens = rows[-1]["source_tokens"]
            points.append(
                SpeedPoint(
                    "pagesum",
                    f"PageSum encoder vs dense BART, {tokens:,} tok",
                    kind,
                    f"{tokens:,} tokens",
                    (tokens,),
                    median_min_max(rows[-1]["dense_vs_pagesum_time"]),
                    name,
                )
            )
    for name, kind in (("dape_transformer_cpu", "cpu"), ("dape_transformer_h100", "cuda")):
        rows = [r for r in rows_of(name) if r["system"] == "dape"]
        if rows:
            tokens = rows[-1]["source_tokens"]
            points.append(
                SpeedPoint(
                    "dape",
                    f"DAPE vs transformer, training, {tokens:,} tok",
                    kind,
                    f"{tokens:,} tokens",
                    (tokens,),
                    median_min_max(rows[-1]["time_vs_transformer"], invert=True),
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
