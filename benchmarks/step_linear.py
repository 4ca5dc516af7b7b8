"""A generation step's linear layers: ``F.linear`` against the transposed
product and oneDNN's product on a packed weight.

A beam-search step multiplies ``rows`` states (batch x beam) by every weight
matrix of the decoder and by the output embedding. ``F.linear`` computes
``x W^T``; :mod:`mdsfair.generation.fast.step_linear` can take the same product as
``W x^T`` (the weight as stored), or by oneDNN on the weight reordered once
into its blocked layout (``packed_product``, where PyTorch has oneDNN). This
benchmark times the three for BART-base's decoder shapes at each row count,
interleaved in every repeat, and prints ``F.linear``'s time over the
transposed product's and the transposed product's over the packed one's
(above 1: the second is faster), median (min-max) of the per-repeat ratios.
Its figures set :data:`mdsfair.generation.fast.step_linear.TRANSPOSED_ROWS` (the
rows for which a CPU step takes the transposed product) and the output
projection's choice of the packed product; run it on another CPU to see
whether they hold there. Each weight is timed as it is after the previous
call (the smaller ones stay in the cache; in a decoding step the other
layers' weights evict them).

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
from mdsfair.generation.fast.step_linear import TRANSPOSED_ROWS, onednn_linear_available, packed_product

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
    """Per-repeat seconds of ``F.linear``, of the transposed product and of
    the packed product (an empty list where oneDNN is missing)."""
    generator = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(in_features, out_features)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(out_features, in_features, generator=generator))
        linear.bias.copy_(torch.randn(out_features, generator=generator))
    weight, bias = linear.weight, linear.bias
    bias_column = bias.unsqueeze(1)
    x = torch.randn(rows, in_features, generator=generator)

    def standard():
        return F.linear(x, weight, bias)

    def transposed_product():
        return torch.addmm(bias_column, weight, x.t()).t()

    def packed():
        return packed_product(linear, x)

    torch.testing.assert_close(transposed_product(), standard(), atol=1e-3, rtol=1e-4)
    with_packed = onednn_linear_available()
    if with_packed:
        torch.testing.assert_close(packed(), standard(), atol=1e-3, rtol=1e-4)
    calls = max(1, int(budget_s / max(timed(standard, 1), 1e-6)))
    standard_s, transposed_s, packed_s = [], [], []
    for _ in range(repeats):
        standard_s.append(timed(standard, calls))
        transposed_s.append(timed(transposed_product, calls))
        if with_packed:
            packed_s.append(timed(packed, calls))
    return standard_s, transposed_s, packed_s


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
        f"F.linear time / transposed product time (above 1: transposed faster), transposed / packed "
        f"(above 1: packed faster; oneDNN {'present' if onednn_linear_available() else 'missing'}); "
        f"mdsfair takes the transposed product for {TRANSPOSED_ROWS[0]}-{TRANSPOSED_ROWS[1]} rows"
    )
    header = f"{'rows':>5} " + " ".join(f"{name:>36}" for name, _, _ in SHAPES)
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
            standard_s, transposed_s, packed_s = measure(
                rows, out_features, in_features, options.repeats, options.budget_ms / 1000
            )
            ratio = interleaved_ratio(standard_s, transposed_s)
            row = {
                "rows": rows,
                "product": name,
                "weight": f"{out_features}x{in_features}",
                "linear_ms": results_file.spread_cell(spread(standard_s).scaled(1000)),
                "transposed_ms": results_file.spread_cell(spread(transposed_s).scaled(1000)),
                "linear_vs_transposed": results_file.spread_cell(ratio),
            }
            cell = ratio.format(".2f", "x")
            if packed_s:
                packed_ratio = interleaved_ratio(transposed_s, packed_s)
                row["packed_ms"] = results_file.spread_cell(spread(packed_s).scaled(1000))
                row["transposed_vs_packed"] = results_file.spread_cell(packed_ratio)
                cell += " / " + packed_ratio.format(".2f", "x")
            measured.append(row)
            cells.append(cell)
        print(f"{rows:>5} " + " ".join(f"{cell:>36}" for cell in cells), flush=True)
        if record:
            record.write(measured)


if __name__ == "__main__":
    main()
