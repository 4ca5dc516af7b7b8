"""HAT-BART's memory and time against input length, against full attention
on the same model: ``hat`` (BART with HAT's hierarchical layers over the
sentence starts and the decoder's sentence cross-attention, Rohde et al.
2021) and ``full`` (the same BART without them: full encoder attention and
BART's cross-attention only), same dimensions, one run. Both encoders attend
over every token (HAT-BART keeps full attention); the figure is what the
hierarchy adds.

Measured per cell (``--steps`` timed runs after the memory run, printed as
median (min-max)): one training step, forward and backward of the summed
cross-entropy of a summary of ``--target-tokens`` tokens for a source of the
given length cut into sentences of ``--sentence-tokens`` tokens (``--no-grad``:
a forward without gradient). Peak memory above what the model and batch
already hold: on CUDA ``torch.cuda.max_memory_allocated``; on CPU every cell
runs in a fresh forked process and the figure is the growth of its peak
resident set size (:mod:`benchmarks.measure`). Each row prints ``hat``'s
memory and time as ratios of ``full``'s at the same length.

    python benchmarks/hat_bart.py                                     # CPU, BART-base sizes, 512..3072 tokens
    python benchmarks/hat_bart.py --device cuda --size large --lengths 1024,2048,3072,4096
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import against_full, harness, results
from benchmarks.harness import SyntheticTask

#: system -> cross-attention component
SYSTEMS = {"hat": "hat", "full": "full"}


def build_model(config: dict):
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    import mdsfair
    from mdsfair.models.hat_bart import HATBARTModel, hat_bart_architecture

    mdsfair.register()
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    HATBARTModel.add_args(parser)
    args = parser.parse_args([])
    args.cross_attention = SYSTEMS[config["system"]]
    args.max_source_positions = args.max_encoder_positions = config["length"]
    args.max_target_positions = max(1024, config["target_tokens"])
    if config["size"] == "tiny":
        ARCH_CONFIG_REGISTRY["hat_bart_tiny"](args)
    else:
        hat_bart_architecture(args, config["size"])
    args.dropout = args.attention_dropout = args.activation_dropout = 0.0
    task = SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    return HATBARTModel.build_model(args, task), task.target_dictionary


def measure(config: dict) -> dict:
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    model, dictionary = build_model(config)
    side_inputs = {}
    if "src_sent_ids" in model.side_inputs():
        side_inputs["src_sent_ids"] = (torch.arange(config["length"]) // config["sentence_tokens"]).unsqueeze(0)
    return against_full.measure_source_and_summary_step(model, dictionary, config, side_inputs)


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser)
    parser.add_argument("--lengths", default="512,1024,2048,3072", help="source lengths in tokens (comma list)")
    parser.add_argument("--target-tokens", type=int, default=128, help="summary tokens (default 128)")
    parser.add_argument(
        "--sentence-tokens", type=int, default=25, help="tokens per source sentence (default 25; one start each)"
    )
    parser.add_argument(
        "--size",
        choices=("tiny", "base", "large"),
        default="base",
        help="BART's dimensions (default base; large is the paper's HAT-BART)",
    )
    parser.add_argument("--no-grad", action="store_true", help="a forward without gradient instead of a training step")
    harness.add_repeats(parser, "timed runs per cell after the memory run", flag="--steps")
    harness.add_threads(parser)
    parser.add_argument("--vocab-size", type=int, default=1000, help="dictionary size (default 1000)")
    results.add_argument(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps"])
    train = not opts.no_grad
    print(
        f"{harness.device_line(opts.device, opts.threads)}; dtype {opts.dtype}; BART-{opts.size}, 2 hierarchical "
        f"layers; sentences of {opts.sentence_tokens} tokens; summary of {opts.target_tokens} tokens; "
        f"{'forward+backward' if train else 'no-grad forward'}; torch {torch.__version__}"
    )
    rows = harness.result_rows(
        opts,
        "hat_bart",
        argv,
        opts.steps,
        threads=opts.threads,
        dtype=opts.dtype,
        size=opts.size,
        train=train,
        target_tokens=opts.target_tokens,
        sentence_tokens=opts.sentence_tokens,
    )
    config = {
        "target_tokens": opts.target_tokens,
        "sentence_tokens": opts.sentence_tokens,
        "size": opts.size,
        "device": opts.device,
        "dtype": opts.dtype,
        "train": train,
        "steps": opts.steps,
        "threads": opts.threads,
        "vocab_size": opts.vocab_size,
    }
    against_full.compare_against_full("hat", [int(x) for x in opts.lengths.split(",")], measure, config, rows)


if __name__ == "__main__":
    main()
