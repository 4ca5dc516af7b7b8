"""The efficient encoder self-attentions of Huang et al. (2021, Sec. 3 and
Table 2): memory and time against input length, each against full attention
on the same model: ``lsh`` (Reformer's LSH attention, chunks of
``--chunk-length`` tokens, ``--hashes`` rounds) and ``sinkhorn`` (Sparse
Sinkhorn attention, blocks of ``--chunk-length`` tokens), and ``full``
(BART's encoder self-attention), the ``multidoc_bart`` model otherwise the
same (same parameters, full cross-attention), one run.

Measured per cell (``--steps`` timed runs after the memory run, printed as
median (min-max)): one training step, forward and backward of the summed
cross-entropy of a summary of ``--target-tokens`` tokens given a source of
the given length (``--no-grad``: a forward without gradient). Peak memory
above what the model and batch already hold: on CUDA
``torch.cuda.max_memory_allocated``; on CPU every cell runs in a fresh
forked process and the figure is the growth of its peak resident set size
(:mod:`benchmarks.measure`). Each row prints the system's memory and time as
ratios of ``full``'s at the same length.

    python benchmarks/efficient_encoders.py                                   # CPU, small dims, 1k..8k tokens
    python benchmarks/efficient_encoders.py --systems lsh --lengths 512,1024 --steps 1 --target-tokens 16
    python benchmarks/efficient_encoders.py --device cuda --dtype bf16 --dims base --lengths 2048,4096,7168,10240
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.against_full import compare_against_full, measure_source_and_summary_step
from benchmarks.harness import SyntheticTask

SYSTEMS = ("lsh", "sinkhorn")


def build_model(config: dict):
    import mdsfair
    from mdsfair.models.multidoc_bart import MultiDocBARTModel, multidoc_bart_large

    mdsfair.register()
    args = harness.model_args(
        MultiDocBARTModel,
        config["dims"],
        encoder_self_attention=config["system"],
        lsh_chunk_length=config["chunk_length"],
        lsh_hashes=config["hashes"],
        sinkhorn_block_size=config["chunk_length"],
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_encoder_positions=config["length"],
        max_source_positions=config["length"],
        max_target_positions=max(1024, config["target_tokens"]),
    )
    multidoc_bart_large(args)
    task = SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    return MultiDocBARTModel.build_model(args, task), task.target_dictionary


def measure(config: dict) -> dict:
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    model, dictionary = build_model(config)
    return measure_source_and_summary_step(model, dictionary, config)


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser)
    harness.add_dims(parser, "small", "encoder and decoder size (base: BART-base's 6 + 6 layers, d 768, 12 heads)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="encoder attentions to measure (comma list)")
    parser.add_argument("--lengths", default="1024,2048,4096,8192", help="source lengths in tokens (comma list)")
    parser.add_argument("--target-tokens", type=int, default=256, help="summary tokens (default 256)")
    parser.add_argument(
        "--chunk-length", type=int, default=64, help="LSH chunk and Sinkhorn block in tokens (default 64, the authors')"
    )
    parser.add_argument("--hashes", type=int, default=4, help="LSH hashing rounds (default 4, the authors')")
    parser.add_argument("--no-grad", action="store_true", help="a forward without gradient instead of a training step")
    harness.add_repeats(parser, "timed runs per cell after the memory run", flag="--steps")
    harness.add_threads(parser)
    parser.add_argument("--vocab-size", type=int, default=1000, help="dictionary size (default 1000)")
    results.add_argument(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps", "chunk_length", "hashes"])
    systems = [name for name in opts.systems.split(",") if name]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    lengths = [int(x) for x in opts.lengths.split(",")]
    train = not opts.no_grad
    layers, dim, _, heads = harness.DIMS[opts.dims]
    print(
        f"{harness.device_line(opts.device, opts.threads)}; dtype {opts.dtype}; {layers} + {layers} layers, d {dim}, "
        f"{heads} heads, chunk {opts.chunk_length}, {opts.hashes} hashes; summary of {opts.target_tokens} tokens; "
        f"{'forward+backward' if train else 'no-grad forward'}; torch {torch.__version__}"
    )
    rows = harness.result_rows(
        opts,
        "efficient_encoders",
        argv,
        opts.steps,
        threads=opts.threads,
        dtype=opts.dtype,
        dims=opts.dims,
        chunk_length=opts.chunk_length,
        hashes=opts.hashes,
        train=train,
        target_tokens=opts.target_tokens,
    )
    config = {
        "target_tokens": opts.target_tokens,
        "dims": opts.dims,
        "chunk_length": opts.chunk_length,
        "hashes": opts.hashes,
        "device": opts.device,
        "dtype": opts.dtype,
        "train": train,
        "steps": opts.steps,
        "threads": opts.threads,
        "vocab_size": opts.vocab_size,
    }
    for system in systems:
        compare_against_full(system, lengths, measure, config, rows)


if __name__ == "__main__":
    main()
