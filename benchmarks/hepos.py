"""HEPOS's memory and time against input length, against full attention on
the same model: ``hepos`` (every decoder layer's cross-attention with
head-wise positional strides, stride ``--stride``, Huang et al. 2021) and
``full`` (BART's cross-attention), the same ``hepos_bart`` model otherwise
(same encoder, same parameters), one run.

Each cell is measured as in every benchmark against full attention
(:mod:`benchmarks.against_full`): one training step (``--no-grad``: a
forward), its peak memory and its time, printed as ratios of ``full``'s.

    python benchmarks/hepos.py                                          # CPU, small dims, 1k..8k tokens
    python benchmarks/hepos.py --device cuda --dtype bf16 --dims base --lengths 2048,4096,7168,10240
"""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import against_full, harness

#: system -> its cross-attention component
SYSTEMS = {"hepos": "hepos", "full": "full"}


def build_model(config: dict):
    return against_full.bart_model_at_length(
        "hepos_bart_large",
        config,
        cross_attention=SYSTEMS[config["system"]],
        hepos_stride=config["stride"],
    )


def main(argv=None):
    parser = against_full.bart_benchmark_parser(__doc__)
    parser.add_argument(
        "--stride",
        type=int,
        default=4,
        help="HEPOS stride s; it must divide the heads of --dims (default 4, the paper's)",
    )
    against_full.add_step_arguments(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps", "stride"])
    layers, dim, _, heads = harness.DIMS[opts.dims]
    against_full.run_against_full(
        "hepos",
        ["hepos"],
        opts,
        argv,
        build_model,
        f"{layers} + {layers} layers, d {dim}, {heads} heads, stride {opts.stride}",
        {"dims": opts.dims, "stride": opts.stride},
    )


if __name__ == "__main__":
    main()
