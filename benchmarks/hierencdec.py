"""Encoder time and peak memory of HierEncDec's hierarchical encoder at 4,096
source tokens: document-blocked attention vs the dense masked ``T x T``
attention (the authors' implementation) vs stock BART's full attention.

Shen et al. (2023, Sec. 7) note that attention restricted to documents could
reduce memory from the square of the total length to the square of the
longest document but leave it unimplemented; ``--document-attention blocked``
(the default) implements it. All three systems run in the same invocation on
the same input, and the ratios are printed from that one run.

Measured per configuration (one encoder forward + backward of a summed-square
loss by default, ``--inference`` for a no-grad forward):

* time: median (min-max) over ``--steps`` timed runs (3 by default) after one
  warm-up. The three systems run one after the other, each in its own
  process, so a ratio such as ``dense/blk`` is median(dense) / median(blocked)
  with min-max over the per-step pairs taken in order
  (:func:`benchmarks.measure.separate_ratio`);
* peak memory above what model and batch already hold. On CUDA:
  ``torch.cuda.max_memory_allocated`` (tensors only). On CPU each configuration
  runs in a fresh forked process and the figure is its peak resident set size
  (``ru_maxrss``) over its resident size just before the step: tensors plus
  allocator overhead.

Example (the figures in ``examples/hierencdec/README.md``)::

    python benchmarks/hierencdec.py --documents 4,8,16
    python benchmarks/hierencdec.py --device cuda --dtype bf16 --dims base
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from fairseq.models.bart import BARTModel

from benchmarks import harness, results
from benchmarks.harness import DIMS, SyntheticTask
from benchmarks.measure import allocate_gradients, in_fresh_process, separate_ratio, spread, timed_steps
from mdsfair.models.hierencdec_bart import HierEncDecBARTModel, hierencdec_bart_base

SYSTEMS = ("blocked", "dense-masked", "bart")


def build_encoder(system: str, dims: str, length: int, vocab_size: int, device: str):
    args = harness.model_args(
        HierEncDecBARTModel, dims, max_source_positions=length, dropout=0.0, attention_dropout=0.0
    )
    hierencdec_bart_base(args)
    task = SyntheticTask(harness.synthetic_dictionary(vocab_size))
    if system == "bart":
        model = BARTModel.build_model(args, task)
    else:
        args.document_attention = "blocked" if system == "blocked" else "dense"
        model = HierEncDecBARTModel.build_model(args, task)
    return model.encoder.to(device), task.source_dictionary


def synthetic_source(dictionary, batch_size: int, length: int, documents: int, device: str):
    """``batch_size`` sources of exactly ``length`` tokens: ``documents``
    equal documents, each opened by ``<s>``, one ``</s>`` at the end."""
    document_length = length // documents
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (batch_size, length))
    document_ids = (torch.arange(length) // document_length).clamp(max=documents - 1).expand(batch_size, -1)
    starts = torch.arange(documents) * document_length
    tokens[:, starts] = dictionary.bos()
    tokens[:, -1] = dictionary.eos()
    return tokens.to(device), document_ids.contiguous().to(device)


def encoder_step(encoder, system, tokens, document_ids, inference: bool, autocast_dtype):
    inputs = {"src_tokens": tokens}
    if system != "bart":
        inputs["src_doc_ids"] = document_ids
    with torch.autocast(device_type=tokens.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        if inference:
            with torch.no_grad():
                encoder(**inputs)
            return
        out = encoder(**inputs)["encoder_out"][0]
        loss = out.float().pow(2).mean()
    loss.backward()


def prepared_encoder_step(config: dict, max_positions: int, make_source, autocast_dtype):
    """One encoder step (:func:`encoder_step`) of ``config["system"]``, ready to
    run: the seed set to 0 and ``config["threads"]`` threads, the encoder built
    at ``config["dims"]`` for ``max_positions`` source tokens on
    ``config["device"]`` (training mode unless ``config["inference"]``), then
    the batch ``make_source(dictionary)`` returns (tokens, ``src_doc_ids``),
    then the gradients allocated. Returns the step and the batch's tokens."""
    torch.manual_seed(0)
    torch.set_num_threads(config["threads"])
    encoder, dictionary = build_encoder(
        config["system"], config["dims"], max_positions, config["vocab_size"], config["device"]
    )
    encoder.train(not config["inference"])
    tokens, document_ids = make_source(dictionary)
    allocate_gradients(encoder)

    def step():
        encoder_step(encoder, config["system"], tokens, document_ids, config["inference"], autocast_dtype)

    return step, tokens


def measure(config: dict) -> dict:
    """Seconds of every timed step and peak memory of one (system, documents) configuration."""

    def source(dictionary):
        return synthetic_source(
            dictionary, config["batch_size"], config["length"], config["documents"], config["device"]
        )

    step, _ = prepared_encoder_step(config, config["length"], source, harness.autocast_dtype(config["dtype"]))
    return timed_steps(
        step,
        config["device"],
        config["steps"],
        config["profile"],
        f"one encoder step, {config['system']}, {config['documents']} documents",
    )


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser, "autocast dtype")
    harness.add_dims(
        parser, "small", "encoder size: 'small' (2 layers, d 256, 4 heads; CPU default) or 'base' (bart_base)"
    )
    harness.add_threads(parser)
    parser.add_argument("--length", type=int, default=4096, help="source tokens per example (paper: 4,096)")
    parser.add_argument("--documents", default="4,8,16", help="numbers of equal-length documents to compare")
    parser.add_argument("--batch-size", type=int, default=1, help="examples per step")
    harness.add_repeats(parser, "timed steps per configuration after one warm-up", flag="--steps")
    parser.add_argument(
        "--vocab-size", type=int, default=1000, help="dictionary size (encoder cost barely depends on it)"
    )
    parser.add_argument("--inference", action="store_true", help="time a no-grad forward instead of forward + backward")
    harness.add_profile(parser, "after each configuration's timings, profile one more step")
    results.add_argument(parser)
    args = harness.parse(parser, argv, at_least_one=["steps"])
    layers, embed_dim, ffn_dim, heads = DIMS[args.dims]
    rows = harness.begin(
        args,
        "hierencdec",
        argv,
        args.steps,
        f"dtype {args.dtype}; batch {args.batch_size}; {args.length} source tokens; "
        f"encoder {layers} layers, d {embed_dim}, ffn {ffn_dim}, {heads} heads; "
        f"{'forward (no grad)' if args.inference else 'forward + backward'}",
        threads=args.threads,
        dtype=args.dtype,
        dims=args.dims,
        batch_size=args.batch_size,
        source_tokens=args.length,
        inference=args.inference,
    )
    base = {
        key: getattr(args, key)
        for key in (
            "device",
            "dtype",
            "dims",
            "threads",
            "length",
            "batch_size",
            "steps",
            "vocab_size",
            "inference",
            "profile",
        )
    }
    print(
        f"{'docs':>4} | {'blocked s':>21} {'dense s':>21} {'BART s':>21} {'dense/blk':>17} {'BART/blk':>17} | "
        f"{'blocked MiB':>11} {'dense MiB':>9} {'BART MiB':>8} {'dense/blk':>9} {'BART/blk':>8}"
    )
    for documents in (int(d) for d in args.documents.split(",")):
        result = {
            system: in_fresh_process(measure, {**base, "system": system, "documents": documents}) for system in SYSTEMS
        }
        blocked, dense, bart = result["blocked"], result["dense-masked"], result["bart"]
        seconds = {name: spread(result[name]["seconds_each"]).format(".3f") for name in SYSTEMS}
        dense_ratio = separate_ratio(dense["seconds_each"], blocked["seconds_each"]).format(".2f")
        bart_ratio = separate_ratio(bart["seconds_each"], blocked["seconds_each"]).format(".2f")
        print(
            f"{documents:>4} | {seconds['blocked']:>21} {seconds['dense-masked']:>21} {seconds['bart']:>21} "
            f"{dense_ratio:>17} {bart_ratio:>17} | "
            f"{blocked['peak_mib']:>11.0f} {dense['peak_mib']:>9.0f} {bart['peak_mib']:>8.0f} "
            f"{dense['peak_mib'] / blocked['peak_mib']:>9.2f} {bart['peak_mib'] / blocked['peak_mib']:>8.2f}",
            flush=True,
        )
        rows.add(
            {
                "documents": documents,
                "blocked_s": results.repeats_cell(blocked["seconds_each"]),
                "dense_s": results.repeats_cell(dense["seconds_each"]),
                "bart_s": results.repeats_cell(bart["seconds_each"]),
                "dense_vs_blocked": results.spread_cell(separate_ratio(dense["seconds_each"], blocked["seconds_each"])),
                "bart_vs_blocked": results.spread_cell(separate_ratio(bart["seconds_each"], blocked["seconds_each"])),
                "blocked_peak_mib": blocked["peak_mib"],
                "dense_peak_mib": dense["peak_mib"],
                "bart_peak_mib": bart["peak_mib"],
                "dense_vs_blocked_memory": dense["peak_mib"] / blocked["peak_mib"],
                "bart_vs_blocked_memory": bart["peak_mib"] / blocked["peak_mib"],
            }
        )
        for system in SYSTEMS:
            if "profile" in result[system]:
                print(result[system]["profile"], flush=True)


if __name__ == "__main__":
    main()
