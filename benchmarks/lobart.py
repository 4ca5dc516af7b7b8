"""LoBART's memory and time against input length, against full attention on
the same model: ``lobart`` (every encoder layer's self-attention local, width
``--window``, no global token; Manakul & Gales 2021) and ``full`` (BART's
encoder self-attention), the same ``lobart`` model otherwise (same decoder,
same parameters), one run.

Each cell is measured as in every benchmark against full attention
(:mod:`benchmarks.against_full`): one training step (``--no-grad``: a
forward), its peak memory and its time, printed as ratios of ``full``'s.

    python benchmarks/lobart.py --lengths 64,128 --window 16 --target-tokens 8 --steps 1   # a quick check
    python benchmarks/lobart.py                                       # CPU, small dims, 1k..8k tokens, window 1,024
    python benchmarks/lobart.py --device cuda --dtype bf16 --dims base --lengths 1024,2048,4096,8192
"""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import against_full, harness

#: system -> its encoder self-attention component
SYSTEMS = {"lobart": "longformer", "full": "full"}


def build_model(config: dict):
    return against_full.bart_model_at_length(
        "lobart_4k",
        config,
        encoder_self_attention=SYSTEMS[config["system"]],
        attention_window=str(config["window"]),
    )


def main(argv=None):
    parser = against_full.bart_benchmark_parser(__doc__)
    parser.add_argument(
        "--window", type=int, default=1024, help="LoBART's attention width, an even number (default 1024, the paper's)"
    )
    against_full.add_step_arguments(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps", "window"])
    layers, dim, _, heads = harness.DIMS[opts.dims]
    against_full.run_against_full(
        "lobart",
        ["lobart"],
        opts,
        argv,
        build_model,
        f"{layers} + {layers} layers, d {dim}, {heads} heads, window {opts.window}",
        {"dims": opts.dims, "window": opts.window},
    )


if __name__ == "__main__":
    main()
