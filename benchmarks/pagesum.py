"""PageSum benchmark: encoder memory/time vs input length, decoder cost vs pages.

1. Encoder (Eq. 10): inputs of 2k..16k tokens cut into pages of
   ``--page-tokens`` (document locality, one document per page), encoded by
   PageSum's batched page encoder, against fairseq's stock BART encoder with
   dense self-attention over the same tokens (its learned position table is
   enlarged to the input length: a cost measurement, not a pretrained model),
   measured where it fits (``--max-dense-tokens``). PageSum's peak memory
   should grow linearly (doubling the input doubles it), dense attention's
   quadratically.
2. Decoder: time per generated token (one incremental step, batch 1, beam 1)
   against the number of pages, relative to stock BART's decoder on one page.

Times are printed as median (min-max) over ``--repeats`` (3 by default;
:mod:`benchmarks.measure`): timed encoder forwards after a warm-up and the
memory forward; for the decoder, whole incremental decodes of
``--decoder-steps`` steps after the first, each giving the median time of its
steps. Every measurement runs one after the other (PageSum and dense in
separate processes on CPU; the stock BART decoder before the PageSum ones), so
a time ratio is median / median with min-max over the per-repeat pairs taken
in order (:func:`benchmarks.measure.separate_ratio`).

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` around the forward;
on CPU every measurement runs in a fresh subprocess and reports the growth of
the peak resident set size during the forward. Both models run under
``torch.no_grad`` (inference). Prints which device and dtype it measured.

    python benchmarks/pagesum.py                      # CPU, shrunk dims
    python benchmarks/pagesum.py --device cuda --dtype bf16 --embed-dim 1024 --layers 12 --heads 16
"""

import os
import sys
from argparse import Namespace

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import mdsfair

mdsfair.register()  # every mdsfair model, task and criterion with fairseq
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_large_architecture

from benchmarks import harness, results
from benchmarks.harness import SyntheticTask
from benchmarks.measure import peak_memory_and_median_time, separate_ratio, spread, timed
from mdsfair.models.pagesum_bart import PageSumBARTModel, pagesum_bart_large_architecture

VOCAB = 1000  # words after fairseq's four specials


def model_args(opts, pagesum: bool, source_positions: int) -> Namespace:
    args = Namespace(
        **harness.dimensions(opts.layers, opts.embed_dim, 4 * opts.embed_dim, opts.heads),
        dropout=0.0,
        task="multidoc_summarization",
        max_target_positions=1024,
        max_source_positions=source_positions,
    )
    if pagesum:
        args.locality, args.num_pages, args.page_tokens = "document", 10_000, opts.page_tokens
        args.max_page_positions = opts.page_tokens
        pagesum_bart_large_architecture(args)
    else:
        bart_large_architecture(args)
    return args


def build(opts, pagesum: bool, source_positions: int):
    task = SyntheticTask(harness.synthetic_dictionary(4 + VOCAB))
    cls = PageSumBARTModel if pagesum else BARTModel
    torch.manual_seed(0)
    model = cls.build_model(model_args(opts, pagesum, source_positions), task).eval()
    return model.to(device=opts.device, dtype=harness.DTYPES[opts.dtype]), task.source_dictionary


def source(dictionary, num_tokens: int, page_tokens: int, device):
    """``<s> ... </s>`` of ``num_tokens`` tokens, documents filling one page each."""
    content = page_tokens - 2
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (1, num_tokens), generator=g)
    tokens[0, 0], tokens[0, -1] = dictionary.bos(), dictionary.eos()
    doc_ids = (
        ((torch.arange(num_tokens) - 1).clamp(min=0) // content).clamp(max=(num_tokens - 3) // content).unsqueeze(0)
    )
    return tokens.to(device), doc_ids.to(device)


def measure_encoder(opts, system: str, num_tokens: int) -> dict:
    """Peak memory (MiB) and time (s: median, min, max, each repeat) of one
    encoder forward of ``system``: ``pagesum`` or ``dense`` (stock BART)."""
    pagesum = system == "pagesum"
    model, dictionary = build(opts, pagesum, opts.page_tokens if pagesum else num_tokens)
    tokens, doc_ids = source(dictionary, num_tokens, opts.page_tokens, opts.device)
    lengths = torch.tensor([num_tokens], device=opts.device)
    kwargs = {"src_doc_ids": doc_ids} if pagesum else {}

    def forward():
        with torch.no_grad():
            return model.encoder(tokens, src_lengths=lengths, **kwargs)

    return peak_memory_and_median_time(forward, opts.device, opts.repeats)


def decoder_step_seconds(opts, pagesum: bool, num_pages: int) -> list:
    """Seconds of one incremental decoder step, one figure per repeat: each of
    ``opts.repeats`` decodes runs ``opts.decoder_steps + 1`` steps from an empty
    cache and gives the median of its steps after the first."""
    model, dictionary = build(opts, pagesum, opts.page_tokens)
    tokens, doc_ids = source(dictionary, num_pages * opts.page_tokens, opts.page_tokens, opts.device)
    lengths = torch.tensor([tokens.size(1)], device=opts.device)
    with torch.no_grad():
        encoder_out = (
            model.encoder(tokens, src_lengths=lengths, src_doc_ids=doc_ids)
            if pagesum
            else model.encoder(tokens[:, : opts.page_tokens], src_lengths=lengths)
        )
        prev = torch.full((1, opts.decoder_steps + 1), dictionary.eos(), device=opts.device)
        per_repeat = []
        for _ in range(opts.repeats):
            state = {}
            times = [
                timed(
                    lambda: model.decoder(prev[:, : step + 1], encoder_out=encoder_out, incremental_state=state),
                    opts.device,
                )
                for step in range(opts.decoder_steps + 1)
            ]
            per_repeat.append(spread(times[1:]).median)
    return per_repeat


def parse_args(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_dtype(parser)
    parser.add_argument("--lengths", default="2048,4096,8192,16384", help="input lengths in tokens")
    parser.add_argument("--page-tokens", type=int, default=1024, help="tokens per page (paper: 1024)")
    parser.add_argument("--embed-dim", type=int, default=None, help="model dim (default: 1024 on cuda, 256 on cpu)")
    parser.add_argument("--layers", type=int, default=None, help="encoder and decoder layers (default: 12 cuda, 2 cpu)")
    parser.add_argument("--heads", type=int, default=None, help="attention heads (default: 16 cuda, 4 cpu)")
    parser.add_argument(
        "--max-dense-tokens",
        type=int,
        default=None,
        help="longest input for the dense baseline (default: 16384 cuda, 8192 cpu)",
    )
    parser.add_argument("--pages", default="1,2,4,8,16", help="page counts for the decoder measurement")
    parser.add_argument("--decoder-steps", type=int, default=16, help="incremental decoder steps measured")
    harness.add_repeats(parser, "timed encoder forwards and decodes")
    results.add_argument(parser)
    harness.add_measure_one(parser)
    return harness.fill_device_defaults(
        harness.parse(parser, argv, at_least_one=["repeats", "decoder_steps"]),
        embed_dim=(1024, 256),
        layers=(12, 2),
        heads=(16, 4),
        max_dense_tokens=(16384, 8192),
    )


def main(argv=None):
    opts = parse_args(argv)
    if harness.answer_measure_one(opts, measure_encoder):
        return
    rows = harness.begin(
        opts,
        "pagesum",
        argv,
        opts.repeats,
        f"dtype {opts.dtype}; d={opts.embed_dim}, {opts.layers} layers, {opts.heads} heads, "
        f"pages of {opts.page_tokens} tokens; torch {torch.__version__}",
        dtype=opts.dtype,
        embed_dim=opts.embed_dim,
        layers=opts.layers,
        heads=opts.heads,
        page_tokens=opts.page_tokens,
    )
    measure = harness.in_fresh_interpreter_on_cpu(
        opts, __file__, measure_encoder, ["device", "dtype", "page_tokens", "embed_dim", "layers", "heads", "repeats"]
    )
    cell = results.repeats_cell

    print("\n1. encoder forward (inference), PageSum pages vs stock BART dense attention")
    print(
        f"{'tokens':>7} {'pages':>5} {'PageSum MiB':>12} {'dense MiB':>10} {'mem ratio':>9} "
        f"{'PageSum s':>21} {'dense s':>21} {'time ratio':>18} {'PageSum MiB/1k tok':>18}"
    )
    for num_tokens in [int(x) for x in opts.lengths.split(",")]:
        pages = -(-(num_tokens - 2) // (opts.page_tokens - 2))
        ours = measure(opts, "pagesum", num_tokens)
        dense = measure(opts, "dense", num_tokens) if num_tokens <= opts.max_dense_tokens else {"error": "skipped"}
        if "error" in ours:
            print(f"{num_tokens:>7} {pages:>5} PageSum failed: {ours['error']}")
            continue
        ours_seconds = spread(ours["seconds_each"]).format(".3f")
        if "error" in dense:
            dense_cols = f"{'(' + dense['error'][:8] + ')':>10} {'-':>9} {ours_seconds:>21} {'-':>21} {'-':>18}"
        else:
            time_ratio = separate_ratio(dense["seconds_each"], ours["seconds_each"]).format(".2f", "x")
            dense_cols = (
                f"{dense['peak_mib']:>10.1f} {dense['peak_mib'] / max(ours['peak_mib'], 1e-9):>8.2f}x "
                f"{ours_seconds:>21} {spread(dense['seconds_each']).format('.3f'):>21} {time_ratio:>18}"
            )
        print(
            f"{num_tokens:>7} {pages:>5} {ours['peak_mib']:>12.1f} {dense_cols} "
            f"{ours['peak_mib'] / num_tokens * 1000:>18.2f}"
        )
        measured_dense = "error" not in dense
        rows.add(
            {
                "part": "encoder",
                "source_tokens": num_tokens,
                "pages": pages,
                "pagesum_peak_mib": ours["peak_mib"],
                "dense_peak_mib": dense["peak_mib"] if measured_dense else None,
                "dense_vs_pagesum_memory": dense["peak_mib"] / max(ours["peak_mib"], 1e-9) if measured_dense else None,
                "pagesum_s": cell(ours["seconds_each"]),
                "dense_s": cell(dense["seconds_each"]) if measured_dense else None,
                "dense_vs_pagesum_time": results.spread_cell(
                    separate_ratio(dense["seconds_each"], ours["seconds_each"])
                )
                if measured_dense
                else None,
                "pagesum_mib_per_1k_tokens": ours["peak_mib"] / num_tokens * 1000,
            }
        )

    print("\n2. decoder: seconds per generated token (incremental step, batch 1, beam 1)")
    baseline = decoder_step_seconds(opts, False, 1)
    print(f"stock BART decoder, 1 page of {opts.page_tokens}: {spread(baseline).scaled(1e3).format('.2f')} ms/token")
    print(f"{'pages':>5} {'PageSum ms/token':>21} {'vs stock BART':>18}")
    rows.add(
        {"part": "decoder", "system": "stock BART", "pages": 1, "ms_per_token": cell(baseline, 1e3), "vs_stock": 1.0}
    )
    for num_pages in [int(x) for x in opts.pages.split(",")]:
        seconds = decoder_step_seconds(opts, True, num_pages)
        print(
            f"{num_pages:>5} {spread(seconds).scaled(1e3).format('.2f'):>21} "
            f"{separate_ratio(seconds, baseline).format('.2f', 'x'):>18}"
        )
        rows.add(
            {
                "part": "decoder",
                "system": "PageSum",
                "pages": num_pages,
                "ms_per_token": cell(seconds, 1e3),
                "vs_stock": results.spread_cell(separate_ratio(seconds, baseline)),
            }
        )


if __name__ == "__main__":
    main()
