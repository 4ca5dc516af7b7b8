"""Training throughput and peak memory: ``hiertransformer`` vs fairseq's stock
``transformer`` with the same width and depth (Liu & Lapata 2019, Section 4).

Both models get d 256, 8 heads, feed-forward 1,024, 7 encoder layers (HT: 5
local + 2 global) and 6 decoder layers, shared embeddings, and the same
synthetic batches: ``P`` paragraphs of ``L`` tokens per example, a target of
``--target-tokens`` tokens. One training step = forward + backward of the
label-smoothed loss (no optimizer update, so its state does not enter the
memory figure).

Measured:

* throughput: source tokens per second of training steps, median (min-max)
  over ``--steps`` steps (3 by default) after one warm-up step. HT and the flat
  model run one after the other, each in its own process, so their ``ratio``
  is median(HT) / median(flat) with min-max over the per-step pairs taken in
  order (:func:`benchmarks.measure.separate_ratio`);
* peak memory of one training step above what the model and the batch
  already hold. On CUDA: ``torch.cuda.max_memory_allocated`` (tensors only).
  On CPU there is no allocator high-water mark, so every configuration runs
  in a fresh forked process and we report the growth of its peak resident set
  size (``ru_maxrss``) over its resident size just before the step: tensors
  plus allocator overhead, an upper bound on the activation memory.

Two parts: (1) the paper's input sizes, ~1,600 source tokens (24 paragraphs
x 67) and ~3,000 (40 x 75), printed as HT / flat ratios; (2) memory as the
number of paragraphs P grows at fixed L: HT's local attention costs
``P * L^2``, the flat encoder's ``(P * L)^2``.

    python benchmarks/hiertransformer.py                       # CPU, 1 thread
    python benchmarks/hiertransformer.py --attention-backend math --sizes 24x67
    python benchmarks/hiertransformer.py --device cuda --dtype bf16
"""

import contextlib
import os
import sys
from argparse import Namespace

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import mdsfair

mdsfair.register()  # every mdsfair model, task and criterion with fairseq
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer import base_architecture as transformer_architecture

from benchmarks import harness, results
from benchmarks.harness import SyntheticTask
from benchmarks.measure import allocate_gradients, in_fresh_process, separate_ratio, spread, timed_steps
from mdsfair.models.hiertransformer import HierarchicalTransformerModel
from mdsfair.models.hiertransformer import base_architecture as hiertransformer_architecture


def model_flags(system: str, dim: int = 256, heads: int = 8, **more) -> dict:
    """The flags both models share (width ``dim``, feed-forward ``4 * dim``,
    ``heads`` heads, 6 decoder layers, shared embeddings) and the encoder's
    depth: 5 local + 2 global layers for ``hiertransformer``, 7 layers for
    the flat ``transformer``; then ``more``."""
    depth = dict(local_layers=5, global_layers=2) if system == "hiertransformer" else dict(encoder_layers=7)
    return dict(
        encoder_embed_dim=dim,
        decoder_embed_dim=dim,
        encoder_ffn_embed_dim=4 * dim,
        decoder_ffn_embed_dim=4 * dim,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        decoder_layers=6,
        share_all_embeddings=True,
        **depth,
        **more,
    )


def model_args(system: str) -> Namespace:
    args = Namespace(
        **model_flags(
            system,
            dropout=0.1,
            max_source_positions=100000,
            max_target_positions=1024,
            encoder_layers_to_keep=None,
            decoder_layers_to_keep=None,
        )
    )
    if system == "hiertransformer":
        hiertransformer_architecture(args)
    else:
        transformer_architecture(args)
    return args


def build(system: str, vocab_size: int, device: str):
    task = SyntheticTask(harness.synthetic_dictionary(vocab_size))
    args = model_args(system)
    cls = HierarchicalTransformerModel if system == "hiertransformer" else TransformerModel
    torch.manual_seed(0)
    return cls.build_model(args, task).to(device).train(), task


def synthetic_batch(task, batch_size: int, paragraphs: int, length: int, target_tokens: int, device: str):
    generator = torch.Generator().manual_seed(0)
    vocab = len(task.source_dictionary)
    low = task.source_dictionary.nspecial
    src_tokens = torch.randint(low, vocab, (batch_size, paragraphs * length), generator=generator)
    src_para_ids = torch.arange(paragraphs).repeat_interleave(length).expand(batch_size, -1).contiguous()
    target = torch.randint(low, vocab, (batch_size, target_tokens), generator=generator)
    prev_output_tokens = torch.cat([torch.full((batch_size, 1), task.target_dictionary.eos()), target[:, :-1]], 1)
    batch = {
        "src_tokens": src_tokens,
        "src_lengths": torch.full((batch_size,), paragraphs * length),
        "src_para_ids": src_para_ids,
        "prev_output_tokens": prev_output_tokens,
    }
    return {k: v.to(device) for k, v in batch.items()}, target.to(device)


def training_step(model, system, batch, target, autocast_dtype, attention_backend="default"):
    inputs = batch if system == "hiertransformer" else {k: v for k, v in batch.items() if k != "src_para_ids"}
    kernels = sdpa_kernel([SDPBackend.MATH]) if attention_backend == "math" else contextlib.nullcontext()
    with (
        torch.autocast(device_type=target.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None),
        kernels,
    ):
        logits = model(**inputs)[0]
        lprobs = torch.log_softmax(logits.float(), dim=-1)
        loss = torch.nn.functional.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), reduction="sum")
        loss = 0.9 * loss - 0.1 * lprobs.mean(-1).sum()  # label smoothing 0.1
    loss.backward()
    model.zero_grad(set_to_none=False)


def measure(config: dict) -> dict:
    """Throughput of every timed step and peak step memory of one (system, P, L) configuration."""
    device, system = config["device"], config["system"]
    torch.set_num_threads(config["threads"])
    model, task = build(system, config["vocab_size"], device)
    batch, target = synthetic_batch(
        task, config["batch_size"], config["paragraphs"], config["length"], config["target_tokens"], device
    )
    dtype = harness.autocast_dtype(config["dtype"])
    allocate_gradients(model)

    def step():
        training_step(model, system, batch, target, dtype, config["attention_backend"])

    result = timed_steps(
        step,
        device,
        config["steps"],
        config.get("profile", 0),
        f"one training step, {system}, {config['paragraphs']} x {config['length']} tokens",
    )
    source_tokens = config["batch_size"] * config["paragraphs"] * config["length"]
    result["tokens_per_s_each"] = [source_tokens / seconds for seconds in result.pop("seconds_each")]
    return result


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser, "autocast dtype")
    harness.add_threads(parser)
    parser.add_argument(
        "--attention-backend",
        default="default",
        choices=["default", "math"],
        help="PyTorch attention kernels: 'default' lets scaled_dot_product_attention pick a fused "
        "kernel that never stores the T x T scores; 'math' materialises them, as the "
        "hiersumm code and older fairseq did, which exposes P*L^2 vs (P*L)^2 memory",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="examples per step")
    harness.add_repeats(parser, "timed steps per configuration after one warm-up", flag="--steps")
    parser.add_argument("--vocab-size", type=int, default=8000, help="dictionary size (paper: 32,000)")
    parser.add_argument("--target-tokens", type=int, default=140, help="target length (WikiSum mean: 139.4)")
    parser.add_argument("--sizes", default="24x67,40x75", help="PxL source shapes of part 1 (1,608 and 3,000 tokens)")
    parser.add_argument("--scaling-length", type=int, default=64, help="L of part 2")
    parser.add_argument("--scaling-paragraphs", default="8,16,32", help="P values of part 2")
    harness.add_profile(parser, "after each part-1 configuration's timings, profile one more step")
    results.add_argument(parser)
    args = harness.parse(parser, argv, at_least_one=["steps"])
    rows = harness.begin(
        args,
        "hiertransformer",
        argv,
        args.steps,
        f"dtype {args.dtype}; attention {args.attention_backend}; batch {args.batch_size}; vocab {args.vocab_size}; "
        f"target {args.target_tokens} tokens; d 256, 7 encoder + 6 decoder layers",
        threads=args.threads,
        dtype=args.dtype,
        batch_size=args.batch_size,
        attention=args.attention_backend,
    )
    base = {
        "device": args.device,
        "dtype": args.dtype,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "vocab_size": args.vocab_size,
        "attention_backend": args.attention_backend,
        "target_tokens": args.target_tokens,
    }
    print("\n(1) paper input sizes: source tokens/s and peak step memory (MiB)")
    print(
        f"{'P x L':>8} {'tokens':>7} | {'HT tok/s':>17} {'flat tok/s':>17} {'ratio':>17} | "
        f"{'HT MiB':>8} {'flat MiB':>9} {'ratio':>6}"
    )
    for size in args.sizes.split(","):
        paragraphs, length = (int(v) for v in size.lower().split("x"))
        config = {**base, "paragraphs": paragraphs, "length": length, "profile": args.profile}
        ht = in_fresh_process(measure, {**config, "system": "hiertransformer"})
        flat = in_fresh_process(measure, {**config, "system": "transformer"})
        ratio = separate_ratio(ht["tokens_per_s_each"], flat["tokens_per_s_each"]).format(".2f")
        print(
            f"{size:>8} {paragraphs * length:>7} | {spread(ht['tokens_per_s_each']).format('.0f'):>17} "
            f"{spread(flat['tokens_per_s_each']).format('.0f'):>17} {ratio:>17} | "
            f"{ht['peak_mib']:>8.0f} {flat['peak_mib']:>9.0f} "
            f"{ht['peak_mib'] / flat['peak_mib']:>6.2f}",
            flush=True,
        )
        rows.add(
            {
                "part": "paper input sizes",
                "paragraphs_x_length": size,
                "source_tokens": paragraphs * length,
                "ht_tokens_per_s": results.repeats_cell(ht["tokens_per_s_each"]),
                "flat_tokens_per_s": results.repeats_cell(flat["tokens_per_s_each"]),
                "ht_vs_flat": results.spread_cell(separate_ratio(ht["tokens_per_s_each"], flat["tokens_per_s_each"])),
                "ht_peak_mib": ht["peak_mib"],
                "flat_peak_mib": flat["peak_mib"],
                "ht_vs_flat_memory": ht["peak_mib"] / flat["peak_mib"],
            }
        )
        for result in (ht, flat):
            if "profile" in result:
                print(result["profile"], flush=True)

    print(
        f"\n(2) as P grows at L = {args.scaling_length}: peak step memory (MiB), source tokens/s, and the "
        f"attention-score elements one encoder layer would hold per head (HT local: P*L^2, flat: (P*L)^2)"
    )
    print(
        f"{'P':>4} {'tokens':>7} | {'HT MiB':>7} {'flat MiB':>8} | {'HT tok/s':>17} {'flat tok/s':>17} | "
        f"{'HT P*L^2':>10} {'flat (PL)^2':>12}"
    )
    for paragraphs in (int(p) for p in args.scaling_paragraphs.split(",")):
        config = {**base, "paragraphs": paragraphs, "length": args.scaling_length}
        ht = in_fresh_process(measure, {**config, "system": "hiertransformer"})
        flat = in_fresh_process(measure, {**config, "system": "transformer"})
        tokens = paragraphs * args.scaling_length
        print(
            f"{paragraphs:>4} {tokens:>7} | {ht['peak_mib']:>7.0f} {flat['peak_mib']:>8.0f} | "
            f"{spread(ht['tokens_per_s_each']).format('.0f'):>17} "
            f"{spread(flat['tokens_per_s_each']).format('.0f'):>17} | "
            f"{paragraphs * args.scaling_length**2:>10,d} {tokens**2:>12,d}"
        )
        rows.add(
            {
                "part": f"as P grows at L = {args.scaling_length}",
                "paragraphs": paragraphs,
                "source_tokens": tokens,
                "ht_peak_mib": ht["peak_mib"],
                "flat_peak_mib": flat["peak_mib"],
                "ht_tokens_per_s": results.repeats_cell(ht["tokens_per_s_each"]),
                "flat_tokens_per_s": results.repeats_cell(flat["tokens_per_s_each"]),
            }
        )


if __name__ == "__main__":
    main()
