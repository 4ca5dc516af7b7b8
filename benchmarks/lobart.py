"""LoBART's encoder (local attention, window ``--window``, no global token;
Manakul & Gales 2021) against full self-attention on the same model, memory
and time against input length, in one run.

Systems, all :class:`mdsfair.models.lobart.LoBARTModel` encoders at the same
dimensions (``--dims``: :data:`benchmarks.harness.DIMS`, ``base`` = BART-base,
6 layers, d 768, 12 heads; LoBART(4k) is BART-large, so a layer here costs
less than one of the paper's), only the encoder self-attention differs:

* ``lobart``: ``--encoder-self-attention longformer --global-attention none``
  with ``--attention-window`` ``--window`` (1,024, the paper's);
* ``full``: ``--encoder-self-attention full`` (BART's attention, through
  torch's ``scaled_dot_product_attention``, whose fused kernels never hold the
  ``T x T`` scores: memory linear, time quadratic);
* ``full-math``: the same with that call restricted to torch's math backend,
  which holds the ``T x T`` scores, as BART's and the authors' Hugging Face
  code compute dense attention.

Measured per cell (``--steps`` timed runs after the memory run, printed as
median (min-max)): one encoder forward, no gradient (``--train``: forward and
backward of a summed-square loss). Peak memory above what the model and batch
already hold (on CPU the growth of a fresh forked process's peak resident
size, :mod:`benchmarks.measure`). The table prints MiB, MiB per 1k tokens,
seconds and each system's memory and time relative to ``lobart``.

    python benchmarks/lobart.py --dims small --lengths 64,128 --window 16 --steps 1   # a quick check
    python benchmarks/lobart.py                                                     # CPU, base dims, 1k..8k
    python benchmarks/lobart.py --device cuda --dtype bf16 --train
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.harness import DIMS, SyntheticTask
from benchmarks.led import synthetic_source
from benchmarks.measure import allocate_gradients, in_fresh_process, separate_ratio, spread, timed_steps

SYSTEMS = ("lobart", "full", "full-math")
REFERENCE = "lobart"


def build_encoder(config: dict):
    """The encoder of ``config['system']`` for sources of ``config['length']`` tokens, no dropout."""
    from mdsfair.models.lobart import LoBARTModel, lobart_4k_architecture

    system, length = config["system"], config["length"]
    task = SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    args = harness.model_args(
        LoBARTModel,
        config["dims"],
        max_source_positions=length,
        max_target_positions=1024,
        dropout=0.0,
        attention_dropout=0.0,
        task="multidoc_summarization",
    )
    args.max_encoder_positions = max(length, 4096)
    args.attention_window = str(config["window"])
    args.encoder_self_attention = "longformer" if system == REFERENCE else "full"
    lobart_4k_architecture(args)
    model = LoBARTModel.build_model(args, task)
    return model.encoder.to(config["device"]), task.source_dictionary


def measure(config: dict) -> dict:
    device = config["device"]
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    encoder, dictionary = build_encoder(config)
    encoder = encoder.to(harness.DTYPES[config["dtype"]]).train(config["train"])
    tokens, _ = synthetic_source(dictionary, config["length"], config["length"], device)
    inputs = {"src_tokens": tokens, "src_lengths": torch.tensor([config["length"]], device=device)}
    if config["train"]:
        allocate_gradients(encoder)

    def forward_and_backward():
        if not config["train"]:
            with torch.no_grad():
                encoder(**inputs)
            return
        encoder(**inputs)["encoder_out"][0].float().pow(2).mean().backward()

    def step():
        if config["system"] != "full-math":
            return forward_and_backward()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            return forward_and_backward()

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
    harness.add_dims(parser, "base", "encoder dimensions of every system (base = BART-base: 6 layers, d 768, 12 heads)")
    parser.add_argument("--lengths", default="1024,2048,4096,8192", help="source lengths in tokens (comma list)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"systems to measure (comma list of {SYSTEMS})")
    parser.add_argument("--window", type=int, default=1024, help="LoBART's attention width (even; the paper's: 1,024)")
    parser.add_argument(
        "--max-math-tokens",
        type=int,
        default=None,
        help="longest source for full-math, whose T x T scores take 4 * heads * T^2 bytes per layer "
        "(default: every length on cuda, 4096 on cpu)",
    )
    harness.add_repeats(parser, "timed runs per cell after the memory run", flag="--steps")
    parser.add_argument("--train", action="store_true", help="forward + backward instead of a no-grad forward")
    harness.add_threads(parser)
    parser.add_argument(
        "--vocab-size", type=int, default=1000, help="dictionary size (encoder cost barely depends on it)"
    )
    results.add_argument(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps"])
    max_math = opts.max_math_tokens or (10**9 if opts.device == "cuda" else 4096)
    lengths = [int(x) for x in opts.lengths.split(",")]
    systems = [s for s in opts.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"--systems: unknown {unknown}; choose from {SYSTEMS}")
    layers, embed_dim, ffn_dim, heads = DIMS[opts.dims]
    print(
        f"{harness.device_line(opts.device, opts.threads)}; dtype {opts.dtype}; dims {opts.dims} ({layers} layers, "
        f"d {embed_dim}, ffn {ffn_dim}, {heads} heads); window {opts.window}; "
        f"{'forward+backward' if opts.train else 'no-grad forward'}; torch {torch.__version__}"
    )
    measured = {}
    rows = harness.result_rows(
        opts,
        "lobart",
        argv,
        opts.steps,
        threads=opts.threads,
        dtype=opts.dtype,
        dims=opts.dims,
        train=opts.train,
        window=opts.window,
    )
    print(f"{'system':>10} {'tokens':>7} {'peak MiB':>9} {'MiB/1k tok':>10} {'seconds':>21} {'vs lobart':>24}")
    for length in lengths:
        for system in systems:
            if system == "full-math" and length > max_math:
                measured[system, length] = {"error": f"skipped (> --max-math-tokens {max_math})"}
            else:
                measured[system, length] = run(
                    {
                        "system": system,
                        "dims": opts.dims,
                        "length": length,
                        "window": opts.window,
                        "device": opts.device,
                        "dtype": opts.dtype,
                        "train": opts.train,
                        "steps": opts.steps,
                        "threads": opts.threads,
                        "vocab_size": opts.vocab_size,
                    }
                )
            result = measured[system, length]
            if "error" in result:
                print(f"{system:>10} {length:>7} {result['error']}", flush=True)
                continue
            reference = measured.get((REFERENCE, length), {})
            memory_ratio = result["peak_mib"] / reference["peak_mib"] if reference.get("peak_mib") else None
            time_ratio = (
                separate_ratio(result["seconds_each"], reference["seconds_each"])
                if reference.get("seconds_each")
                else None
            )
            relative = f"mem {memory_ratio:.2f}x, time {time_ratio.median:.2f}x" if memory_ratio and time_ratio else "-"
            print(
                f"{system:>10} {length:>7} {result['peak_mib']:>9.1f} {result['peak_mib'] / length * 1024:>10.2f} "
                f"{spread(result['seconds_each']).format('.3f'):>21} {relative:>24}",
                flush=True,
            )
            rows.add(
                {
                    "system": system,
                    "source_tokens": length,
                    "peak_mib": result["peak_mib"],
                    "mib_per_1k_tokens": result["peak_mib"] / length * 1024,
                    "seconds": results.repeats_cell(result["seconds_each"]),
                    "memory_vs_lobart": memory_ratio,
                }
            )


if __name__ == "__main__":
    main()
