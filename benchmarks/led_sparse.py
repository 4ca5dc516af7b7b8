"""Generation speed of ``led_sparse`` (LED's Longformer encoder with the
sparse decoder of Manakul & Gales 2021) against ``led`` (LED with BART's full
cross-attention), on the same weights.

The sparse decoder's argument is that a generation step costs O(N1 + r N2)
instead of O(N) in the source length N: it is strongest behind an encoder
that reads 16,384 tokens (issue 31, item 4). Two random-weight models with
the same word-level weights, each its registered architecture's settings
(BART-base's: embedding layer norm, learned positions, shared embeddings) at
``led_base``'s dimensions unless changed (6+6 layers, d 768, window 1,024,
the first token global, vocabulary 50,265):

* ``led``: ``--arch led_base``;
* ``led_sparse r=R``: ``--arch led_sparse``, the model-based approximator's
  top-R sentences (BiGRU sentence encoder, Eq. 7-10), created from the LED
  weights as ``--restore-file`` would (W^Q/W^K copied from the cross-attention).

Every run decodes exactly ``--target-length`` steps (min = max length) with
fairseq's SequenceGenerator (beam ``--beam``, length penalty 2.0), so rows
compare equal work. Per source length the encoder (``enc``; led_sparse's
includes its sentence encoder) and the decoding with the encoder output given
(``dec``) are timed ``--repeats`` times after a warm-up, the two models
interleaved in every repeat; figures are median (min-max) over the repeats,
ratios per repeat (:mod:`benchmarks.measure`). ``--json FILE`` writes the
results file (:mod:`benchmarks.results`); ``benchmarks/render_docs.py`` renders
the documentation's table from it.

    python benchmarks/led_sparse.py                                  # CPU, 4k/8k/16k, batch 4, beam 4
    python benchmarks/led_sparse.py --device cuda --dtype bf16
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import mdsfair

mdsfair.register()
from fairseq.sequence_generator import SequenceGenerator

from benchmarks import harness, results
from benchmarks.measure import interleaved_ratio, spread, timed
from benchmarks.sparse_decoder import encode, synthetic_batch


def build(arch: str, options, dictionary, max_positions: int, top_r: int = 5):
    return harness.synthetic_model(
        arch,
        dictionary,
        **harness.dimensions(options.layers, options.dim, 4 * options.dim, options.heads),
        max_source_positions=max_positions,
        max_encoder_positions=max_positions,
        max_target_positions=1024,
        attention_window=str(options.window),
        top_r=top_r,
    )


def decoding_runner(model, dictionary, sample, encoder_out, options):
    """A function that decodes ``--target-length`` steps with ``encoder_out``
    given (the generator's encoder call returns it), after a warm-up of
    ``--warmup-steps`` steps (allocations, first-call costs)."""

    def generator(steps):
        built = SequenceGenerator(
            [model], dictionary, beam_size=options.beam, len_penalty=2.0, min_len=steps, max_len_a=0, max_len_b=steps
        )
        built.model.forward_encoder = lambda _: [encoder_out]
        return built

    generator(options.warmup_steps).generate([model], sample)
    timed_generator = generator(options.target_length)
    return lambda: timed_generator.generate([model], sample)


def main(argv=None):
    parser = harness.argument_parser(__doc__, whole_docstring=True)
    harness.add_device(parser)
    harness.add_dtype(parser)
    parser.add_argument("--source-lengths", type=int, nargs="+", default=[4096, 8192, 16384], help="source tokens N")
    parser.add_argument("--batch-size", type=int, default=4, help="sources per batch")
    parser.add_argument("--beam", type=int, default=4, help="beam size")
    parser.add_argument("--top-r", type=int, default=5, help="sentences kept (r)")
    parser.add_argument("--sentence-tokens", type=int, default=30, help="tokens per sentence N2")
    parser.add_argument(
        "--target-length",
        type=int,
        default=256,
        help="decoding steps (min = max length; 256 is about a Multi-News summary)",
    )
    parser.add_argument("--warmup-steps", type=int, default=4, help="decoding steps of the untimed warm-up")
    parser.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (LED-base: 6)")
    parser.add_argument("--dim", type=int, default=768, help="model dimension (LED-base: 768)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (LED-base: 12)")
    parser.add_argument("--window", type=int, default=1024, help="Longformer window (LED: 1,024)")
    parser.add_argument("--vocab-size", type=int, default=50265, help="dictionary size (BART: 50,265)")
    harness.add_repeats(parser, "timed runs per row")
    harness.add_threads(parser, default=None)
    results.add_argument(parser)
    options = harness.parse(
        parser, argv, at_least_one=("repeats", "batch_size", "beam", "target_length", "sentence_tokens", "warmup_steps")
    )
    if options.top_r < 1:
        parser.error("--top-r must be at least 1 (0 is full attention: the led row)")
    if options.threads:
        torch.set_num_threads(options.threads)
    device = torch.device(options.device)

    dictionary = harness.synthetic_dictionary(options.vocab_size)
    rows = harness.begin(
        options,
        "led_sparse",
        argv,
        options.repeats,
        f"dtype {options.dtype}; torch {torch.__version__}; random weights, {options.layers}+{options.layers} layers, "
        f"d {options.dim}, window {options.window}, vocab {len(dictionary)}; batch {options.batch_size}, "
        f"beam {options.beam}, {options.target_length} steps, r = {options.top_r}, "
        f"sentences of {options.sentence_tokens} tokens",
        dtype=options.dtype,
    )
    max_positions = max(options.source_lengths)
    torch.manual_seed(0)
    led = build("led_base", options, dictionary, max_positions)
    led_sparse = build("led_sparse", options, dictionary, max_positions, options.top_r)
    state = dict(led.state_dict())
    led_sparse.upgrade_state_dict_named(state, "")  # the approximator from the LED weights, as --restore-file
    led_sparse.load_state_dict(state)
    models = {"led": led, "led_sparse": led_sparse}
    models = {name: m.to(device=device, dtype=harness.DTYPES[options.dtype]).eval() for name, m in models.items()}
    header = f"{'N':>6} {'model':>12} {'enc s':>20} {'dec s':>20} {'total s':>20} {'dec x led':>18} {'total x led':>18}"
    harness.print_header(header)
    random = torch.Generator().manual_seed(0)
    for source_tokens in options.source_lengths:
        sample = synthetic_batch(dictionary, options.batch_size, source_tokens, options.sentence_tokens, random)
        net_input = {k: v.to(device) for k, v in sample["net_input"].items()}
        samples = {
            "led": {"net_input": {k: v for k, v in net_input.items() if k != "src_sent_ids"}},
            "led_sparse": {"net_input": net_input},
        }
        times = {name: {"enc": [], "dec": []} for name in models}
        runners = {}
        with torch.no_grad():
            for name, model in models.items():  # warm-up and the decoders with the encoder output given
                _, encoder_out = encode(model, samples[name], device)
                runners[name] = decoding_runner(model, dictionary, samples[name], encoder_out, options)
            for _ in range(options.repeats):
                for name, model in models.items():
                    seconds, _ = encode(model, samples[name], device)
                    times[name]["enc"].append(seconds)
                    times[name]["dec"].append(timed(runners[name], device))
        totals = {name: [e + d for e, d in zip(t["enc"], t["dec"])] for name, t in times.items()}
        for name in models:
            row = {
                "source_tokens": source_tokens,
                "model": name,
                "encoder_s": results.repeats_cell(times[name]["enc"]),
                "decoding_s": results.repeats_cell(times[name]["dec"]),
                "total_s": results.repeats_cell(totals[name]),
                "decoding_speedup_vs_led": results.spread_cell(
                    interleaved_ratio(times["led"]["dec"], times[name]["dec"])
                ),
                "total_speedup_vs_led": results.spread_cell(interleaved_ratio(totals["led"], totals[name])),
            }
            print(
                f"{source_tokens:>6} {name:>12} {spread(times[name]['enc']).format('.2f'):>20} "
                f"{spread(times[name]['dec']).format('.2f'):>20} {spread(totals[name]).format('.2f'):>20} "
                f"{interleaved_ratio(times['led']['dec'], times[name]['dec']).format('.2f', 'x'):>18} "
                f"{interleaved_ratio(totals['led'], totals[name]).format('.2f', 'x'):>18}",
                flush=True,
            )
            rows.add(row)


if __name__ == "__main__":
    main()
