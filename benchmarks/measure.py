"""Peak memory and median time of one step, the same way in every benchmark.

CUDA: ``torch.cuda.max_memory_allocated`` above what was allocated before the
step. CPU: the growth of the process's peak resident size (``ru_maxrss``) over
its resident size just before the step, so run each configuration in a fresh
process for the figure to be its own.
"""
import multiprocessing
import os
import resource
import time
from typing import Callable, Dict, Optional

import torch


def current_rss_bytes() -> int:
    """Resident size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory_and_median_time(
    step: Callable[[], object], device: str, repeats: int, warm_up: bool = True
) -> Dict[str, Optional[float]]:
    """Run ``step`` once to warm up (unless ``warm_up`` is False: then the
    memory step is the first), once to measure peak memory, then ``repeats``
    timed times; returns ``{"peak_mib", "seconds"}`` (median; None when
    ``repeats`` is 0)."""
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
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    seconds = sorted(times)[len(times) // 2] if times else None
    return {"peak_mib": max(peak, 0) / 2**20, "seconds": seconds}


def in_fresh_process(function: Callable[[dict], dict], config: dict) -> dict:
    """``function(config)``; on CPU in a fresh forked process, so that the
    peak resident size it measures is this configuration's own."""
    if config["device"] != "cpu":
        return function(config)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(function, (config,))
