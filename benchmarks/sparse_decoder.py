"""Generation speed of sparse vs full encoder-decoder attention (Manakul & Gales 2021).

One random-weight ``sparse_bart`` model generates with fairseq's
SequenceGenerator (beam 4, length penalty 2.0) from synthetic sources of
1,024 and 4,096 tokens split into sentences. Rows, all measured in the same
run on the same weights:

* ``stock BART``: fairseq's own ``bart`` model holding the same weights (its
  "beamable" cross-attention keeps K/V once per source): the baseline;
* ``full``: ``sparse_bart`` with ``top_r = 0`` (full cross-attention through
  a per-source K/V cache, as the masked sparse path);
* ``r=R``: the model-based approximator's top-R sentences (BiGRU sentence
  encoder, Eq. 7-10), the kept sentences read per hypothesis;
* ``free r=R``: the same with the model-free approximator (App. D, Eq. 19:
  no sentence encoder, sentence keys summed from the word keys);
* ``pool r=R``: the model-based approximator with the attention-pooling
  sentence encoder that Sec. 4.5 proposes instead of the BiGRU
  (``--sentence-encoder attention-pooling``).

Sources are split into sentences of ``--sentence-tokens`` tokens, or, with
``--sentences-per-source S1 S2 ...``, into each of those counts of
sentences of near-equal length (``N / S`` tokens, rounded either way) at
every ``--source-lengths``: a sweep over the sentence count at a fixed
source length (4,096 tokens = 200 sentences of about 20 tokens, a
Multi-News-like cluster). The approximator scores all S sentences at every
step (Eq. 7) while the decoder reads the ``r`` kept sentences' tokens, so
the two costs move in opposite directions as S grows; every setting of the
sweep times stock BART again in the same run, and its rows' ratios are
against that.

Each configuration runs with ``--batch-sizes`` sources per batch (fairseq-
generate batches sources; with one source the decoder's per-step cost is
mostly reading its own weights, which no attention change can remove).

Every run decodes exactly ``--target-length`` steps (min = max length), so
rows compare equal work. The encoder time (``enc s``; the model-based
encoder includes its sentence encoder) and the decoding time
(``dec s``: the generator with the encoder output given) are each timed in
``--repeats`` runs (3 by default) after a warm-up, the models interleaved in
every repeat so that load drift hits all alike. ``total`` is their sum per
repeat (the encoder run and the decoding run of the same repeat), ``dec %``
the decoding's share of it. Speed-ups are against stock BART and against
``full`` (the same checkpoint with full cross-attention), for the decoding
alone and for the whole generation.

Every figure is printed as median (min-max) over the repeats
(:mod:`benchmarks.measure`). As all rows are measured in every repeat, a
ratio (``dec %`` and the speed-ups) is computed per repeat and the median
(min-max) of those per-repeat ratios is printed
(:func:`benchmarks.measure.interleaved_ratio`).

Random weights are enough for speed: the cost does not depend on their values.
Every model is the registered architecture ``sparse_bart_base`` (BART-base's
settings: embedding layer norm, learned positions, one embedding shared by
both stacks and the output; stock BART is built from the same arguments), at
the dimensions given, by default BART-base's (6+6 layers, d 768, 12 heads,
FFN 3072, vocabulary 50,265); the output layer over 50k words then costs about as much
per step as the cross-attention over 4,096 tokens, so ``--vocab-size`` lets a
run isolate the attention.

    python benchmarks/sparse_decoder.py                       # CPU, fp32
    python benchmarks/sparse_decoder.py --device cuda --dtype bf16
"""

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mdsfair

mdsfair.register()  # every mdsfair model, task and criterion with fairseq
from fairseq.models.bart import BARTModel
from fairseq.sequence_generator import SequenceGenerator

from benchmarks import harness, results
from benchmarks.measure import interleaved_ratio, profile_table, spread, timed, timed_call
from mdsfair.generation.static_decoding import StaticShapeSequenceGenerator
from mdsfair.models.sparse_bart import SparseBARTModel


def build_model(options, dictionary, max_source_positions, approximator="model-based", sentence_encoder="bigru"):
    args = harness.architecture_args(
        "sparse_bart_base",
        approximator=approximator,
        sentence_encoder=sentence_encoder,
        **harness.dimensions(options.layers, options.dim, 4 * options.dim, options.heads),
        max_source_positions=max_source_positions,
        max_target_positions=1024,
        share_selection_across_beams=options.share_selection_across_beams,
    )
    return SparseBARTModel.build_model(args, harness.SyntheticTask(dictionary)), args


def stock_bart_like(sparse_model, args, dictionary):
    """fairseq's ``bart`` with the sparse model's word-level weights."""
    stock = BARTModel.build_model(args, harness.SyntheticTask(dictionary))
    state = {k: v for k, v in sparse_model.state_dict().items() if k in stock.state_dict()}
    stock.load_state_dict(state, strict=True)
    return stock


def variant_like(sparse_model, options, dictionary, max_source_positions, **variant):
    """``sparse_bart`` with another approximator or sentence encoder
    (``variant``) and the same word-level weights."""
    other, _ = build_model(options, dictionary, max_source_positions, **variant)
    own = "encoder.sentence_encoder."  # the variant's own sentence encoder (or none)
    state = {k: v for k, v in sparse_model.state_dict().items() if k in other.state_dict() and not k.startswith(own)}
    missing = [k for k in other.state_dict() if k not in state]
    if any(not k.startswith(own) for k in missing):
        raise RuntimeError(f"weights not shared with the benchmarked model: {missing}")
    other.load_state_dict(state, strict=False)
    return other


#: the coefficient of variation of sentence lengths in words of real clusters:
#: PeerSum's reviews and discussions (1,826 sentences of the 10 test clusters
#: split at sentence-final punctuation: mean 19.3 words, standard deviation 12.4)
SENTENCE_LENGTH_SPREAD = 0.64


def synthetic_batch(
    dictionary, batch_size, source_tokens, sentence_tokens, generator, num_sentences=None, length_spread=0.0
):
    """``batch_size`` sources of ``source_tokens`` tokens (``</s>`` last) in
    sentences of ``sentence_tokens`` tokens, or, if ``num_sentences`` is
    given, in ``num_sentences`` sentences, of equal length (``length_spread``
    0: lengths ``N / S`` rounded down or up) or of lengths drawn per source
    (:func:`sentence_lengths`)."""
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (batch_size, source_tokens), generator=generator)
    tokens[:, -1] = dictionary.eos()
    if num_sentences is None:
        num_sentences = -(-source_tokens // sentence_tokens)
        equal_ids = torch.arange(source_tokens) // sentence_tokens
    else:
        equal_ids = torch.arange(source_tokens) * num_sentences // source_tokens
    if length_spread > 0:
        sentence_ids = torch.stack(
            [
                torch.repeat_interleave(
                    torch.arange(num_sentences),
                    sentence_lengths(source_tokens, num_sentences, length_spread, generator),
                )
                for _ in range(batch_size)
            ]
        )
    else:
        sentence_ids = equal_ids.repeat(batch_size, 1)
    sentence_ids[:, -1] = sentence_ids[:, -2]
    return {
        "net_input": {
            "src_tokens": tokens,
            "src_lengths": torch.full((batch_size,), source_tokens),
            "src_sent_ids": sentence_ids,
        }
    }


def sentence_lengths(source_tokens, num_sentences, spread, generator):
    """``num_sentences`` lengths of at least 2 tokens summing to
    ``source_tokens``, drawn from a log-normal distribution whose standard
    deviation is ``spread`` times its mean (sentence lengths in words are
    close to log-normal)."""
    sigma = math.sqrt(math.log1p(spread**2))
    weights = torch.exp(sigma * torch.randn(num_sentences, generator=generator, dtype=torch.float64))
    spare = source_tokens - 2 * num_sentences  # every sentence has at least 2 tokens
    shares = weights / weights.sum() * spare
    lengths = 2 + shares.floor().long()
    remainder = source_tokens - int(lengths.sum())  # largest remainders first
    lengths[torch.argsort(shares - shares.floor(), descending=True)[:remainder]] += 1
    return lengths


def set_top_r(model, top_r):
    for layer in model.decoder.layers:
        layer.encoder_attn.top_r = top_r
        layer.encoder_attn.selection = "approx"


def encode(model, sample, device):
    """Seconds of one encoder run and its output."""
    return timed_call(lambda: model.encoder(**sample["net_input"]), device)


def decoding_runner(model, dictionary, sample, encoder_out, options):
    """A function that decodes once with ``encoder_out`` given (the
    generator's encoder call returns it)."""
    generator_class = StaticShapeSequenceGenerator if options.static_decoding else SequenceGenerator
    generator = generator_class(
        [model],
        dictionary,
        beam_size=options.beam,
        len_penalty=2.0,
        min_len=options.target_length,
        max_len_a=0,
        max_len_b=options.target_length,
    )
    generator.model.forward_encoder = lambda _: [encoder_out]
    generator.generate([model], sample)  # warm-up
    return lambda: generator.generate([model], sample)


def sentence_counts(text: str):
    """``--sentences-per-source``: comma-separated positive integers."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sentence counts such as 100,200, got {text!r}")
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"sentence counts must be at least 1, got {text!r}")
    return counts


def main(argv=None):
    parser = harness.argument_parser(__doc__, whole_docstring=True)
    harness.add_device(parser)
    harness.add_dtype(parser)
    parser.add_argument("--source-lengths", type=int, nargs="+", default=[1024, 4096], help="source tokens N")
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[1, 4],
        help="sources per batch (each decoded with --beam hypotheses)",
    )
    parser.add_argument("--top-r", type=int, nargs="+", default=[5, 10, 30], help="sentences kept (r)")
    parser.add_argument(
        "--model-free-top-r",
        type=int,
        nargs="*",
        default=[5],
        help="r of the rows with the model-free approximator (App. D); none: no such rows",
    )
    parser.add_argument(
        "--pooling-top-r",
        type=int,
        nargs="*",
        default=[5],
        help="r of the rows with the attention-pooling sentence encoder (Sec. 4.5); none: no such rows",
    )
    sentences = parser.add_mutually_exclusive_group()
    sentences.add_argument(
        "--sentence-tokens",
        type=int,
        default=30,
        help="tokens per sentence N2 (CNN/DM: 870/28.7 = 30; arXiv: 8584/237 = 36)",
    )
    sentences.add_argument(
        "--sentences-per-source",
        type=sentence_counts,
        default=None,
        metavar="S1,S2,...",
        help="instead of --sentence-tokens: a sweep over the sentence count N1, each source of "
        "every --source-lengths split into S sentences for each S given "
        "(comma-separated, e.g. 100,200,300,400: at 4,096 tokens 200 sentences are about "
        "20 tokens, as Multi-News), stock BART timed again at every S",
    )
    parser.add_argument(
        "--sentence-length-spread",
        type=float,
        default=SENTENCE_LENGTH_SPREAD,
        metavar="CV",
        help="sentence lengths drawn per source from a log-normal distribution whose standard deviation is CV "
        f"times the mean (default {SENTENCE_LENGTH_SPREAD}: the spread of real multi-document sources, where a "
        "cluster's longest sentence is often five times its mean); 0: all sentences of equal length",
    )
    parser.add_argument("--target-length", type=int, default=60, help="decoding steps M (min = max length)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (the paper: 4)")
    parser.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (BART-base: 6)")
    parser.add_argument("--dim", type=int, default=768, help="model dimension (BART-base: 768)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (BART-base: 12)")
    parser.add_argument("--vocab-size", type=int, default=50265, help="dictionary size (BART: 50,265)")
    harness.add_repeats(parser, "timed encoder and decoding runs per row")
    parser.add_argument(
        "--share-selection-across-beams",
        action="store_true",
        help="the authors' selection shared by the beam hypotheses",
    )
    parser.add_argument(
        "--static-decoding",
        action="store_true",
        help="every row (stock BART too) decodes with mdsfair's static-shape beam search "
        "(--static-decoding: finished sources kept as padding, the encoder output expanded "
        "once and never reordered) instead of fairseq's SequenceGenerator",
    )
    harness.add_threads(parser, default=None)
    harness.add_profile(
        parser, "after the timings, profile one decoding of the 'full' row and of the first --top-r row"
    )
    results.add_argument(parser)
    options = harness.parse(parser, argv)
    if options.sentences_per_source is not None:
        too_many = [
            (count, tokens)
            for count in options.sentences_per_source
            for tokens in options.source_lengths
            if 2 * count > tokens
        ]
        if too_many:
            parser.error(
                f"--sentences-per-source {too_many[0][0]} needs at least {2 * too_many[0][0]} source tokens "
                f"(--source-lengths {too_many[0][1]}): sentences of at least 2 tokens, </s> joining the last"
            )
    if options.threads:
        torch.set_num_threads(options.threads)
    device = torch.device(options.device)

    dictionary = harness.synthetic_dictionary(options.vocab_size)
    max_positions = max(options.source_lengths)
    model, args = build_model(options, dictionary, max_positions)
    models = {
        "stock": stock_bart_like(model, args, dictionary),
        "bigru": model,
        "free": variant_like(model, options, dictionary, max_positions, approximator="model-free"),
        "pool": variant_like(model, options, dictionary, max_positions, sentence_encoder="attention-pooling"),
    }
    models = {name: m.to(device=device, dtype=harness.DTYPES[options.dtype]).eval() for name, m in models.items()}
    measured = harness.begin(
        options,
        "sparse_decoder",
        argv,
        options.repeats,
        f"dtype {options.dtype}; torch {torch.__version__}; random weights, {options.layers}+{options.layers} layers, "
        f"d {options.dim}, {options.heads} heads, vocab {len(dictionary)}; "
        f"beam {options.beam}, lenpen 2.0, M = {options.target_length} steps; "
        + (
            f"sentences of {options.sentence_tokens} tokens"
            if options.sentences_per_source is None
            else f"{', '.join(map(str, options.sentences_per_source))} sentences per source (N1)"
        )
        + (
            f", lengths spread {options.sentence_length_spread} (log-normal)"
            if options.sentence_length_spread > 0
            else ", equal lengths"
        ),
        dtype=options.dtype,
        target_steps=options.target_length,
        beam=options.beam,
        sentence_length_spread=options.sentence_length_spread,
    )
    header = (
        f"{'B':>3} {'N':>6} {'N1':>5} {'attention':>11} {'enc s':>18} {'dec s':>18} {'total s':>18} "
        f"{'dec %':>14} {'dec vs stock':>18} {'total vs stock':>18} {'dec vs full':>18} {'total vs full':>18}"
    )
    harness.print_header(header)
    rows = [("stock BART", "stock", None), ("full", "bigru", 0)]
    rows += [(f"r={r}", "bigru", r) for r in options.top_r]
    rows += [(f"free r={r}", "free", r) for r in options.model_free_top_r]
    rows += [(f"pool r={r}", "pool", r) for r in options.pooling_top_r]
    random = torch.Generator().manual_seed(0)
    for batch_size in options.batch_sizes:
        for source_tokens in options.source_lengths:
            for sentences_per_source in options.sentences_per_source or [None]:
                sample = synthetic_batch(
                    dictionary,
                    batch_size,
                    source_tokens,
                    options.sentence_tokens,
                    random,
                    num_sentences=sentences_per_source,
                    length_spread=options.sentence_length_spread,
                )
                sample = {"net_input": {k: v.to(device) for k, v in sample["net_input"].items()}}
                samples = {name: sample for name in models}
                samples["stock"] = {"net_input": {k: v for k, v in sample["net_input"].items() if k != "src_sent_ids"}}
                num_sentences = int(sample["net_input"]["src_sent_ids"].max()) + 1
                measured.add(
                    *measure_rows(
                        options, device, dictionary, models, samples, rows, batch_size, source_tokens, num_sentences
                    )
                )


def measure_rows(options, device, dictionary, models, samples, rows, batch_size, source_tokens, num_sentences):
    """Time and print every row of one (batch size, source length) setting;
    returns the results file's rows (:mod:`benchmarks.results`)."""
    with torch.no_grad():
        used = [name for name in models if any(name == row_name for _, row_name, _ in rows)]
        # a warm-up run, then --repeats runs interleaved over the models, as for the decoding
        outputs = {name: encode(models[name], samples[name], device)[1] for name in used}
        encoder_times = {name: [] for name in used}
        for _ in range(options.repeats):
            for name in used:
                encoder_times[name].append(encode(models[name], samples[name], device)[0])
        runners = []
        for _, name, top_r in rows:
            if top_r is not None:
                set_top_r(models[name], top_r)
            runners.append(decoding_runner(models[name], dictionary, samples[name], outputs[name], options))
        # rows interleaved within every repeat, so that load drift on a shared machine hits all alike
        decoder_times = [[] for _ in rows]
        for _ in range(options.repeats):
            for times, run, (_, name, top_r) in zip(decoder_times, runners, rows):
                if top_r is not None:
                    set_top_r(models[name], top_r)
                times.append(timed(run, device))
    timings = {}  # label -> per-repeat (encoder, decoding, total) seconds
    for (label, name, _), times in zip(rows, decoder_times):
        totals = [encoder + decoder for encoder, decoder in zip(encoder_times[name], times)]
        timings[label] = (encoder_times[name], times, totals)
    stock, full = timings["stock BART"], timings["full"]
    measured = []
    for label, (encoder, decoder, total) in timings.items():
        measured.append(
            {
                "target_steps": options.target_length,
                "batch_size": batch_size,
                "source_tokens": source_tokens,
                "sentences": num_sentences,
                "attention": label,
                "encoder_s": results.repeats_cell(encoder),
                "decoding_s": results.repeats_cell(decoder),
                "total_s": results.repeats_cell(total),
                "decoding_share_pct": results.spread_cell(interleaved_ratio(decoder, total).scaled(100)),
                "decoding_vs_stock": results.spread_cell(interleaved_ratio(stock[1], decoder)),
                "total_vs_stock": results.spread_cell(interleaved_ratio(stock[2], total)),
                "decoding_vs_full": results.spread_cell(interleaved_ratio(full[1], decoder)),
                "total_vs_full": results.spread_cell(interleaved_ratio(full[2], total)),
            }
        )
        decoding_share = interleaved_ratio(decoder, total).scaled(100).format(".0f", "%")
        print(
            f"{batch_size:>3} {source_tokens:>6} {num_sentences:>5} {label:>11} "
            f"{spread(encoder).format('.2f'):>18} {spread(decoder).format('.2f'):>18} "
            f"{spread(total).format('.2f'):>18} {decoding_share:>14} "
            f"{interleaved_ratio(stock[1], decoder).format('.2f', 'x'):>18} "
            f"{interleaved_ratio(stock[2], total).format('.2f', 'x'):>18} "
            f"{interleaved_ratio(full[1], decoder).format('.2f', 'x'):>18} "
            f"{interleaved_ratio(full[2], total).format('.2f', 'x'):>18}",
            flush=True,
        )
    if options.profile:
        profiled = ("full", f"r={options.top_r[0]}") if options.top_r else ("full",)
        for (label, name, top_r), run in zip(rows, runners):
            if label in profiled:
                set_top_r(models[name], top_r)
                print(
                    profile_table(
                        run,
                        device,
                        options.profile,
                        f"one decoding, {label}, batch {batch_size}, {source_tokens} source tokens",
                    ),
                    flush=True,
                )
    return measured


if __name__ == "__main__":
    main()
