"""The one way a benchmark writes its results file, and the one check of such
a file (issue 32, item 3: every figure in the documentation comes from a file
under ``benchmarks/results/`` that names its command and device).

A results file is one JSON object:

* ``benchmark``: the script (``benchmarks/NAME.py``);
* ``command``: the exact command line; ``commit``: the checkout's commit when
  the run started (the code it measured); ``date``: when it started (UTC);
* ``device``: the CPU model (``/proc/cpuinfo``, :func:`benchmarks.measure.cpu_model`)
  or the GPU's name; ``device_kind``: ``cpu`` or ``cuda``; ``torch``: torch's
  version; ``threads``: torch's intra-op threads (``None`` on a GPU where a
  transcribed log did not say);
* ``repeats``: how many timed repeats each median is over (``None`` where a
  transcribed log did not say);
* ``provenance``: ``measured`` (written by the benchmark) or ``transcribed
  from README.md at COMMIT`` (a figure of a run's log quoted in README.md that
  cannot be re-measured here, e.g. a GPU figure; its missing fields are ``None``);
* ``load_average``: the 1-minute load average when the run started (a shared
  machine slows timings, never memory);
* ``rows``: one object per measured cell; a timed figure (or a ratio of
  timed figures) is ``{"median": M, "minimum": A, "maximum": B}`` (``A`` and
  ``B`` ``None`` where a transcribed log gave only the median);
* anything else the benchmark wants to say (``dtype``, ``notes``, ...).

``benchmarks/render_docs.py`` renders the documentation's tables and plots
from these files; ``tests/test_figures.py`` checks the files with
:func:`problems` and the pages against the renderer.
"""

import datetime
import json
import os
import re
import subprocess
import sys
from typing import Dict, Iterable, List, Optional, Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO_ROOT, "benchmarks", "results")
REQUIRED = (
    "benchmark",
    "command",
    "commit",
    "date",
    "device",
    "device_kind",
    "torch",
    "threads",
    "repeats",
    "provenance",
    "rows",
)
# a transcribed log may lack these; a measured file may not
MAY_BE_NULL_WHEN_TRANSCRIBED = ("threads", "repeats", "torch", "commit")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
COMMAND = re.compile(r"^(\w+=\S+ )*python benchmarks/\w+\.py")


def current_commit() -> str:
    """The checkout's commit (read when a run starts: the code it measures)."""
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT).stdout.strip()


def device_name(device: str) -> str:
    """The CPU model or the GPU's name."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(0)
    from benchmarks.measure import cpu_model

    return cpu_model()


def cell(median, minimum=None, maximum=None) -> Dict[str, Optional[float]]:
    """A figure with its spread (``median``, ``minimum``, ``maximum``)."""
    return {"median": median, "minimum": minimum, "maximum": maximum}


def spread_cell(spread) -> Dict[str, float]:
    """A :class:`benchmarks.measure.Spread` (or a 3-tuple) as a results cell."""
    median, minimum, maximum = spread
    return cell(median, minimum, maximum)


def repeats_cell(values: Sequence[float], scale: float = 1.0) -> Dict[str, float]:
    """The median, min and max of one figure per repeat, times ``scale``
    (seconds to milliseconds, ...), as a results cell."""
    from benchmarks.measure import spread

    return spread_cell(spread(values).scaled(scale))


class ResultsFile:
    """The results file of one benchmark run: its header (command, commit,
    date, device, torch, threads, repeats) is fixed when the run starts;
    :meth:`write` (re)writes the file with the rows so far, so that a long
    run interrupted keeps what it measured."""

    def __init__(
        self, path: str, script: str, argv: Optional[Sequence[str]], device: str, repeats: Optional[int], **fields
    ):
        import torch

        self.path = path
        arguments = list(argv if argv is not None else sys.argv[1:])
        # the environment that sets the threads is part of the command
        environment = [f"{name}={os.environ[name]}" for name in THREAD_VARIABLES if name in os.environ]
        self.header = {
            "benchmark": f"benchmarks/{script}.py",
            "command": " ".join([*environment, f"python benchmarks/{script}.py", *arguments]),
            "commit": current_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device_name(device),
            "device_kind": "cuda" if str(device).startswith("cuda") else "cpu",
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "repeats": repeats,
            "provenance": "measured",
            "load_average": round(os.getloadavg()[0], 2),
        }
        self.header.update(fields)

    def write(self, rows: Iterable[dict], **fields) -> dict:
        record = dict(self.header, **fields)
        record["rows"] = list(rows)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)
            handle.write("\n")
        return record


def add_argument(parser, default: Optional[str] = None) -> None:
    """``--json FILE``, the results file, the same flag in every benchmark."""
    parser.add_argument(
        "--json",
        metavar="FILE",
        default=default,
        help="write the results file (command, commit, date, device, torch, threads, repeats, "
        "median/min/max per cell; see benchmarks/results.py)",
    )


def problems(record: dict) -> List[str]:
    """What a results file lacks: a missing field, a measured file with a null
    header field, a row cell whose spread is malformed."""
    found = [f"no {key!r}" for key in REQUIRED if key not in record]
    transcribed = str(record.get("provenance", "")).startswith("transcribed from ")
    if not transcribed and record.get("provenance") != "measured":
        found.append(f"provenance {record.get('provenance')!r} is neither 'measured' nor 'transcribed from ...'")
    for key in REQUIRED:
        if key in record and record[key] is None and not (transcribed and key in MAY_BE_NULL_WHEN_TRANSCRIBED):
            found.append(f"{key!r} is null")
    if not record.get("device"):
        found.append("no device named")
    if not COMMAND.match(str(record.get("command") or "")):
        found.append(f"command {record.get('command')!r} is not a benchmarks/ command")
    for index, row in enumerate(record.get("rows") or []):
        for key, value in row.items():
            if isinstance(value, dict) and set(value) >= {"median"}:
                if set(value) != {"median", "minimum", "maximum"}:
                    found.append(f"row {index} {key}: a spread has exactly median, minimum, maximum")
    if not record.get("rows"):
        found.append("no rows")
    return found


def load(name: str) -> dict:
    """``benchmarks/results/NAME.json``."""
    with open(os.path.join(RESULTS_DIR, name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def names() -> List[str]:
    """Every results file's name."""
    return sorted(f[:-5] for f in os.listdir(RESULTS_DIR) if f.endswith(".json"))
