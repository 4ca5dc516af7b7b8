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
import argparse
import contextlib
import os
import sys
from argparse import Namespace

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import mdsfair  # noqa: E402

mdsfair.register()  # every mdsfair model, task and criterion with fairseq
from benchmarks import results as results_file  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    in_fresh_process, peak_memory_and_median_time, profile_table, separate_ratio, spread,
)
from fairseq.data import Dictionary  # noqa: E402
from fairseq.models.transformer import TransformerModel  # noqa: E402
from fairseq.models.transformer import base_architecture as transformer_architecture  # noqa: E402

from mdsfair.models.hiertransformer import HierarchicalTransformerModel  # noqa: E402
from mdsfair.models.hiertransformer import base_architecture as hiertransformer_architecture  # noqa: E402


class SyntheticTask:
    def __init__(self, vocab_size: int):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for i in range(vocab_size - len(self.source_dictionary)):
            self.source_dictionary.add_symbol(f"w{i}")


def model_args(system: str) -> Namespace:
    args = Namespace(
        encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_attention_heads=8,
        decoder_layers=6, dropout=0.1, share_all_embeddings=True,
        max_source_positions=100000, max_target_positions=1024,
        encoder_layers_to_keep=None, decoder_layers_to_keep=None,
    )
    if system == "hiertransformer":
        args.local_layers, args.global_layers = 5, 2
        hiertransformer_architecture(args)
    else:
        args.encoder_layers = 7
        transformer_architecture(args)
    return args


def build(system: str, vocab_size: int, device: str):
    task = SyntheticTask(vocab_size)
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
        "src_tokens": src_tokens, "src_lengths": torch.full((batch_size,), paragraphs * length),
        "src_para_ids": src_para_ids, "prev_output_tokens": prev_output_tokens,
    }
    return {k: v.to(device) for k, v in batch.items()}, target.to(device)


def training_step(model, system, batch, target, autocast_dtype, attention_backend="default"):
    inputs = batch if system == "hiertransformer" else {k: v for k, v in batch.items() if k != "src_para_ids"}
    kernels = sdpa_kernel([SDPBackend.MATH]) if attention_backend == "math" else contextlib.nullcontext()
    with torch.autocast(device_type=target.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None), \
            kernels:
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
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[config["dtype"]]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    def step():
        training_step(model, system, batch, target, dtype, config["attention_backend"])

    # the first step is both the warm-up and the memory measurement
    measured = peak_memory_and_median_time(step, device, config["steps"], warm_up=False)
    source_tokens = config["batch_size"] * config["paragraphs"] * config["length"]
    result = {"tokens_per_s_each": [source_tokens / seconds for seconds in measured["seconds_each"]],
              "peak_mb": measured["peak_mib"]}
    if config.get("profile"):
        result["profile"] = profile_table(step, device, config["profile"], f"one training step, {system}, "
                                          f"{config['paragraphs']} x {config['length']} tokens")
    return result


def run(config: dict) -> dict:
    return in_fresh_process(measure, config)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="device to measure on")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"], help="autocast dtype")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU intra-op threads (1 = stable figures on a shared machine)")
    parser.add_argument("--attention-backend", default="default", choices=["default", "math"],
                        help="PyTorch attention kernels: 'default' lets scaled_dot_product_attention pick a fused "
                             "kernel that never stores the T x T scores; 'math' materialises them, as the "
                             "hiersumm code and older fairseq did, which exposes P*L^2 vs (P*L)^2 memory")
    parser.add_argument("--batch-size", type=int, default=1, help="examples per step")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed steps per configuration after one warm-up (median (min-max) reported; default 3)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="dictionary size (paper: 32,000)")
    parser.add_argument("--target-tokens", type=int, default=140, help="target length (WikiSum mean: 139.4)")
    parser.add_argument("--sizes", default="24x67,40x75", help="PxL source shapes of part 1 (1,608 and 3,000 tokens)")
    parser.add_argument("--scaling-length", type=int, default=64, help="L of part 2")
    parser.add_argument("--scaling-paragraphs", default="8,16,32", help="P values of part 2")
    parser.add_argument("--profile", type=int, default=0, metavar="ROWS",
                        help="after each part-1 configuration's timings, profile one more step with torch.profiler "
                             "and print the ROWS operators with the most device and host time")
    results_file.add_argument(parser)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda requested but no GPU is visible")
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {args.threads} thread(s)"
    print(f"device: {device_name}; dtype {args.dtype}; attention {args.attention_backend}; batch {args.batch_size}; "
          f"vocab {args.vocab_size}; "
          f"target {args.target_tokens} tokens; d 256, 7 encoder + 6 decoder layers")
    base = {"device": args.device, "dtype": args.dtype, "threads": args.threads, "batch_size": args.batch_size,
            "steps": args.steps, "vocab_size": args.vocab_size, "attention_backend": args.attention_backend,
            "target_tokens": args.target_tokens}

    record = results_file.ResultsFile(args.json, "hiertransformer", argv, args.device, args.steps,
                                      threads=args.threads, dtype=args.dtype, batch_size=args.batch_size,
                                      attention=args.attention_backend) if args.json else None
    rows = []
    print("\n(1) paper input sizes: source tokens/s and peak step memory (MiB)")
    print(f"{'P x L':>8} {'tokens':>7} | {'HT tok/s':>17} {'flat tok/s':>17} {'ratio':>17} | "
          f"{'HT MiB':>8} {'flat MiB':>9} {'ratio':>6}")
    for size in args.sizes.split(","):
        paragraphs, length = (int(v) for v in size.lower().split("x"))
        ht = run({**base, "system": "hiertransformer", "paragraphs": paragraphs, "length": length,
                  "profile": args.profile})
        flat = run({**base, "system": "transformer", "paragraphs": paragraphs, "length": length,
                    "profile": args.profile})
        ratio = separate_ratio(ht["tokens_per_s_each"], flat["tokens_per_s_each"]).format(".2f")
        print(f"{size:>8} {paragraphs * length:>7} | {spread(ht['tokens_per_s_each']).format('.0f'):>17} "
              f"{spread(flat['tokens_per_s_each']).format('.0f'):>17} {ratio:>17} | "
              f"{ht['peak_mb']:>8.0f} {flat['peak_mb']:>9.0f} "
              f"{ht['peak_mb'] / flat['peak_mb']:>6.2f}", flush=True)
        rows.append({"part": "paper input sizes", "paragraphs_x_length": size, "source_tokens": paragraphs * length,
                     "ht_tokens_per_s": results_file.spread_cell(spread(ht["tokens_per_s_each"])),
                     "flat_tokens_per_s": results_file.spread_cell(spread(flat["tokens_per_s_each"])),
                     "ht_vs_flat": results_file.spread_cell(
                         separate_ratio(ht["tokens_per_s_each"], flat["tokens_per_s_each"])),
                     "ht_peak_mib": ht["peak_mb"], "flat_peak_mib": flat["peak_mb"],
                     "ht_vs_flat_memory": ht["peak_mb"] / flat["peak_mb"]})
        if record:
            record.write(rows)
        for result in (ht, flat):
            if "profile" in result:
                print(result["profile"], flush=True)

    print(f"\n(2) as P grows at L = {args.scaling_length}: peak step memory (MiB), source tokens/s, and the "
          f"attention-score elements one encoder layer would hold per head (HT local: P*L^2, flat: (P*L)^2)")
    print(f"{'P':>4} {'tokens':>7} | {'HT MiB':>7} {'flat MiB':>8} | {'HT tok/s':>17} {'flat tok/s':>17} | "
          f"{'HT P*L^2':>10} {'flat (PL)^2':>12}")
    for paragraphs in (int(p) for p in args.scaling_paragraphs.split(",")):
        config = {**base, "paragraphs": paragraphs, "length": args.scaling_length}
        ht = run({**config, "system": "hiertransformer"})
        flat = run({**config, "system": "transformer"})
        tokens = paragraphs * args.scaling_length
        print(f"{paragraphs:>4} {tokens:>7} | {ht['peak_mb']:>7.0f} {flat['peak_mb']:>8.0f} | "
              f"{spread(ht['tokens_per_s_each']).format('.0f'):>17} "
              f"{spread(flat['tokens_per_s_each']).format('.0f'):>17} | "
              f"{paragraphs * args.scaling_length ** 2:>10,d} {tokens ** 2:>12,d}")
        rows.append({"part": f"as P grows at L = {args.scaling_length}", "paragraphs": paragraphs,
                     "source_tokens": tokens, "ht_peak_mib": ht["peak_mb"], "flat_peak_mib": flat["peak_mb"],
                     "ht_tokens_per_s": results_file.spread_cell(spread(ht["tokens_per_s_each"])),
                     "flat_tokens_per_s": results_file.spread_cell(spread(flat["tokens_per_s_each"]))})
        if record:
            record.write(rows)


if __name__ == "__main__":
    main()
