"""The efficient encoder self-attentions of Huang et al. (2021, Sec. 3 and
Table 2): memory and time against input length, each against full attention
on the same model: ``lsh`` (Reformer's LSH attention, chunks of
``--chunk-length`` tokens, ``--hashes`` rounds) and ``sinkhorn`` (Sparse
Sinkhorn attention, blocks of ``--chunk-length`` tokens), and ``full``
(BART's encoder self-attention), the ``multidoc_bart`` model otherwise the
same (same parameters, full cross-attention), one run.

Each cell is measured as in every benchmark against full attention
(:mod:`benchmarks.against_full`): one training step (``--no-grad``: a
forward), its peak memory and its time, printed as ratios of ``full``'s.

    python benchmarks/efficient_encoders.py                                   # CPU, small dims, 1k..8k tokens
    python benchmarks/efficient_encoders.py --systems lsh --lengths 512,1024 --steps 1 --target-tokens 16
    python benchmarks/efficient_encoders.py --device cuda --dtype bf16 --dims base --lengths 2048,4096,7168,10240
"""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import against_full, harness

SYSTEMS = ("lsh", "sinkhorn")


def build_model(config: dict):
    return against_full.bart_model_at_length(
        "multidoc_bart_large",
        config,
        encoder_self_attention=config["system"],
        lsh_chunk_length=config["chunk_length"],
        lsh_hashes=config["hashes"],
        sinkhorn_block_size=config["chunk_length"],
    )


def main(argv=None):
    parser = against_full.bart_benchmark_parser(__doc__)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="encoder attentions to measure (comma list)")
    parser.add_argument(
        "--chunk-length", type=int, default=64, help="LSH chunk and Sinkhorn block in tokens (default 64, the authors')"
    )
    parser.add_argument("--hashes", type=int, default=4, help="LSH hashing rounds (default 4, the authors')")
    against_full.add_step_arguments(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps", "chunk_length", "hashes"])
    systems = [name for name in opts.systems.split(",") if name]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    layers, dim, _, heads = harness.DIMS[opts.dims]
    against_full.run_against_full(
        "efficient_encoders",
        systems,
        opts,
        argv,
        build_model,
        f"{layers} + {layers} layers, d {dim}, {heads} heads, chunk {opts.chunk_length}, {opts.hashes} hashes",
        {"dims": opts.dims, "chunk_length": opts.chunk_length, "hashes": opts.hashes},
    )


if __name__ == "__main__":
    main()
