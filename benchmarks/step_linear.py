"""A generation step's linear layers: ``F.linear`` against the transposed product.

A beam-search step multiplies ``rows`` states (batch x beam) by every weight
matrix of the decoder and by the output embedding. ``F.linear`` computes
``x W^T``; :mod:`mdsfair.generation.fast.step_linear` can take the same product as
``W x^T`` (the weight as stored). This benchmark times both for BART-base's
decoder shapes at each row count, the two interleaved in every repeat, and
prints ``F.linear``'s time over the transposed product's (above 1: the
transposed product is faster), median (min-max) of the per-repeat ratios.
Its figures set :data:`mdsfair.generation.fast.step_linear.TRANSPOSED_ROWS` (the
rows for which a CPU step takes the transposed product); run it on another
CPU to see whether the window holds there.

    python benchmarks/step_linear.py --threads 2
    python benchmarks/step_linear.py --json benchmarks/results/step_linear_cpu.json
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import results as results_file
from benchmarks.measure import interleaved_ratio, spread
from mdsfair.generation.fast.step_linear import TRANSPOSED_ROWS

#: BART-base's decoder products per step: (name, out features, in features)
SHAPES = (
    ("self-attention q, k, v", 2304, 768),
    ("attention output", 768, 768),
    ("feed-forward in", 3072, 768),
    ("feed-forward out", 768, 3072),
    ("output embedding", 50265, 768),
)


def timed(function, calls: int) -> float:
    """Seconds per call of ``function`` over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def measure(rows: int, out_features: int, in_features: int, repeats: int, budget_s: float):
    """Per-repeat seconds of ``F.linear`` and of the transposed product."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator)
    bias_column = bias.unsqueeze(1)
    x = torch.randn(rows, in_features, generator=generator)

    def standard():
        return F.linear(x, weight, bias)

    def transposed_product():
        return torch.addmm(bias_column, weight, x.t()).t()

    torch.testing.assert_close(transposed_product(), standard(), atol=1e-3, rtol=1e-4)
    calls = max(1, int(budget_s / max(timed(standard, 1), 1e-6)))
    standard_s, transposed_s = [], []
    for _ in range(repeats):
        standard_s.append(timed(standard, calls))
        transposed_s.append(timed(transposed_product, calls))
    return standard_s, transposed_s


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128],
        help="rows per product (batch x beam)",
    )
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per cell (median (min-max) reported)")
    parser.add_argument("--budget-ms", type=float, default=30.0, help="about this long per timed repeat")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    results_file.add_argument(parser)
    options = parser.parse_args(argv)
    if options.threads:
        torch.set_num_threads(options.threads)
    torch.set_grad_enabled(False)
    print(
        f"device: CPU ({torch.get_num_threads()} threads); torch {torch.__version__}; float32; "
        f"F.linear time / transposed product time (above 1: transposed faster); "
        f"mdsfair takes the transposed product for {TRANSPOSED_ROWS[0]}-{TRANSPOSED_ROWS[1]} rows"
    )
    header = f"{'rows':>5} " + " ".join(f"{name:>24}" for name, _, _ in SHAPES)
    print(header)
    record = (
        results_file.ResultsFile(
            options.json,
            "step_linear",
            argv,
            "cpu",
            options.repeats,
            dtype="fp32",
            transposed_rows=list(TRANSPOSED_ROWS),
        )
        if options.json
        else None
    )
    measured = []
    for rows in options.rows:
        cells = []
        for name, out_features, in_features in SHAPES:
            standard_s, transposed_s = measure(
                rows, out_features, in_features, options.repeats, options.budget_ms / 1000
            )
            ratio = interleaved_ratio(standard_s, transposed_s)
            measured.append(
                {
                    "rows": rows,
                    "product": name,
                    "weight": f"{out_features}x{in_features}",
                    "linear_ms": results_file.spread_cell(spread(standard_s).scaled(1000)),
                    "transposed_ms": results_file.spread_cell(spread(transposed_s).scaled(1000)),
                    "linear_vs_transposed": results_file.spread_cell(ratio),
                }
            )
            cells.append(ratio.format(".2f", "x"))
        print(f"{rows:>5} " + " ".join(f"{cell:>24}" for cell in cells), flush=True)
        if record:
            record.write(measured)


if __name__ == "__main__":
    main()
