"""``mdsfair-compare --plot FILE.png``: each system's scores with their
confidence intervals and the paired tests' marks against the baseline.

One panel per metric; a row per system (the user's systems filled, published
rows hollow); a horizontal bar is the ``--ci`` interval; the baseline's
score is a dotted line; a system significantly different from the baseline
(approximate randomization, after the chosen correction, at ``--alpha``) has
a star and its p-value beside it. The mark stands at the row's height, right
of the interval's upper end; the rows keep half a row of room above the top
one and below the bottom one, and each panel's x range is widened until its
marks end inside the frame, so no mark crosses an axis line. matplotlib is
imported here only, with the Agg backend, so ``mdsfair-compare`` without
``--plot`` stays light. The picture is drawn in memory and written whole
(:func:`mdsfair.evaluation.outputs.write_bytes_atomic`).
"""

import io
from typing import Dict, Optional, Sequence

from mdsfair.evaluation.outputs import write_bytes_atomic

# the gap between an interval's upper end (or the score) and its mark, in points
MARK_OFFSET_POINTS = 4


def draw_comparison(
    rows: Sequence[Dict],
    metrics: Sequence[str],
    titles: Dict[str, str],
    measure_name: str,
    baseline: Optional[str] = None,
    tests: Optional[Dict[str, Dict[str, Dict[str, float]]]] = None,
    alpha: float = 0.05,
    caption: str = "",
):
    """The comparison's figure (a ``matplotlib.figure.Figure``, not yet saved) of
    ``rows`` (dicts with ``name``, ``published``, ``scores`` {metric: fraction},
    optional ``ci`` {metric: (low, high)})."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(rows)
    figure, axes = plt.subplots(
        1, len(metrics), figsize=(3.2 * len(metrics) + 2.2, 0.45 * count + 1.6), sharey=True, squeeze=False
    )
    positions = list(range(count))[::-1]
    for axis, metric in zip(axes[0], metrics):
        base_value = None
        for y, row in zip(positions, rows):
            value = row["scores"].get(metric)
            if value is None:
                continue
            value *= 100
            ci = (row.get("ci") or {}).get(metric)
            colour = "tab:gray" if row.get("published") else ("tab:red" if row["name"] == baseline else "tab:blue")
            if ci is not None:
                axis.errorbar(
                    value,
                    y,
                    xerr=[[value - 100 * ci[0]], [100 * ci[1] - value]],
                    fmt="none",
                    ecolor=colour,
                    capsize=3,
                    linewidth=1.2,
                )
            axis.plot(value, y, "o", color=colour, markerfacecolor="white" if row.get("published") else colour)
            if row["name"] == baseline:
                base_value = value
            test = ((tests or {}).get(row["name"]) or {}).get(metric)
            if test is not None:
                p = test["p_randomization_adjusted"]
                axis.annotate(
                    f"{'*' if p < alpha else ''} p={p:.3f}",
                    (max(value, 100 * ci[1]) if ci is not None else value, y),
                    xytext=(MARK_OFFSET_POINTS, 0),
                    textcoords="offset points",
                    ha="left",
                    va="center",
                    fontsize=7,
                    color="black" if p < alpha else "dimgray",
                )
        if base_value is not None:
            axis.axvline(base_value, color="tab:red", linestyle=":", linewidth=1)
        axis.set_title(titles[metric])
        axis.set_xlabel(f"{measure_name} x 100")
        axis.grid(axis="x", alpha=0.3)
        axis.margins(x=0.25)
    axes[0][0].set_ylim(-0.6, count - 0.4)
    axes[0][0].set_yticks(positions)
    axes[0][0].set_yticklabels(
        [row["name"] + (" (published)" if row.get("published") else "") for row in rows], fontsize=8
    )
    if caption:
        figure.text(0.01, 0.005, caption, fontsize=7, ha="left", va="bottom", wrap=True)
    layout = (0, 0.06 if caption else 0, 1, 1)
    figure.tight_layout(rect=layout)
    for axis in axes[0]:
        widen_to_hold_marks(axis)
    figure.tight_layout(rect=layout)
    return figure


def widen_to_hold_marks(axis) -> None:
    """Move the panel's right limit so that every mark (a text placed a fixed
    number of points right of its anchor) ends inside the frame. A mark of
    width ``w`` pixels anchored at ``x`` ends inside a frame ``W`` pixels wide
    over ``[x0, x1]`` when ``(x - x0) W / (x1 - x0) + offset + w <= W``, that is
    ``x1 >= x0 + (x - x0) W / (W - offset - w)``; the widest need sets ``x1``."""
    marks = axis.texts
    if not marks:
        return
    renderer = axis.figure.canvas.get_renderer()
    frame = axis.get_window_extent(renderer)
    left, right = axis.get_xlim()
    points_to_pixels = renderer.points_to_pixels(1.0)
    needed = right
    for mark in marks:
        room = frame.width - MARK_OFFSET_POINTS * points_to_pixels - mark.get_window_extent(renderer).width
        if room <= 0:
            continue  # wider than the panel itself: no limit holds it
        anchor = mark.xy[0]
        # a little more than the bound, so that rounding to pixels keeps the mark clear of the frame
        needed = max(needed, left + (anchor - left) * frame.width / room * 1.02)
    axis.set_xlim(left, needed)


def write_png(path: str, figure) -> None:
    """Write ``figure`` (a ``matplotlib.figure.Figure``, e.g. :func:`draw_comparison`'s)
    into the PNG file ``path``, whole, and close it."""
    import matplotlib.pyplot as plt

    picture = io.BytesIO()
    figure.savefig(picture, format="png", dpi=110)
    plt.close(figure)
    write_bytes_atomic(path, picture.getvalue())
