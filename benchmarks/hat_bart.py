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

from benchmarks import harness, results
from benchmarks.harness import SyntheticTask
from benchmarks.measure import allocate_gradients, in_fresh_process, separate_ratio, spread, timed_steps

#: system -> cross-attention component
SYSTEMS = {"hat": "hat", "full": "full"}


def build_model(config: dict):
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    import mdsfair
    from mdsfair.models.hat_bart import HATBARTModel

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
        from mdsfair.models.hat_bart import hat_bart_architecture

        hat_bart_architecture(args, config["size"])
    args.dropout = args.attention_dropout = args.activation_dropout = 0.0
    task = SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    return HATBARTModel.build_model(args, task), task.target_dictionary


def measure(config: dict) -> dict:
    device = config["device"]
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    model, dictionary = build_model(config)
    model = model.to(device=device, dtype=harness.DTYPES[config["dtype"]]).train(config["train"])
    generator = torch.Generator().manual_seed(0)
    length = config["length"]
    source = torch.randint(dictionary.nspecial, len(dictionary), (1, length), generator=generator)
    source[0, 0], source[0, -1] = dictionary.bos(), dictionary.eos()
    target = torch.randint(dictionary.nspecial, len(dictionary), (1, config["target_tokens"]), generator=generator)
    prev_output_tokens = torch.cat([torch.full((1, 1), dictionary.eos()), target[:, :-1]], dim=1)
    inputs = {
        "src_tokens": source.to(device),
        "src_lengths": torch.tensor([length], device=device),
        "prev_output_tokens": prev_output_tokens.to(device),
    }
    if "src_sent_ids" in model.side_inputs():
        inputs["src_sent_ids"] = (torch.arange(length) // config["sentence_tokens"]).unsqueeze(0).to(device)
    target = target.to(device)
    if config["train"]:
        allocate_gradients(model)

    def step():
        if not config["train"]:
            with torch.no_grad():
                model(**inputs)
            return
        logits = model(**inputs)[0]
        torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1)).backward()

    return timed_steps(step, device, config["steps"])


def run(config: dict) -> dict:
    try:
        return in_fresh_process(measure, config)
    except Exception as error:  # a cell that does not fit is reported, the others still run
        return {"error": f"{type(error).__name__}: {str(error)[:60]}"}


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
    lengths = [int(x) for x in opts.lengths.split(",")]
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
    print(f"{'system':>6} {'tokens':>7} {'peak MiB':>9} {'seconds':>21} {'memory vs full':>15} {'time vs full':>21}")
    for length in lengths:
        measured = {}
        for system in SYSTEMS:
            measured[system] = result = run(
                {
                    "system": system,
                    "length": length,
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
            )
            if "error" in result:
                print(f"{system:>6} {length:>7} {result['error']}", flush=True)
                continue
            memory_ratio = time_ratio = None
            if system == "full":
                reference = measured.get("hat", {})
                if reference.get("peak_mib") and result.get("peak_mib"):
                    memory_ratio = reference["peak_mib"] / result["peak_mib"]
                if "seconds_each" in reference:
                    time_ratio = separate_ratio(reference["seconds_each"], result["seconds_each"])
            print(
                f"{system:>6} {length:>7} {result['peak_mib']:>9.1f} "
                f"{spread(result['seconds_each']).format('.3f'):>21} "
                f"{'' if memory_ratio is None else f'hat {memory_ratio:.2f}x':>15} "
                f"{'' if time_ratio is None else 'hat ' + time_ratio.format('.2f', 'x'):>21}",
                flush=True,
            )
            rows.add(
                {
                    "system": system,
                    "source_tokens": length,
                    "peak_mib": result["peak_mib"],
                    "seconds": results.repeats_cell(result["seconds_each"]),
                }
            )
        if "peak_mib" in measured.get("hat", {}) and "peak_mib" in measured.get("full", {}):
            ratio = separate_ratio(measured["hat"]["seconds_each"], measured["full"]["seconds_each"])
            rows.add(
                {
                    "system": "hat / full",
                    "source_tokens": length,
                    "memory_ratio": measured["hat"]["peak_mib"] / measured["full"]["peak_mib"],
                    "time_ratio": results.spread_cell(ratio),
                }
            )


if __name__ == "__main__":
    main()
