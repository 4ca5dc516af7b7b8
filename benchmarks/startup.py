"""Start-up: how long ``--help`` of every console script takes, each in a fresh interpreter,
against two baselines measured in the same repeats: the interpreter alone (``python -c pass``)
and importing torch and fairseq (``python -c "import torch, fairseq"``), what a command
that builds fairseq's parser pays before its first line.

The commands are setup.py's console scripts, each run as its script runs it (its entry
point called with ``--help``) with this checkout first on the path, plus ``--help-all`` of
``mdsfair-train`` and ``mdsfair-generate`` (fairseq's own help, which their ``--help``
printed before it printed mdsfair's short help). Each repeat runs every command and both
baselines once, in turn, after one untimed round that fills the file cache. Per process: wall
seconds (from start to exit), CPU seconds (its user + system time, which another job on the
machine slows less than the wall time) and whether it imported torch or fairseq. Reported:
median (min-max) over the repeats; each command's wall and CPU time over the torch + fairseq
import's, per repeat (below 1: the command answers before torch and fairseq would be
imported); its wall time beyond the bare interpreter's, per repeat.
``tests/test_startup.py`` checks, without timing, that no ``--help`` imports torch or fairseq.

    python benchmarks/startup.py
    python benchmarks/startup.py --repeats 5 --json benchmarks/results/startup_cpu.json
"""

import ast
import os
import resource
import subprocess
import sys
import time
from typing import Dict, List, NamedTuple, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import harness, results
from benchmarks.measure import Spread, cpu_model, interleaved_ratio, spread

#: The flags each command's extra rows run with, besides ``--help``.
EXTRA_RUNS = {"mdsfair-train": ("--help-all",), "mdsfair-generate": ("--help-all",)}

#: The baselines: label -> the Python code the process runs.
INTERPRETER = "python -c pass"
TORCH_FAIRSEQ = 'python -c "import torch, fairseq"'
BASELINES = {INTERPRETER: "pass", TORCH_FAIRSEQ: "import torch, fairseq"}

#: What each process writes last on stderr: whether it imported torch and fairseq.
REPORT = "import sys\nsys.stderr.write(f\"\\nSTARTUP {'torch' in sys.modules} {'fairseq' in sys.modules}\\n\")\n"


def console_scripts() -> Dict[str, str]:
    """setup.py's console scripts: ``{command: "module:function"}``, in its order."""
    with open(os.path.join(results.REPO_ROOT, "setup.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    entry_points = next(
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg == "entry_points"
    )
    return dict(tuple(part.strip() for part in line.split("=")) for line in entry_points["console_scripts"])


def entry_point_code(command: str, entry_point: str, flag: str) -> str:
    """Python code that runs ``COMMAND FLAG`` as its console script does: the entry point
    called with ``sys.argv`` set, its exit status kept; then the report."""
    module, function = entry_point.split(":")
    return (
        "import sys\n"
        f"sys.argv = [{command!r}, {flag!r}]\n"
        f"from {module} import {function}\n"
        "try:\n"
        f"    status = {function}()\n"
        "except SystemExit as exit:\n"
        "    status = exit.code\n"
        "if status not in (0, None):\n"
        "    raise SystemExit(status)\n"
    )


class Run(NamedTuple):
    """One process: wall and CPU seconds, and whether it imported torch and fairseq."""

    wall_s: float
    cpu_s: float
    torch: bool
    fairseq: bool


def run_once(label: str, code: str) -> Run:
    """Run ``python -c CODE`` (this checkout first on the path) and time it."""
    environment = dict(os.environ, PYTHONPATH=results.REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-c", code + "\n" + REPORT],
        cwd=results.REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if finished.returncode != 0:
        raise SystemExit(f"{label}: exit status {finished.returncode}\n{finished.stderr[-2000:]}")
    _, torch_imported, fairseq_imported = finished.stderr.strip().splitlines()[-1].split()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, torch_imported == "True", fairseq_imported == "True")


def runs_to_measure(commands: Optional[Sequence[str]]) -> Dict[str, str]:
    """label -> code: the baselines, then each command's ``--help`` and its extra runs."""
    scripts = console_scripts()
    unknown = sorted(set(commands or ()) - set(scripts))
    if unknown:
        raise SystemExit(f"--commands: {unknown} are not console scripts of setup.py ({', '.join(scripts)})")
    measured = dict(BASELINES)
    for command, entry_point in scripts.items():
        if commands and command not in commands:
            continue
        for flag in ("--help",) + EXTRA_RUNS.get(command, ()):
            measured[f"{command} {flag}"] = entry_point_code(command, entry_point, flag)
    return measured


def row(label: str, runs: List[Run], heavy: List[Run], interpreter: List[Run]) -> Dict[str, object]:
    """The figures of ``label``'s runs, with its ratios to the baselines' runs of the same repeats."""
    walls, cpus = [r.wall_s for r in runs], [r.cpu_s for r in runs]
    return {
        "command": label,
        "wall_s": spread(walls),
        "cpu_s": spread(cpus),
        "wall_vs_torch_fairseq_import": interleaved_ratio(walls, [r.wall_s for r in heavy]),
        "cpu_vs_torch_fairseq_import": interleaved_ratio(cpus, [r.cpu_s for r in heavy]),
        "beyond_interpreter_s": spread([run.wall_s - base.wall_s for run, base in zip(runs, interpreter)]),
        "imports_torch": all(r.torch for r in runs),
        "imports_fairseq": all(r.fairseq for r in runs),
    }


def load_note(load_at_start: float) -> str:
    """Whether other jobs shared the machine: the 1-minute load average at the start (before
    this benchmark's processes) and now, against the CPU count."""
    load_now = os.getloadavg()[0]
    loads = f"The 1-minute load average was {load_at_start:.2f} at the start and {load_now:.2f} at the end"
    if load_at_start < 1.0:
        return f"{loads} on {os.cpu_count()} cores: no other job was running when the run started."
    return (
        f"{loads} on {os.cpu_count()} cores: other jobs shared the machine, which lengthens the wall times "
        "more than the CPU times; each ratio is taken within a repeat."
    )


def main(argv: Optional[List[str]] = None) -> None:
    parser = harness.argument_parser(__doc__)
    harness.add_repeats(parser, "rounds of every command and baseline, each a fresh process", default=5)
    parser.add_argument(
        "--commands",
        nargs="+",
        metavar="COMMAND",
        help="measure these console scripts only (default: every one of setup.py)",
    )
    results.add_argument(parser)
    options = harness.parse(parser, argv)
    measured = runs_to_measure(options.commands)
    load_at_start = os.getloadavg()[0]
    print(
        f"device: CPU ({cpu_model()}, {os.cpu_count()} cores), {sys.executable}; load average "
        f"{load_at_start:.2f} at the start; median (min-max) of {options.repeats} repeats"
    )
    rows = harness.result_rows(options, "startup", argv, options.repeats, device="cpu", cpu_count=os.cpu_count())
    for label, code in measured.items():  # fills the file cache; not timed
        run_once(label, code)
    timings: Dict[str, List[Run]] = {label: [] for label in measured}
    for _ in range(options.repeats):
        for label, code in measured.items():
            timings[label].append(run_once(label, code))
    header = f"{'command':<36} {'wall s':>24} {'CPU s':>24} {'wall / torch+fairseq':>22} {'torch':>6} {'fairseq':>8}"
    harness.print_header(header)
    for label, runs in timings.items():
        figures = row(label, runs, timings[TORCH_FAIRSEQ], timings[INTERPRETER])
        print(
            f"{label:<36} {figures['wall_s'].format():>24} {figures['cpu_s'].format():>24} "
            f"{figures['wall_vs_torch_fairseq_import'].format('.2f', 'x'):>22} "
            f"{'yes' if figures['imports_torch'] else 'no':>6} {'yes' if figures['imports_fairseq'] else 'no':>8}"
        )
        cells = {
            key: results.spread_cell(value) if isinstance(value, Spread) else value for key, value in figures.items()
        }
        rows.add(cells, load_average_end=round(os.getloadavg()[0], 2), notes=load_note(load_at_start))
    print(load_note(load_at_start))


if __name__ == "__main__":
    main()
