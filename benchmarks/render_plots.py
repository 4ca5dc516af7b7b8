"""The plots of the documentation (``docs/images/``), each drawn from results
files only (:data:`PLOTS`: its file, the results files it reads and its caption):
memory against the source length, the speed ratios of the headline
(:func:`benchmarks.render_headline.speed_points`) and activation checkpointing;
:func:`plot_block` is the block that shows one in a page."""

import os
from typing import Dict, List, Tuple

from benchmarks import results
from benchmarks.render_headline import median_min_max, rows_of, speed_points

IMAGES = os.path.join(results.REPO_ROOT, "docs", "images")

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


def _device_title(name: str) -> str:
    """A plot panel's title: the device its file names (short), and the file."""
    path = os.path.join(results.RESULTS_DIR, name + ".json")
    device = results.load(name)["device"] if os.path.exists(path) else "?"
    device = "CPU, model not recorded" if "not recorded" in device else device.replace("(R)", "")
    return f"{device}\n({name}.json)"


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
        archs = sorted({row["arch"] for file in ("memory_cpu", "memory_h100") for row in rows_of(file)})
        palette = plt.get_cmap("tab20")
        style = {arch: (palette(index % 20), "-" if index % 2 == 0 else "--") for index, arch in enumerate(archs)}
        for axis, (file, title) in zip(axes, (("memory_cpu", "CPU"), ("memory_h100", "NVIDIA H100"))):
            series: Dict[str, List[Tuple[int, Tuple[float, float, float]]]] = {}
            for row in rows_of(file):
                if row["dtype"] == "fp32" and row["variant"] == "plain":
                    series.setdefault(row["arch"], []).append(
                        (row["source_tokens"], median_min_max(row["activation_mib"]))
                    )
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
            rows = rows_of(file)
            for offset, key, label in ((-0.2, "plain_mib", "plain"), (0.2, "checkpointed_mib", "checkpointed")):
                values = [median_min_max(row[key]) for row in rows]
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
