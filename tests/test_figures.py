"""Every figure in the documentation comes from a results file (issue 32,
item 3): the files name their command, commit, date, device, torch and
threads (:func:`benchmarks.results.problems`); every rendered block in a page
is what ``benchmarks/render_docs.py`` makes of the files; every plot a page
shows exists; and no page states a speed ratio (``1.24x``) or a MiB/GiB figure
outside a rendered block."""

import os
import re

import pytest

from benchmarks import render_docs, results

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a speed ratio (1.24x, 3x) or a memory figure (67,355 MiB, 9.9 GiB)
FIGURE = re.compile(r"(?<![\w.\-/])\d[\d,]*(?:\.\d+)?(?:x(?![\w])|\s?(?:MiB|GiB)\b)")
# the quickstart's ROUGE table is checked by tests/test_quickstart.py; it holds no such figure, nothing to exempt.
# Figures that are not measurements of this code: a paper's, a target, arithmetic on a formula (page: figures).
NOT_MEASUREMENTS = {
    "examples/hierencdec/README.md": {
        "19.5x": "the paper's Rotten Tomatoes figure",
        "4 GiB": "4 * 16 * 4096^2 * 4 bytes, the dense mask's size",
    },
    "examples/hiertransformer/README.md": {"0.8x": "the target"},
    "docs/evaluation.md": {"4 GiB": "mdsfair-compare's memory limit for --samples, a setting"},
    "docs/reliability.md": {"4 GiB": "mdsfair-compare's memory limit for --samples, a setting"},
    "examples/sparse_decoder/README.md": {
        "29x": "the KL weight the paper's lambda implies (CNNDM)",
        "331x": "the same, for the longest data set",
        "1.5x": "the paper's target",
    },
}


def relative(path):
    return os.path.relpath(path, REPO_ROOT)


@pytest.mark.parametrize("name", results.names())
def test_every_results_file_names_its_command_commit_date_device_torch_and_threads(name):
    record = results.load(name)
    assert results.problems(record) == [], f"benchmarks/results/{name}.json: {results.problems(record)}"
    assert os.path.exists(os.path.join(REPO_ROOT, record["benchmark"])), record["benchmark"]


def test_a_results_file_without_its_device_or_command_is_refused():
    record = results.load("led_sparse_cpu")
    assert results.problems(record) == []
    for key in ("command", "commit", "date", "device", "torch", "threads"):
        broken = {k: v for k, v in record.items() if k != key}
        assert any(repr(key) in problem for problem in results.problems(broken)), key
    assert results.problems(dict(record, device="")) == ["no device named"]
    assert results.problems(dict(record, threads=None)) == ["'threads' is null"]  # measured: no nulls
    transcribed = dict(record, threads=None, provenance="transcribed from README.md at d3c96a8")
    assert results.problems(transcribed) == []
    assert results.problems(dict(record, rows=[{"s": {"median": 1.0}}]))  # a spread without its min and max


def test_every_rendered_block_is_what_the_renderer_makes_of_the_results_files():
    stale = render_docs.check()
    assert not stale, "blocks differ from their results files (run python benchmarks/render_docs.py): " + "; ".join(
        stale
    )


def test_the_pages_that_carry_figures_render_them_and_every_plot_they_show_exists():
    shown = set()
    for path in render_docs.pages():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        for name, _ in render_docs.blocks(text):
            if name.startswith("plot:"):
                shown.add(name[len("plot:") :])
            elif name not in render_docs.COMPOSED:
                assert name in results.names(), f"{relative(path)}: block {name} names no results file"
        assert text.count("<!-- results:") == text.count("<!-- /results -->"), f"{relative(path)}: unclosed block"
    with open(os.path.join(REPO_ROOT, "docs/performance.md"), encoding="utf-8") as handle:
        performance = handle.read()
    assert "<!-- results:plot:speed_ratios -->" in performance and "<!-- results:index -->" in performance
    with open(os.path.join(REPO_ROOT, "docs/scaling.md"), encoding="utf-8") as handle:
        scaling = handle.read()
    assert "<!-- results:plot:memory_vs_length -->" in scaling and "<!-- results:plot:checkpointing -->" in scaling
    assert shown >= set(render_docs.PLOTS)
    for name in shown:
        path = os.path.join(render_docs.IMAGES, render_docs.PLOTS[name][0])
        assert os.path.getsize(path) > 1000, f"plot {relative(path)} missing (run python benchmarks/render_docs.py)"


def test_the_led_sparse_table_in_the_components_page_is_rendered_from_its_results_file():
    with open(os.path.join(REPO_ROOT, "docs/components.md"), encoding="utf-8") as handle:
        page = handle.read()
    assert ("led_sparse_cpu", render_docs.body("led_sparse_cpu")) in render_docs.blocks(page)


def test_the_renderer_formats_a_spread_and_a_ratio_by_their_keys():
    assert (
        render_docs.figure("total_speedup_vs_led", {"median": 3.8416, "minimum": 3.2798, "maximum": 3.9353})
        == "3.84x (3.28-3.94)"
    )
    assert render_docs.figure("peak_mib", 67355) == "67,355"
    assert render_docs.figure("seconds", {"median": 0.1234, "minimum": None, "maximum": None}) == "0.123"
    assert render_docs.figure("source_tokens", 16384) == "16,384"
    page = "a\n<!-- results:led_sparse_cpu -->\nold\n<!-- /results -->\nb\n"
    assert render_docs.blocks(render_docs.rendered(page)) == [("led_sparse_cpu", render_docs.body("led_sparse_cpu"))]


def stray_figures(text):
    """The ratio and memory figures of a page outside its rendered blocks."""
    outside = render_docs.BLOCK.sub("", text)
    return [m.group(0) for m in FIGURE.finditer(outside)]


def test_the_stray_figure_pattern():
    assert stray_figures("decoding 14.3x faster, 67,355 MiB (67 GB), 9.9 GiB, 3x less") == [
        "14.3x",
        "67,355 MiB",
        "9.9 GiB",
        "3x",
    ]
    assert stray_figures("0x1f, d256x4, --max-tokens 4096, a 24 GB GPU, P x L, v1.2x") == []
    assert stray_figures("<!-- results:x -->\n1.24x and 5 MiB\n<!-- /results -->\n") == []


def test_no_page_states_a_speed_ratio_or_a_memory_figure_outside_a_rendered_block():
    found = {}
    for path in render_docs.pages():
        with open(path, encoding="utf-8") as handle:
            figures = stray_figures(handle.read())
        figures = [f for f in figures if f not in NOT_MEASUREMENTS.get(relative(path), {})]
        if figures:
            found[relative(path)] = figures[:8]
    assert not found, (
        f"figures written by hand (render them from a results file with benchmarks/render_docs.py instead): {found}"
    )
