"""Every figure in the documentation comes from a results file (issue 32,
item 3): the files name their command, commit, date, device, torch and
threads (:func:`benchmarks.results.problems`); every rendered block in a page
is what ``benchmarks/render_docs.py`` makes of the files; every plot a page
shows exists; and no page states a speed ratio (``1.24x``) or a MiB/GiB figure
outside a rendered block."""

import os
import re

import pytest

from benchmarks import render_docs, render_headline, render_plots, render_tables, results

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
    assert "<!-- results:headline -->" in performance and "<!-- results:plot:speed_ratios -->" in performance
    with open(os.path.join(REPO_ROOT, render_headline.DETAILS_PAGE), encoding="utf-8") as handle:
        details = handle.read()
    assert "<!-- results:index -->" in details
    with open(os.path.join(REPO_ROOT, "docs/scaling.md"), encoding="utf-8") as handle:
        scaling = handle.read()
    assert "<!-- results:plot:memory_vs_length -->" in scaling and "<!-- results:plot:checkpointing -->" in scaling
    assert shown >= set(render_plots.PLOTS)
    for name in shown:
        path = os.path.join(render_plots.IMAGES, render_plots.PLOTS[name][0])
        assert os.path.getsize(path) > 1000, f"plot {relative(path)} missing (run python benchmarks/render_docs.py)"


def test_the_led_sparse_table_in_the_components_page_is_rendered_from_its_results_file():
    with open(os.path.join(REPO_ROOT, "docs/components.md"), encoding="utf-8") as handle:
        page = handle.read()
    assert ("led_sparse_cpu", render_docs.body("led_sparse_cpu")) in render_docs.blocks(page)


def test_the_renderer_formats_a_spread_and_a_ratio_by_their_keys():
    assert (
        render_tables.figure("total_speedup_vs_led", {"median": 3.8416, "minimum": 3.2798, "maximum": 3.9353})
        == "3.84x (3.28\u20113.94)"  # a non-breaking hyphen: a narrow column wraps at the space only
    )
    assert render_tables.figure("peak_mib", 67355) == "67,355"
    assert render_tables.figure("seconds", {"median": 0.1234, "minimum": None, "maximum": None}) == "0.123"
    assert render_tables.figure("source_tokens", 16384) == "16,384"
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


def test_the_performance_page_opens_with_the_headline_table_and_its_plot():
    """The first table of the page is one row per system against what it
    improves on, its CPU and GPU figures taken from the results files (the
    largest setting of each device); the speed plot follows it; the
    per-benchmark tables are on the details page."""
    with open(os.path.join(REPO_ROOT, "docs/performance.md"), encoding="utf-8") as handle:
        page = handle.read()
    names = [name for name, _ in render_docs.blocks(page)]
    assert names == ["headline", "plot:speed_ratios"]
    assert page.index("<!-- results:headline -->") < page.index("\n## ")  # before the first section
    headline = render_tables.tables_of(render_docs.render("headline"))
    assert len(headline) == 1 and render_tables.tables_of(page) == headline
    lines = headline[0].splitlines()
    assert render_tables.cells(lines[0]) == ["system", "against", "CPU", "GPU", "measurements"]
    rows = {render_tables.cells(line)[0]: render_tables.cells(line) for line in lines[2:]}
    assert len(rows) == len(render_headline.SYSTEMS)
    points = render_headline.speed_points()
    for system, (name, _, details) in render_headline.SYSTEMS.items():
        assert rows[name][4] == f"[details]({os.path.basename(render_headline.DETAILS_PAGE)}{details})"
        for column, kind in ((2, "cpu"), (3, "cuda")):
            measured = [point for point in points if point.system == system and point.kind == kind]
            if not measured:
                assert rows[name][column] == "not measured"
                continue
            largest = max(measured, key=lambda point: point.size)
            median, low, high = largest.ratio
            shown = render_tables.figure("vs", {"median": median, "minimum": low, "maximum": high})
            assert rows[name][column].startswith(f"{shown} at {largest.setting}"), (name, kind)


def test_no_rendered_table_is_wider_than_the_page():
    """At the documentation's default width (1,280 pixels) no table the renderer
    writes needs a sideways scroll: its narrowest layout (every column as wide
    as its longest word) fits :data:`render_tables.TABLE_EM`."""
    wide = []
    for path in render_docs.pages():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        for name, body in render_docs.blocks(text):
            for table in render_tables.tables_of(body):
                width = render_tables.table_width_em(table)
                if width > render_tables.TABLE_EM:
                    wide.append(f"{relative(path)}: block {name}: {width:.1f} em ({table.splitlines()[0][:60]}...)")
    assert not wide, wide


def test_a_wide_table_is_split_into_tables_that_repeat_the_settings():
    rows = [
        {"source_tokens": tokens, "attention": attention}
        | {f"measure_{index}_s": {"median": 12.3456, "minimum": 11.2345, "maximum": 13.4567} for index in range(12)}
        for tokens in (1024, 4096)
        for attention in ("full", "sparse r=5")
    ]
    tables = render_tables.tables_of(render_tables.table(rows))
    assert len(tables) > 1
    measured = []
    for table in tables:
        assert render_tables.table_width_em(table) <= render_tables.TABLE_EM
        header = render_tables.cells(table.splitlines()[0])
        assert header[:2] == ["source tokens", "attention"]
        assert [render_tables.cells(line)[:2] for line in table.splitlines()[2:]] == [
            ["1,024", "full"],
            ["1,024", "sparse r=5"],
            ["4,096", "full"],
            ["4,096", "sparse r=5"],
        ]
        measured += header[2:]
    assert measured == [f"measure {index} s" for index in range(12)]
    narrow = rows[:1]
    narrow[0] = {key: narrow[0][key] for key in ("source_tokens", "attention", "measure_0_s")}
    assert len(render_tables.tables_of(render_tables.table(narrow))) == 1


def test_the_width_of_a_cell_is_that_of_its_longest_word():
    # a spread wraps at its space, never inside "(11.23-13.46)"; code is Roboto Mono at .85 em
    spread = render_tables.figure("x_s", {"median": 12.3456, "minimum": 11.2345, "maximum": 13.4567})
    assert spread == "12.35 (11.23\u201113.46)"
    assert render_tables.longest_word_em(spread) == render_tables.longest_word_em("(11.23\u201113.46)")
    assert render_tables.longest_word_em("`abcdefghij`") == pytest.approx(10 * render_tables.CODE_CHARACTER_EM)
    assert render_tables.longest_word_em("[details](page.html#a-long-anchor)") == (
        render_tables.longest_word_em("details")
    )
    assert render_tables.cells("| a \\| b | `c` |") == ["a \\| b", "`c`"]
