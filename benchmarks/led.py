"""LED's encoder (Longformer sliding-window + global attention) against the
other long-input encoders of mdsfair, at 2k..16k source tokens.

Systems, all at the same dimensions (``--dims``; ``base`` = BART-base, 6
layers, d 768, 12 heads):

* ``led-512``, ``led-1024``: :class:`mdsfair.models.led.LEDModel`'s encoder
  with ``--attention-window`` 512 / 1,024 (PRIMERA's / LED's), the first
  token global;
* ``bart``: fairseq's stock BART encoder, dense self-attention, its learned
  position table enlarged to the input length (a cost measurement, not a
  pretrained model). fairseq's attention calls torch's
  ``scaled_dot_product_attention``, whose fused kernels (flash attention on
  CPU, memory-efficient/flash on CUDA) never hold the ``T x T`` scores: its
  memory is linear, its time quadratic;
* ``bart-math``: the same encoder with that call restricted to torch's math
  backend, which holds the ``T x T`` scores (dense attention as BART's and
  Hugging Face's eager code compute it);
* ``hierencdec``: HierEncDec's document-blocked encoder
  (``--document-attention blocked``), documents of ``--document-tokens``;
* ``pagesum``: PageSum's encoder, one page per document of
  ``--document-tokens`` (document locality).

Measured per cell, one run (``--steps`` timed runs after the memory run;
default 3, printed as median (min-max)): one encoder forward, no gradient
(``--train``: forward and backward of a summed-square loss). Peak memory above what the model and
batch already hold: on CUDA ``torch.cuda.max_memory_allocated``; on CPU
every cell runs in a fresh forked process and the figure is the growth of
its peak resident set size (:mod:`benchmarks.measure`). The table prints
MiB, MiB per 1k tokens, seconds and every system's memory relative to
``led-1024``; then the two targets of issue 20: LED's memory per 1k tokens
at the longest length within 1.3x of that at the shortest (linear), and below
dense BART from 4k on. The cells run one after the other, each in its own
process, so a time ratio there is median(LED) / median(BART) with min-max over
the per-step pairs taken in order (:func:`benchmarks.measure.separate_ratio`).

    python benchmarks/led.py                                  # CPU, base dims, 2k..16k
    python benchmarks/led.py --dims small --max-math-tokens 8192   # reduced scope
    python benchmarks/led.py --device cuda --dtype bf16
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.harness import DIMS, SyntheticTask
from benchmarks.measure import (
    allocate_gradients,
    in_fresh_process_or_error,
    separate_ratio,
    spread,
    timed_steps,
    training_or_forward_step,
)

SYSTEMS = ("led-512", "led-1024", "bart", "bart-math", "hierencdec", "pagesum")


def model_args(model_class, dims: str, length: int):
    """The encoder's flags at ``dims`` for sources of ``length`` tokens, no dropout."""
    return harness.model_args(
        model_class,
        dims,
        max_source_positions=length,
        max_target_positions=1024,
        dropout=0.0,
        attention_dropout=0.0,
        task="multidoc_summarization",
    )


def build_encoder(config: dict):
    system, dims, length = config["system"], config["dims"], config["length"]
    task = SyntheticTask(harness.synthetic_dictionary(config["vocab_size"]))
    if system.startswith("led"):
        from mdsfair.models.led import LEDModel, led_base_architecture

        args = model_args(LEDModel, dims, length)
        args.attention_window = system.split("-")[1]
        args.global_attention = "first"
        args.max_encoder_positions = max(length, 16384)
        led_base_architecture(args)
        model = LEDModel.build_model(args, task)
    elif system in ("bart", "bart-math"):
        from fairseq.models.bart import BARTModel
        from fairseq.models.bart.model import bart_base_architecture

        args = model_args(BARTModel, dims, length)
        bart_base_architecture(args)
        model = BARTModel.build_model(args, task)
    elif system == "hierencdec":
        from mdsfair.models.hierencdec_bart import HierEncDecBARTModel, hierencdec_bart_base

        args = model_args(HierEncDecBARTModel, dims, length)
        args.document_attention = "blocked"
        hierencdec_bart_base(args)
        model = HierEncDecBARTModel.build_model(args, task)
    elif system == "pagesum":
        from mdsfair.models.pagesum_bart import PageSumBARTModel, pagesum_bart_base_architecture

        args = model_args(PageSumBARTModel, dims, length)
        args.locality, args.num_pages = "document", 10_000
        args.page_tokens = args.max_page_positions = config["document_tokens"]
        pagesum_bart_base_architecture(args)
        model = PageSumBARTModel.build_model(args, task)
    else:
        raise ValueError(f"unknown system {system!r}; choose from {SYSTEMS}")
    return model.encoder.to(config["device"]), task.source_dictionary


def synthetic_source(dictionary, length: int, document_tokens: int, device: str):
    """One source of exactly ``length`` tokens: documents of
    ``document_tokens`` (PageSum's pages hold ``<s>``/``</s>`` too, so its
    documents are 2 shorter), each opened by ``<s>``, ``</s>`` at the end."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (1, length), generator=generator)
    document_ids = (torch.arange(length) // document_tokens).unsqueeze(0)
    tokens[0, torch.arange(0, length, document_tokens)] = dictionary.bos()
    tokens[0, -1] = dictionary.eos()
    return tokens.to(device), document_ids.to(device)


def measure(config: dict) -> dict:
    device = config["device"]
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    encoder, dictionary = build_encoder(config)
    encoder = encoder.to(harness.DTYPES[config["dtype"]]).train(config["train"])
    document_tokens = config["document_tokens"] - (2 if config["system"] == "pagesum" else 0)
    tokens, document_ids = synthetic_source(dictionary, config["length"], document_tokens, device)
    inputs = {"src_tokens": tokens, "src_lengths": torch.tensor([config["length"]], device=device)}
    if config["system"] in ("hierencdec", "pagesum"):
        inputs["src_doc_ids"] = document_ids
    if config["train"]:
        allocate_gradients(encoder)

    forward_and_backward = training_or_forward_step(
        lambda: encoder(**inputs), lambda output: output["encoder_out"][0].float().pow(2).mean(), config["train"]
    )

    def step():
        if config["system"] != "bart-math":
            return forward_and_backward()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            return forward_and_backward()

    return timed_steps(step, device, config["steps"])


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser)
    harness.add_dims(parser, "base", "encoder dimensions of every system (base = BART-base: 6 layers, d 768, 12 heads)")
    parser.add_argument("--lengths", default="2048,4096,8192,16384", help="source lengths in tokens (comma list)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"systems to measure (comma list of {SYSTEMS})")
    parser.add_argument(
        "--max-dense-tokens",
        type=int,
        default=None,
        help="longest source for dense BART through SDPA (default: every length)",
    )
    parser.add_argument(
        "--max-math-tokens",
        type=int,
        default=None,
        help="longest source for bart-math, whose T x T scores take 4 * heads * T^2 bytes per "
        "layer (default: every length on cuda, 4096 on cpu)",
    )
    parser.add_argument(
        "--document-tokens",
        type=int,
        default=1024,
        help="tokens per document for HierEncDec's blocks and PageSum's pages (default 1024, PageSum's page size)",
    )
    harness.add_repeats(parser, "timed runs per cell after the memory run", flag="--steps")
    parser.add_argument("--train", action="store_true", help="forward + backward instead of a no-grad forward")
    harness.add_threads(parser)
    parser.add_argument(
        "--vocab-size", type=int, default=1000, help="dictionary size (encoder cost barely depends on it)"
    )
    results.add_argument(parser)
    opts = harness.parse(parser, argv, at_least_one=["steps"])
    max_dense = opts.max_dense_tokens or 10**9
    max_math = opts.max_math_tokens or (10**9 if opts.device == "cuda" else 4096)
    lengths = [int(x) for x in opts.lengths.split(",")]
    systems = [s for s in opts.systems.split(",") if s]
    layers, embed_dim, ffn_dim, heads = DIMS[opts.dims]
    rows = harness.begin(
        opts,
        "led",
        argv,
        opts.steps,
        f"dtype {opts.dtype}; dims {opts.dims} ({layers} layers, d {embed_dim}, ffn {ffn_dim}, {heads} heads); "
        f"{'forward+backward' if opts.train else 'no-grad forward'}; documents/pages of {opts.document_tokens} "
        f"tokens; torch {torch.__version__}",
        threads=opts.threads,
        dtype=opts.dtype,
        dims=opts.dims,
        train=opts.train,
        document_tokens=opts.document_tokens,
    )
    measured = {}
    print(f"{'system':>10} {'tokens':>7} {'peak MiB':>9} {'MiB/1k tok':>10} {'seconds':>21} {'mem vs led-1024':>15}")
    for length in lengths:
        for system in systems:
            limit = {"bart": ("--max-dense-tokens", max_dense), "bart-math": ("--max-math-tokens", max_math)}.get(
                system
            )
            if limit and length > limit[1]:
                measured[system, length] = {"error": f"skipped (> {limit[0]} {limit[1]})"}
            else:
                measured[system, length] = in_fresh_process_or_error(
                    measure,
                    {
                        "system": system,
                        "dims": opts.dims,
                        "length": length,
                        "device": opts.device,
                        "dtype": opts.dtype,
                        "train": opts.train,
                        "steps": opts.steps,
                        "threads": opts.threads,
                        "vocab_size": opts.vocab_size,
                        "document_tokens": opts.document_tokens,
                    },
                )
            result = measured[system, length]
            if "error" in result:
                print(f"{system:>10} {length:>7} {result['error']}", flush=True)
                continue
            reference = measured.get(("led-1024", length), {})
            ratio = f"{result['peak_mib'] / reference['peak_mib']:.2f}x" if reference.get("peak_mib") else "-"
            print(
                f"{system:>10} {length:>7} {result['peak_mib']:>9.1f} {result['peak_mib'] / length * 1024:>10.2f} "
                f"{spread(result['seconds_each']).format('.2f'):>21} {ratio:>15}",
                flush=True,
            )
            rows.add(
                {
                    "system": system,
                    "source_tokens": length,
                    "peak_mib": result["peak_mib"],
                    "mib_per_1k_tokens": result["peak_mib"] / length * 1024,
                    "seconds": results.repeats_cell(result["seconds_each"]),
                    "memory_vs_led_1024": (
                        result["peak_mib"] / reference["peak_mib"] if reference.get("peak_mib") else None
                    ),
                }
            )

    print("\ntargets (issue 20):")
    for system in [s for s in systems if s.startswith("led")]:
        short, long = measured.get((system, lengths[0]), {}), measured.get((system, lengths[-1]), {})
        if short.get("peak_mib") and long.get("peak_mib"):
            growth = (long["peak_mib"] / lengths[-1]) / (short["peak_mib"] / lengths[0])
            print(
                f"  {system}: MiB per 1k tokens at {lengths[-1]} / at {lengths[0]} = {growth:.2f} "
                f"({'within' if growth <= 1.3 else 'ABOVE'} 1.3)"
            )
        for dense_system in ("bart", "bart-math"):
            below = []
            for length in lengths:
                dense = measured.get((dense_system, length), {})
                ours = measured.get((system, length), {})
                if length >= 4096 and dense.get("peak_mib") and ours.get("peak_mib"):
                    time_ratio = separate_ratio(ours["seconds_each"], dense["seconds_each"])
                    below.append(
                        f"{length}: memory {ours['peak_mib'] / dense['peak_mib']:.2f}x, "
                        f"time {time_ratio.format('.2f', 'x')}"
                    )
            if below:
                print(f"  {system} relative to {dense_system}: " + "; ".join(below))


if __name__ == "__main__":
    main()
