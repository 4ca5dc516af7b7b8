"""T-DMCA's memory and time against input length, against full attention on
the same model: ``tdmca`` (layers LMLML: local attention in blocks of 256,
memory-compressed attention with compression 3) and ``full`` (layers FFFFF:
full causal attention, the paper's Transformer decoder T-D), same dimensions,
same weights' shapes, one run.

Each cell is measured as in every benchmark against full attention
(:mod:`benchmarks.against_full`): one training step (``--no-grad``: a
forward), its peak memory and its time, printed as ratios of ``full``'s.

    python benchmarks/tdmca.py                                       # CPU, 1k..8k tokens
    python benchmarks/tdmca.py --device cuda --lengths 2048,4096,8192,16384
"""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import against_full, harness

#: system -> layer pattern
SYSTEMS = {"tdmca": "LMLML", "full": "FFFFF"}


def build_model(config: dict):
    from mdsfair.models.tdmca import TDMCAModel

    args = harness.model_flags(TDMCAModel)
    args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.decoder_attention_heads = (
        config["dim"],
        4 * config["dim"],
        config["heads"],
    )
    args.layer_pattern = SYSTEMS[config["system"]]
    args.block_length = config["block_length"]
    args.dropout = args.attention_dropout = args.activation_dropout = 0.0
    args.max_source_positions = args.max_target_positions = config["length"] + config["target_tokens"]
    return against_full.built_on_a_synthetic_dictionary(TDMCAModel, args, config)


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    against_full.add_length_arguments(parser, "1024,2048,4096,8192", 128, "summary tokens after the source")
    parser.add_argument("--dim", type=int, default=512, help="model dimension (default 512, the paper's)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    parser.add_argument("--block-length", type=int, default=256, help="local attention block (default 256)")
    against_full.add_step_arguments(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps"])
    against_full.run_against_full(
        "tdmca",
        ["tdmca"],
        opts,
        argv,
        build_model,
        f"5 layers, d {opts.dim}, {opts.heads} heads, blocks of {opts.block_length}, compression 3",
        {"dim": opts.dim, "heads": opts.heads, "block_length": opts.block_length},
    )


if __name__ == "__main__":
    main()
