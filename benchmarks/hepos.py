"""HEPOS's memory and time against input length, against full attention on
the same model: ``hepos`` (every decoder layer's cross-attention with
head-wise positional strides, stride ``--stride``, Huang et al. 2021) and
``full`` (BART's cross-attention), the same ``hepos_bart`` model otherwise
(same encoder, same parameters), one run.

Measured per cell (``--steps`` timed runs after the memory run, printed as
median (min-max)): one training step, forward and backward of the summed
cross-entropy of a summary of ``--target-tokens`` tokens given a source of
the given length (``--no-grad``: a forward without gradient). Peak memory
above what the model and batch already hold: on CUDA
``torch.cuda.max_memory_allocated``; on CPU every cell runs in a fresh
forked process and the figure is the growth of its peak resident set size
(:mod:`benchmarks.measure`). Each row prints ``hepos``'s memory and time as
ratios of ``full``'s at the same length.

    python benchmarks/hepos.py                                          # CPU, small dims, 1k..8k tokens
    python benchmarks/hepos.py --device cuda --dtype bf16 --dims base --lengths 2048,4096,7168,10240
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.harness import SyntheticTask
from benchmarks.measure import allocate_gradients, in_fresh_process, separate_ratio, spread, timed_steps

#: system -> its cross-attention component
SYSTEMS = {"hepos": "hepos", "full": "full"}


def build_model(config: dict):
    import mdsfair
    from mdsfair.models.hepos_bart import HeposBARTModel, hepos_bart_large_architecture

    mdsfair.register()
    args = harness.model_args(
        HeposBARTModel,
        config["dims"],
        cross_attention=SYSTEMS[config["system"]],
        hepos_stride=config["stride"],
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_encoder_positions=config["length"],
        max_source_positions=config["length"],
        max_target_positions=max(1024, config["target_tokens"]),
    )
    hepos_bart_large_architecture(args)
    task = SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    return HeposBARTModel.build_model(args, task), task.target_dictionary


def measure(config: dict) -> dict:
    device = config["device"]
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    model, dictionary = build_model(config)
    model = model.to(device=device, dtype=harness.DTYPES[config["dtype"]]).train(config["train"])
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(dictionary.nspecial, len(dictionary), (1, config["length"]), generator=generator)
    source[0, -1] = dictionary.eos()
    target = torch.randint(dictionary.nspecial, len(dictionary), (1, config["target_tokens"]), generator=generator)
    prev_output_tokens = torch.cat([torch.full((1, 1), dictionary.eos()), target[:, :-1]], dim=1)
    inputs = {
        "src_tokens": source.to(device),
        "src_lengths": torch.tensor([config["length"]], device=device),
        "prev_output_tokens": prev_output_tokens.to(device),
    }
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
    harness.add_dims(parser, "small", "encoder and decoder size (base: BART-base's 6 + 6 layers, d 768, 12 heads)")
    parser.add_argument("--lengths", default="1024,2048,4096,8192", help="source lengths in tokens (comma list)")
    parser.add_argument("--target-tokens", type=int, default=256, help="summary tokens (default 256)")
    parser.add_argument(
        "--stride",
        type=int,
        default=4,
        help="HEPOS stride s; it must divide the heads of --dims (default 4, the paper's)",
    )
    parser.add_argument("--no-grad", action="store_true", help="a forward without gradient instead of a training step")
    harness.add_repeats(parser, "timed runs per cell after the memory run", flag="--steps")
    harness.add_threads(parser)
    parser.add_argument("--vocab-size", type=int, default=1000, help="dictionary size (default 1000)")
    results.add_argument(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps", "stride"])
    lengths = [int(x) for x in opts.lengths.split(",")]
    train = not opts.no_grad
    layers, dim, _, heads = harness.DIMS[opts.dims]
    print(
        f"{harness.device_line(opts.device, opts.threads)}; dtype {opts.dtype}; {layers} + {layers} layers, d {dim}, "
        f"{heads} heads, stride {opts.stride}; summary of {opts.target_tokens} tokens; "
        f"{'forward+backward' if train else 'no-grad forward'}; torch {torch.__version__}"
    )
    rows = harness.result_rows(
        opts,
        "hepos",
        argv,
        opts.steps,
        threads=opts.threads,
        dtype=opts.dtype,
        dims=opts.dims,
        stride=opts.stride,
        train=train,
        target_tokens=opts.target_tokens,
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
                    "dims": opts.dims,
                    "stride": opts.stride,
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
                reference = measured.get("hepos", {})
                if reference.get("peak_mib") and result.get("peak_mib"):
                    memory_ratio = reference["peak_mib"] / result["peak_mib"]
                if "seconds_each" in reference:
                    time_ratio = separate_ratio(reference["seconds_each"], result["seconds_each"])
            print(
                f"{system:>6} {length:>7} {result['peak_mib']:>9.1f} "
                f"{spread(result['seconds_each']).format('.3f'):>21} "
                f"{'' if memory_ratio is None else f'hepos {memory_ratio:.2f}x':>15} "
                f"{'' if time_ratio is None else 'hepos ' + time_ratio.format('.2f', 'x'):>21}",
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
        if "peak_mib" in measured.get("hepos", {}) and "peak_mib" in measured.get("full", {}):
            ratio = separate_ratio(measured["hepos"]["seconds_each"], measured["full"]["seconds_each"])
            rows.add(
                {
                    "system": "hepos / full",
                    "source_tokens": length,
                    "memory_ratio": measured["hepos"]["peak_mib"] / measured["full"]["peak_mib"],
                    "time_ratio": results.spread_cell(ratio),
                }
            )


if __name__ == "__main__":
    main()
