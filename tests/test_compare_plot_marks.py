"""``mdsfair-compare --plot``: every significance mark (the star and p-value a
tested row carries) lies inside its panel's frame, clear of the frame's lines,
whichever row the baseline is and however many rows there are. The marks are
measured on the drawn figure with matplotlib's renderer (Agg), in pixels."""

import pytest

from mdsfair.evaluation.plot import draw_comparison

METRICS = ["rouge-1", "rouge-2"]
TITLES = {"rouge-1": "ROUGE-1", "rouge-2": "ROUGE-2"}


def comparison(count, baseline_index):
    """``count`` systems, the best on top, the baseline at ``baseline_index``;
    every other system tested against it, one significant and one not."""
    rows, tests = [], {}
    for index in range(count):
        score = 0.45 - 0.03 * index
        rows.append(
            {
                "name": f"system-{index}",
                "published": False,
                "scores": {"rouge-1": score, "rouge-2": score / 2},
                "ci": {"rouge-1": (score - 0.02, score + 0.02), "rouge-2": (score / 2 - 0.01, score / 2 + 0.01)},
            }
        )
        if index != baseline_index:
            p = 0.001 if index % 2 == 0 else 0.412
            tests[f"system-{index}"] = {metric: {"p_randomization_adjusted": p} for metric in METRICS}
    return rows, tests, f"system-{baseline_index}"


@pytest.mark.parametrize("count, baseline_index", [(2, 1), (3, 2), (4, 1), (8, 7), (3, 0)])
@pytest.mark.parametrize("caption", ["", "3 rows; bars: 95% bootstrap CI (1000 resamples)"])
def test_every_mark_lies_inside_its_frame_and_off_its_lines(count, baseline_index, caption):
    import matplotlib.pyplot as plt

    rows, tests, baseline = comparison(count, baseline_index)
    figure = draw_comparison(rows, METRICS, TITLES, "F1", baseline, tests, 0.05, caption)
    try:
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        marks = 0
        for axis in figure.axes:
            frame = axis.get_window_extent(renderer)
            spines = {side: axis.spines[side].get_window_extent(renderer) for side in ("top", "right", "bottom")}
            for mark in axis.texts:
                marks += 1
                extent = mark.get_window_extent(renderer)
                where = f"{axis.get_title()}: mark {mark.get_text()!r} at {extent.bounds}, frame {frame.bounds}"
                assert figure.bbox.x0 <= extent.x0 and extent.x1 <= figure.bbox.x1, where
                assert figure.bbox.y0 <= extent.y0 and extent.y1 <= figure.bbox.y1, where
                assert frame.x0 < extent.x0 and extent.x1 < frame.x1, where
                assert frame.y0 < extent.y0 and extent.y1 < frame.y1, where
                for side, spine in spines.items():
                    assert not extent.overlaps(spine), f"{where} crosses the {side} line"
        assert marks == (count - 1) * len(METRICS)
    finally:
        plt.close(figure)
