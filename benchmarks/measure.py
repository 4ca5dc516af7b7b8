"""Peak memory and time of one step, the same way in every benchmark, and
the one way every benchmark prints a timing: ``MEDIAN (MIN-MAX)`` over its
repeats (issue 23.5: every speed figure quoted is the median of at least 3
repeats with its min and max).

CUDA: ``torch.cuda.max_memory_allocated`` above what was allocated before the
step. CPU: the growth of the process's peak resident size (``ru_maxrss``) over
its resident size just before the step, so run each configuration in a fresh
process for the figure to be its own.

Ratios of two timed things come in two kinds:

* measured in the same repeat (interleaved, e.g. ``A1 B1 A2 B2 A3 B3``): the
  ratio is computed per repeat and reported as the median (min-max) of those
  per-repeat ratios (:func:`interleaved_ratio`);
* measured separately (all repeats of A, then all of B, often in different
  processes): the ratio reported is median(A) / median(B), with min and max
  over the per-repeat pairs ``A_i / B_i`` taken in order
  (:func:`separate_ratio`). For an odd number of repeats median(A) / median(B)
  lies within that min and max.
"""

import multiprocessing
import os
import resource
import statistics
import time
from typing import Callable, Dict, List, NamedTuple, Sequence, Tuple

import torch


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows:
    the suite runs on AMD and Intel machines whose figures differ."""
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return model


def current_rss_bytes() -> int:
    """Resident size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def format_median_min_max(median: float, minimum: float, maximum: float, spec: str = ".3f", suffix: str = "") -> str:
    """``MEDIAN (MIN-MAX)``, each number formatted with ``spec`` and the median
    followed by ``suffix``: ``format_median_min_max(1.24, 1.2, 1.41, ".2f",
    "x")`` is ``"1.24x (1.20-1.41)"``. The one format of a timing (or a
    throughput, or a ratio of timings) in every benchmark."""
    return f"{median:{spec}}{suffix} ({minimum:{spec}}-{maximum:{spec}})"


class Spread(NamedTuple):
    """Median, min and max of a figure over a benchmark's repeats."""

    median: float
    minimum: float
    maximum: float

    def scaled(self, factor: float) -> "Spread":
        """The same figure in other units (``factor`` > 0: seconds to ms, ...)."""
        return Spread(self.median * factor, self.minimum * factor, self.maximum * factor)

    def format(self, spec: str = ".3f", suffix: str = "") -> str:
        """:func:`format_median_min_max` of this spread."""
        return format_median_min_max(self.median, self.minimum, self.maximum, spec, suffix)


def spread(values: Sequence[float]) -> Spread:
    """Median (for an even count the mean of the middle two), min and max of
    ``values`` (one per repeat)."""
    values = list(values)
    if not values:
        raise ValueError("spread of no values: a figure needs at least one repeat")
    return Spread(statistics.median(values), min(values), max(values))


def _pairs(numerators: Sequence[float], denominators: Sequence[float]) -> List[float]:
    if len(numerators) != len(denominators):
        raise ValueError(f"a ratio needs as many repeats of each side: {len(numerators)} vs {len(denominators)}")
    return [n / d for n, d in zip(numerators, denominators)]


def interleaved_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Spread:
    """Ratio of two things timed in the same repeats: median (min-max) of the
    per-repeat ratios ``numerators[i] / denominators[i]``."""
    return spread(_pairs(numerators, denominators))


def separate_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Spread:
    """Ratio of two things timed separately: median(numerators) /
    median(denominators), with the min and max of the per-repeat pairs
    ``numerators[i] / denominators[i]`` taken in order."""
    pairs = _pairs(numerators, denominators)
    return Spread(statistics.median(numerators) / statistics.median(denominators), min(pairs), max(pairs))


def synchronize(device) -> None:
    """Wait for the work queued on a GPU (``device`` a name or a
    ``torch.device``; nothing to wait for on a CPU)."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed_call(function: Callable[[], object], device) -> Tuple[float, object]:
    """Seconds of one call of ``function``, until the GPU work it queued is
    done, and what the call returned."""
    synchronize(device)
    start = time.perf_counter()
    result = function()
    synchronize(device)
    return time.perf_counter() - start, result


def timed(function: Callable[[], object], device) -> float:
    """Seconds of one call of ``function`` (:func:`timed_call`)."""
    return timed_call(function, device)[0]


def peak_memory_and_median_time(
    step: Callable[[], object], device: str, repeats: int, warm_up: bool = True
) -> Dict[str, object]:
    """Run ``step`` once to warm up (unless ``warm_up`` is False: then the
    memory step is the first), once to measure peak memory, then ``repeats``
    timed times. Returns ``peak_mib``; ``seconds`` (the median of the timed
    runs: the middle one for an odd count, the mean of the middle two for an
    even one), ``seconds_min``, ``seconds_max`` (None when ``repeats`` is 0);
    and ``seconds_each``, the timed runs in order (for per-repeat ratios)."""
    if warm_up:
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        base = current_rss_bytes()
        step()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    times = [timed(step, device) for _ in range(repeats)]
    median, minimum, maximum = spread(times) if times else (None, None, None)
    return {
        "peak_mib": max(peak, 0) / 2**20,
        "seconds": median,
        "seconds_min": minimum,
        "seconds_max": maximum,
        "seconds_each": times,
    }


def allocate_gradients(module: torch.nn.Module) -> None:
    """Give every trained parameter of ``module`` its gradient tensor now, as
    a first backward would: a step's peak memory is then its activations."""
    for parameter in module.parameters():
        if parameter.requires_grad:
            parameter.grad = torch.zeros_like(parameter)


def training_or_forward_step(
    forward: Callable[[], object], loss: Callable[[object], torch.Tensor], train: bool
) -> Callable[[], None]:
    """The step a benchmark measures: ``forward()`` without gradient, or
    (``train``) the backward of ``loss`` of its output."""

    def step():
        if not train:
            with torch.no_grad():
                forward()
            return
        loss(forward()).backward()

    return step


def every_logit_training_step(model: torch.nn.Module, inputs: dict) -> Callable[[], None]:
    """A training step of ``model`` on ``inputs`` whose loss reads every
    logit (the mean log-sum-exp over the vocabulary): forward, backward, then
    the gradients freed."""

    def step():
        logits = model(**inputs)[0]
        logits.float().logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)

    return step


def timed_steps(
    step: Callable[[], object], device: str, steps: int, profile_rows: int = 0, label: str = ""
) -> Dict[str, object]:
    """Peak memory (``peak_mib``) of a first run of ``step``, which is also
    its warm-up, then the seconds of ``steps`` timed runs in order
    (``seconds_each``); with ``profile_rows``, the :func:`profile_table` of
    one more run (``profile``), named ``label``."""
    measured = peak_memory_and_median_time(step, device, steps, warm_up=False)
    result = {"seconds_each": measured["seconds_each"], "peak_mib": measured["peak_mib"]}
    if profile_rows:
        result["profile"] = profile_table(step, device, profile_rows, label)
    return result


def in_fresh_process(function: Callable[[dict], dict], config: dict) -> dict:
    """``function(config)``; on CPU in a fresh forked process, so that the
    peak resident size it measures is this configuration's own."""
    if config["device"] != "cpu":
        return function(config)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(function, (config,))


def in_fresh_process_or_error(function: Callable[[dict], dict], config: dict) -> dict:
    """:func:`in_fresh_process`; a configuration that fails (one that does
    not fit) gives ``{"error": "TYPE: MESSAGE"}`` instead, so that a
    benchmark reports it and still runs the others."""
    try:
        return in_fresh_process(function, config)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error)[:60]}"}


def profile_table(function, device: str, row_limit: int, label: str) -> str:
    """torch.profiler over one call of ``function``: the operators that take
    the most device time (self), those that take the most host time (self),
    and the host-device synchronizations (``aten::item`` and stream or
    device synchronizations) the call made. ``label`` names the call
    ("one decoding, ...", "one training step, ...")."""
    from torch.profiler import ProfilerActivity, profile

    on_cuda = str(device).startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as profiler:
        function()
        if on_cuda:
            torch.cuda.synchronize()
    events = profiler.key_averages()
    synchronizations = {
        event.key: event.count
        for event in events
        if event.key in ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize")
    }
    parts = [f"profile of {label}: host-device synchronizations {synchronizations}"]
    if on_cuda:
        parts.append(events.table(sort_by="self_cuda_time_total", row_limit=row_limit))
    parts.append(events.table(sort_by="self_cpu_time_total", row_limit=row_limit))
    return "\n".join(parts)
