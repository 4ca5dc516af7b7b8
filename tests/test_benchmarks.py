"""benchmarks/measure.py: the median, min and max of a step's timed repeats and
the ``MEDIAN (MIN-MAX)`` format every benchmark prints (issue 23.5), checked
on a step whose durations a fake clock controls; and that every benchmark
script still imports (no heavy benchmark runs here)."""
import glob
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from benchmarks import measure

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeClock:
    """``time.perf_counter`` that advances only when the step says so: the
    ``k``-th call of :meth:`step` takes ``durations[k]`` seconds."""

    def __init__(self, durations):
        self.now, self.durations, self.calls = 0.0, list(durations), 0

    def perf_counter(self):
        return self.now

    def step(self):
        self.now += self.durations[self.calls]
        self.calls += 1


def timed_with(monkeypatch, durations, repeats, warm_up=True):
    clock = FakeClock(durations)
    monkeypatch.setattr(measure, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    result = measure.peak_memory_and_median_time(clock.step, "cpu", repeats, warm_up=warm_up)
    assert clock.calls == len(durations)
    return result


def test_median_min_max_of_an_odd_number_of_repeats(monkeypatch):
    # warm-up and memory steps (100 s each) are not timed
    result = timed_with(monkeypatch, [100.0, 100.0, 0.3, 0.1, 0.5], repeats=3)
    assert result["seconds"] == pytest.approx(0.3)  # the middle one, as before
    assert result["seconds_min"] == pytest.approx(0.1)
    assert result["seconds_max"] == pytest.approx(0.5)
    assert result["seconds_each"] == pytest.approx([0.3, 0.1, 0.5])  # in the order run


def test_median_of_an_even_number_of_repeats_is_the_mean_of_the_middle_two(monkeypatch):
    result = timed_with(monkeypatch, [100.0, 0.4, 0.1, 0.2, 0.9], repeats=4, warm_up=False)
    assert result["seconds"] == pytest.approx(0.3)
    assert (result["seconds_min"], result["seconds_max"]) == pytest.approx((0.1, 0.9))


def test_no_repeats_times_nothing(monkeypatch):
    result = timed_with(monkeypatch, [1.0, 1.0], repeats=0)
    assert (result["seconds"], result["seconds_min"], result["seconds_max"]) == (None, None, None)
    assert result["seconds_each"] == []


def test_format_median_min_max():
    assert measure.format_median_min_max(0.1234, 0.1, 0.15) == "0.123 (0.100-0.150)"
    assert measure.format_median_min_max(1.24, 1.2, 1.414, ".2f", "x") == "1.24x (1.20-1.41)"
    assert measure.format_median_min_max(21345.6, 20000, 23456.7, ",.0f") == "21,346 (20,000-23,457)"
    assert measure.spread([3.0, 1.0, 2.0]).scaled(1e3).format(".0f", " ms") == "2000 ms (1000-3000)"


def test_spread_needs_a_repeat():
    with pytest.raises(ValueError, match="at least one repeat"):
        measure.spread([])


def test_interleaved_ratio_is_the_spread_of_per_repeat_ratios():
    # repeat i timed A and B back to back: the load of repeat 2 doubles both
    ratio = measure.interleaved_ratio([2.0, 4.0, 2.2], [1.0, 2.0, 1.0])
    assert tuple(ratio) == pytest.approx((2.0, 2.0, 2.2))


def test_separate_ratio_is_median_over_median_with_per_pair_min_max():
    ratio = measure.separate_ratio([3.0, 1.0, 2.0], [1.0, 2.0, 4.0])
    assert ratio.median == pytest.approx(2.0 / 2.0)
    # pairs in order: 3/1, 1/2, 2/4
    assert (ratio.minimum, ratio.maximum) == pytest.approx((0.5, 3.0))
    with pytest.raises(ValueError, match="as many repeats"):
        measure.separate_ratio([1.0, 2.0], [1.0])


def test_every_benchmark_script_imports():
    """A syntax or import error in any benchmark script fails here (one
    process imports them all, runs none)."""
    names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO_ROOT, "benchmarks", "*.py")))
    assert {"measure", "sparse_decoder", "preprocess", "led"} <= set(names)
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module('benchmarks.' + name)\n"
    result = subprocess.run([sys.executable, "-c", code, *names], cwd=REPO_ROOT, capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert result.returncode == 0, result.stderr[-3000:]
