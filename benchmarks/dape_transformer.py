"""DAPE transformer benchmark: cost of the document-aware positional encoding
and of the dependency-guided encoder attention against fairseq's stock
``transformer`` (same dimensions, same weights shape), measured in one run.

For every source length, one training step (forward + backward of the whole
encoder-decoder on teacher-forced targets) of:

* ``transformer``: fairseq's stock model (the baseline, ratio 1.00);
* ``dape``: the full model (Eq. 1-11);
* ``dape --no-doc-positions`` and ``dape --no-dependency-encoding`` (Table III
  ablations), to attribute the cost.

The inputs are synthetic: documents of ``--doc-tokens`` tokens, sentences of 20
tokens, and a dependency tree per sentence (every token's head a random token
of its sentence, one ROOT self-arc, random relations), as ``mdsfair-preprocess
--side-data dep_head dep_rel`` would store them. The mask ``M`` is built from
the sparse arcs per batch (``[B, T, T]``, never ``[B, T, T, relations]``).

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` around the step; on
CPU each measurement runs in a fresh subprocess and reports the growth of the
peak resident set size. Prints the device and dtype it measured.

Time: ``seconds`` is the median (min-max) of ``--repeats`` timed steps (3 by
default) after a warm-up and the memory step. The systems are measured one
after the other (each in its own process on CPU), so ``time ratio`` is
median(system) / median(transformer), with min-max over the per-repeat pairs
taken in order (:func:`benchmarks.measure.separate_ratio`).

    python benchmarks/dape_transformer.py                                  # CPU, d 256, 2 + 2 layers
    python benchmarks/dape_transformer.py --device cuda --dtype bf16       # d 512, 8 + 8 layers (the paper's)
"""

import os
import sys
from argparse import Namespace

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import mdsfair

mdsfair.register()  # every mdsfair model, task and criterion with fairseq
from fairseq.models.transformer import TransformerModel, base_architecture

from benchmarks import harness, results
from benchmarks.harness import SyntheticTask
from benchmarks.measure import every_logit_training_step, peak_memory_and_median_time, separate_ratio, spread
from mdsfair.data.dependency_relations import DEPENDENCY_RELATIONS
from mdsfair.models.dape_transformer import DapeTransformerModel, dape_transformer_architecture

VOCAB = 1000
SENTENCE_TOKENS = 20
TARGET_TOKENS = 64
SYSTEMS = {
    "transformer": (TransformerModel, {}),
    "dape": (DapeTransformerModel, {}),
    "dape_no_doc_pos": (DapeTransformerModel, {"no_doc_positions": True}),
    "dape_no_dep": (DapeTransformerModel, {"no_dependency_encoding": True}),
}


def build(opts, system: str, source_positions: int):
    cls, flags = SYSTEMS[system]
    args = Namespace(
        **harness.dimensions(opts.layers, opts.embed_dim, 4 * opts.embed_dim, opts.heads),
        share_all_embeddings=True,
        dropout=0.1,
        max_source_positions=source_positions,
        max_target_positions=TARGET_TOKENS + 1,
        **flags,
    )
    if cls is DapeTransformerModel:
        dape_transformer_architecture(args)
    else:
        base_architecture(args)
    torch.manual_seed(0)
    # VOCAB words after fairseq's four specials
    model = cls.build_model(args, SyntheticTask(harness.synthetic_dictionary(4 + VOCAB))).train()
    return model.to(device=opts.device, dtype=harness.DTYPES[opts.dtype])


def batch(opts, num_tokens: int) -> dict:
    """``opts.batch_size`` sources of ``num_tokens`` tokens with documents,
    per-sentence dependency trees, and targets."""
    g = torch.Generator().manual_seed(0)
    size = (opts.batch_size, num_tokens)
    position = torch.arange(num_tokens).expand(size)
    sentence_start = position // SENTENCE_TOKENS * SENTENCE_TOKENS
    sentence_length = (num_tokens - sentence_start).clamp(max=SENTENCE_TOKENS)
    dep_head = sentence_start + (torch.rand(size, generator=g) * sentence_length).long()
    dep_rel = torch.randint(len(DEPENDENCY_RELATIONS), size, generator=g)
    root = position % SENTENCE_TOKENS == 0
    dep_head = torch.where(root, position, dep_head)
    dep_rel = torch.where(root, torch.full_like(dep_rel, DEPENDENCY_RELATIONS.index("ROOT")), dep_rel)
    net_input = {
        "src_tokens": torch.randint(4, VOCAB, size, generator=g),
        "src_lengths": torch.full((opts.batch_size,), num_tokens),
        "prev_output_tokens": torch.randint(4, VOCAB, (opts.batch_size, TARGET_TOKENS), generator=g),
        "src_doc_ids": position // opts.doc_tokens,
        "src_dep_head": dep_head,
        "src_dep_rel": dep_rel,
    }
    return {k: v.to(opts.device) for k, v in net_input.items()}


def measure(opts, system: str, num_tokens: int) -> dict:
    """Peak memory (MiB) and the seconds of one training step (median, min,
    max, and every timed repeat: :func:`benchmarks.measure.peak_memory_and_median_time`)."""
    model = build(opts, system, num_tokens)
    net_input = batch(opts, num_tokens)
    # the base inputs, and the side inputs the model declares (an ablation reads fewer; one it does not
    # declare is refused by the encoder)
    declared = set(model.side_inputs()) if hasattr(model, "side_inputs") else set()
    net_input = {
        k: v for k, v in net_input.items() if k in ("src_tokens", "src_lengths", "prev_output_tokens") or k in declared
    }
    return peak_memory_and_median_time(every_logit_training_step(model, net_input), opts.device, opts.repeats)


def parse_args(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser)
    parser.add_argument(
        "--lengths",
        default=None,
        help="source lengths in tokens (default 256,512,1024 on cpu, 512,1024,2048,4096 on cuda)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="sources per step (default 2 cpu, 8 cuda)")
    parser.add_argument("--doc-tokens", type=int, default=200, help="tokens per document (default 200)")
    parser.add_argument(
        "--embed-dim", type=int, default=None, help="model dim (default 512 cuda, the paper's; 256 cpu)"
    )
    parser.add_argument("--layers", type=int, default=None, help="encoder and decoder layers (default 8 cuda, 2 cpu)")
    parser.add_argument("--heads", type=int, default=None, help="attention heads (default 8 cuda, 4 cpu)")
    harness.add_repeats(parser, "timed steps per system and length")
    results.add_argument(parser)
    harness.add_measure_one(parser)
    return harness.fill_device_defaults(
        harness.parse(parser, argv),
        lengths=("512,1024,2048,4096", "256,512,1024"),
        batch_size=(8, 2),
        embed_dim=(512, 256),
        layers=(8, 2),
        heads=(8, 4),
    )


def main(argv=None):
    opts = parse_args(argv)
    if harness.answer_measure_one(opts, measure):
        return
    rows = harness.begin(
        opts,
        "dape_transformer",
        argv,
        opts.repeats,
        f"dtype {opts.dtype}; d={opts.embed_dim}, {opts.layers}+{opts.layers} layers, {opts.heads} heads, "
        f"batch {opts.batch_size}, documents of {opts.doc_tokens} tokens; torch {torch.__version__}",
        dtype=opts.dtype,
        batch_size=opts.batch_size,
        embed_dim=opts.embed_dim,
        layers=opts.layers,
        heads=opts.heads,
        doc_tokens=opts.doc_tokens,
    )
    run = harness.in_fresh_interpreter_on_cpu(
        opts,
        __file__,
        measure,
        ["device", "dtype", "batch_size", "doc_tokens", "embed_dim", "layers", "heads", "repeats"],
    )
    print("one training step (forward + backward); ratios against the stock fairseq transformer of the same run")
    print(f"{'tokens':>6} {'system':>16} {'seconds':>21} {'time ratio':>18} {'peak MiB':>9} {'mem ratio':>9}")
    for num_tokens in [int(x) for x in opts.lengths.split(",")]:
        baseline = None
        for system in SYSTEMS:
            result = run(opts, system, num_tokens)
            if "error" in result:
                print(f"{num_tokens:>6} {system:>16} failed: {result['error']}")
                continue
            baseline = baseline or result
            seconds = spread(result["seconds_each"]).format(".3f")
            time_ratio = separate_ratio(result["seconds_each"], baseline["seconds_each"]).format(".2f", "x")
            print(
                f"{num_tokens:>6} {system:>16} {seconds:>21} {time_ratio:>18} {result['peak_mib']:>9.1f} "
                f"{result['peak_mib'] / max(baseline['peak_mib'], 1e-9):>8.2f}x"
            )
            rows.add(
                {
                    "source_tokens": num_tokens,
                    "system": system,
                    "seconds": results.repeats_cell(result["seconds_each"]),
                    "time_vs_transformer": results.spread_cell(
                        separate_ratio(result["seconds_each"], baseline["seconds_each"])
                    ),
                    "peak_mib": result["peak_mib"],
                    "memory_vs_transformer": result["peak_mib"] / max(baseline["peak_mib"], 1e-9),
                }
            )


if __name__ == "__main__":
    main()
