"""Peak memory of HierEncDec's encoder on a mixed batch: the blocked document
attention against the dense masked attention (the authors' implementation),
both measured in the same run.

The batch (issue 47): two clusters, one of ``--short-documents`` short
documents (``--short-length`` tokens each, e.g. 8-12) and one of a single
``--long-length``-token document, right-padded to the longer cluster. Blocks
padded to the batch's most documents times its longest document would cost
``B * D * L * (L + D)`` scores per head, far more than the dense ``B * T^2``;
the blocked attention buckets its blocks by document length
(:class:`mdsfair.modules.document_blocks.DocumentLayout`), so that
the batch costs what its documents cost.

Each configuration runs in a fresh forked process; its figure is the peak
above what the model and the batch hold (CPU: growth of the peak resident
size, :func:`benchmarks.measure.peak_memory_and_median_time`; CUDA:
``max_memory_allocated``) of one encoder forward + backward of a
summed-square loss (``--inference``: a no-grad forward), after one warm-up.
The ratio printed is blocked / dense: at most 1 is the goal.

    python benchmarks/hierencdec_mixed_batch.py --json benchmarks/results/hierencdec_mixed_batch_cpu.json
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import (
    harness,
    results,
)
from benchmarks.harness import DIMS
from benchmarks.hierencdec import prepared_encoder_step
from benchmarks.measure import in_fresh_process, peak_memory_and_median_time

SYSTEMS = ("blocked", "dense-masked")


def parse_length_range(text: str):
    """``"8-12"`` -> ``(8, 12)``; ``"10"`` -> ``(10, 10)``."""
    low, _, high = text.partition("-")
    low, high = int(low), int(high or low)
    if not 1 <= low <= high:
        raise ValueError(f"--short-length {text!r}: expected N or LOW-HIGH with 1 <= LOW <= HIGH")
    return low, high


def mixed_batch(dictionary, short_documents: int, short_length, long_length: int, device: str):
    """Tokens and ``src_doc_ids`` ``[2, T]``: a cluster of ``short_documents``
    documents of lengths drawn in ``short_length`` (seeded), and a cluster of
    one ``long_length``-token document; each document opens with ``<s>``,
    each cluster ends with ``</s>``, padding fills the shorter cluster."""
    generator = torch.Generator().manual_seed(0)
    low, high = short_length
    lengths = torch.randint(low, high + 1, (short_documents,), generator=generator)
    clusters = [torch.arange(short_documents).repeat_interleave(lengths), torch.zeros(long_length, dtype=torch.long)]
    length = max(len(ids) for ids in clusters)
    document_ids = torch.full((2, length), -1, dtype=torch.long)
    tokens = torch.full((2, length), dictionary.pad(), dtype=torch.long)
    for row, ids in enumerate(clusters):
        document_ids[row, : len(ids)] = ids
        tokens[row, : len(ids)] = torch.randint(dictionary.nspecial, len(dictionary), (len(ids),), generator=generator)
        starts = torch.ones_like(ids, dtype=torch.bool)
        starts[1:] = ids[1:].ne(ids[:-1])
        tokens[row, : len(ids)][starts] = dictionary.bos()
        tokens[row, len(ids) - 1] = dictionary.eos()
    return tokens.to(device), document_ids.to(device)


def measure(config: dict) -> dict:
    """Peak memory (MiB) of one encoder step of ``config["system"]`` on the mixed batch."""

    def source(dictionary):
        return mixed_batch(
            dictionary, config["short_documents"], config["short_length"], config["long_length"], config["device"]
        )

    step, tokens = prepared_encoder_step(config, config["max_positions"], source, None)
    measured = peak_memory_and_median_time(step, config["device"], repeats=0)
    return {"peak_mib": measured["peak_mib"], "source_tokens": tokens.size(1)}


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dims(
        parser, "small", "encoder size: 'small' (2 layers, d 256, 4 heads; CPU default) or 'base' (bart_base)"
    )
    harness.add_threads(parser)
    parser.add_argument("--short-documents", type=int, default=250, help="documents of the short-document cluster")
    parser.add_argument(
        "--short-length", default="8-12", help="tokens per short document: N, or LOW-HIGH drawn uniformly (seeded)"
    )
    parser.add_argument("--long-length", type=int, default=1000, help="tokens of the long cluster's one document")
    parser.add_argument(
        "--vocab-size", type=int, default=1000, help="dictionary size (encoder cost barely depends on it)"
    )
    parser.add_argument(
        "--inference", action="store_true", help="measure a no-grad forward instead of forward + backward"
    )
    results.add_argument(parser)
    args = harness.parse(parser, argv, at_least_one=["short_documents", "long_length"])
    short_length = parse_length_range(args.short_length)
    max_positions = max(args.short_documents * short_length[1], args.long_length)
    layers, embed_dim, ffn_dim, heads = DIMS[args.dims]
    rows = harness.begin(
        args,
        "hierencdec_mixed_batch",
        argv,
        1,
        f"batch 2: {args.short_documents} documents of {args.short_length} tokens | one document of "
        f"{args.long_length} tokens; encoder {layers} layers, d {embed_dim}, ffn {ffn_dim}, {heads} heads; "
        f"{'forward (no grad)' if args.inference else 'forward + backward'}; load {os.getloadavg()[0]:.2f}",
        threads=args.threads,
        dims=args.dims,
        short_documents=args.short_documents,
        short_length=args.short_length,
        long_length=args.long_length,
        inference=args.inference,
        notes="peak memory of one step after one warm-up, each system in a fresh process; "
        "memory does not depend on the load",
    )
    base = {
        "device": args.device,
        "dims": args.dims,
        "threads": args.threads,
        "max_positions": max_positions,
        "vocab_size": args.vocab_size,
        "inference": args.inference,
        "short_documents": args.short_documents,
        "short_length": short_length,
        "long_length": args.long_length,
    }
    result = {system: in_fresh_process(measure, {**base, "system": system}) for system in SYSTEMS}
    blocked, dense = result["blocked"]["peak_mib"], result["dense-masked"]["peak_mib"]
    header = f"{'source tokens':>13} | {'blocked MiB':>11} {'dense MiB':>9} {'blocked/dense':>13}"
    harness.print_header(header)
    print(f"{result['blocked']['source_tokens']:>13} | {blocked:>11.0f} {dense:>9.0f} {blocked / dense:>13.2f}")
    rows.add(
        {
            "source_tokens": result["blocked"]["source_tokens"],
            "blocked_peak_mib": blocked,
            "dense_peak_mib": dense,
            "blocked_vs_dense_memory": blocked / dense,
        },
        load_average_at_end=round(os.getloadavg()[0], 2),
    )


if __name__ == "__main__":
    main()
