"""T-DMCA's memory and time against input length, against full attention on
the same model: ``tdmca`` (layers LMLML: local attention in blocks of 256,
memory-compressed attention with compression 3) and ``full`` (layers FFFFF:
full causal attention, the paper's Transformer decoder T-D), same dimensions,
same weights' shapes, one run.

Measured per cell (``--steps`` timed runs after the memory run, printed as
median (min-max)): one training step, forward and backward of the summed
cross-entropy of a summary of ``--target-tokens`` tokens after a source of
the given length (``--no-grad``: a forward without gradient). Peak memory
above what the model and batch already hold: on CUDA
``torch.cuda.max_memory_allocated``; on CPU every cell runs in a fresh
forked process and the figure is the growth of its peak resident set size
(:mod:`benchmarks.measure`). Each row prints ``tdmca``'s memory and time as
ratios of ``full``'s at the same length.

    python benchmarks/tdmca.py                                       # CPU, 1k..8k tokens
    python benchmarks/tdmca.py --device cuda --lengths 2048,4096,8192,16384
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.against_full import compare_against_full, measure_source_and_summary_step
from benchmarks.harness import SyntheticTask

#: system -> layer pattern
SYSTEMS = {"tdmca": "LMLML", "full": "FFFFF"}


def build_model(config: dict):
    import argparse

    from mdsfair.models.tdmca import TDMCAModel

    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    TDMCAModel.add_args(parser)
    args = parser.parse_args([])
    args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.decoder_attention_heads = (
        config["dim"],
        4 * config["dim"],
        config["heads"],
    )
    args.layer_pattern = SYSTEMS[config["system"]]
    args.block_length = config["block_length"]
    args.dropout = args.attention_dropout = args.activation_dropout = 0.0
    args.max_source_positions = args.max_target_positions = config["length"] + config["target_tokens"]
    task = SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    return TDMCAModel.build_model(args, task), task.target_dictionary


def measure(config: dict) -> dict:
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    model, dictionary = build_model(config)
    return measure_source_and_summary_step(model, dictionary, config)


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser)
    parser.add_argument("--lengths", default="1024,2048,4096,8192", help="source lengths in tokens (comma list)")
    parser.add_argument("--target-tokens", type=int, default=128, help="summary tokens after the source (default 128)")
    parser.add_argument("--dim", type=int, default=512, help="model dimension (default 512, the paper's)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    parser.add_argument("--block-length", type=int, default=256, help="local attention block (default 256)")
    parser.add_argument("--no-grad", action="store_true", help="a forward without gradient instead of a training step")
    harness.add_repeats(parser, "timed runs per cell after the memory run", flag="--steps")
    harness.add_threads(parser)
    parser.add_argument("--vocab-size", type=int, default=1000, help="dictionary size (default 1000)")
    results.add_argument(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps"])
    lengths = [int(x) for x in opts.lengths.split(",")]
    train = not opts.no_grad
    print(
        f"{harness.device_line(opts.device, opts.threads)}; dtype {opts.dtype}; 5 layers, d {opts.dim}, "
        f"{opts.heads} heads, blocks of {opts.block_length}, compression 3; summary of {opts.target_tokens} tokens; "
        f"{'forward+backward' if train else 'no-grad forward'}; torch {torch.__version__}"
    )
    rows = harness.result_rows(
        opts,
        "tdmca",
        argv,
        opts.steps,
        threads=opts.threads,
        dtype=opts.dtype,
        dim=opts.dim,
        train=train,
        target_tokens=opts.target_tokens,
    )
    compare_against_full(
        "tdmca",
        lengths,
        measure,
        {
            "target_tokens": opts.target_tokens,
            "dim": opts.dim,
            "heads": opts.heads,
            "block_length": opts.block_length,
            "device": opts.device,
            "dtype": opts.dtype,
            "train": train,
            "steps": opts.steps,
            "threads": opts.threads,
            "vocab_size": opts.vocab_size,
        },
        rows,
    )


if __name__ == "__main__":
    main()
