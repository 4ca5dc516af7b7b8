"""Cost of n-gram blocking (``--no-repeat-ngram-size``) in beam search:
mdsfair's vectorized blocker vs fairseq's loop, and blocking on vs off.

The pinned fairseq's ``NGramRepeatBlock`` blocks nothing (it reads the end of
the pad-filled token buffer, see ``mdsfair/generation/ngram_blocking.py``).
The fair comparison is therefore with fairseq's blocker *fixed by slicing*:
its own Python path (``use_extension=False``, the path every install without
the optional CUDA extension runs, on CPU and GPU) called with the history
``tokens[:, :step + 1]``. It and mdsfair's blocker ban the same tokens, and
the benchmark checks that both generate the same hypotheses.

Two measurements per (beam, batch) configuration, all in one run:

* ``blocker``: the blocker alone, called for steps 0 .. S-1 on a generator-like
  buffer (``</s>`` then S tokens drawn from ``--history-vocab`` ids, so that
  some n-grams repeat and some tokens are banned; ``<pad>`` after the step),
  ``[batch * beam, V]`` scores; the time of those S calls, median of
  ``--repeats`` after a warm-up (``benchmarks/measure.py``);
* ``generation``: fairseq's ``SequenceGenerator`` decoding exactly S steps
  (``min_len = max_len_b = S``) with a random-weight ``transformer`` (sizes
  ``--dims``) from random sources of ``--source-length`` tokens, with no
  blocking, mdsfair's blocker, and fairseq's sliced blocker; median of
  ``--repeats`` runs, the three interleaved in every repeat so that load drift
  on a shared machine hits all alike. Per step: the generation time over
  S + 1 decoder steps (S tokens and ``</s>``), and (``blk``) the time spent
  inside the blocker's calls during those generations, which a shared
  machine's noise disturbs far less than the difference of two totals.

Ratios: ``on/off`` (generation with blocking over without), and
``fairseq/ours`` (how many times slower fairseq's sliced loop is; for the
whole generation and for the blocker alone).

Every time and ratio is printed as median (min-max) over ``--repeats`` (3 by
default; :mod:`benchmarks.measure`). In ``generation`` the three runs are
interleaved in every repeat, so a ratio is computed per repeat and the
median (min-max) of those per-repeat ratios is printed
(:func:`benchmarks.measure.interleaved_ratio`). In ``blocker alone`` the two
blockers are timed one after the other, so ``fairseq/ours`` there is
median(fairseq) / median(ours) with min-max over the per-repeat pairs taken
in order (:func:`benchmarks.measure.separate_ratio`). ``same
hyps``: mdsfair's and fairseq's sliced blocker gave the same hypotheses;
``off repeats``: the share of hypotheses that repeat an n-gram without
blocking (so that blocking had work to do).

    python benchmarks/ngram_blocking.py                    # CPU, 1 thread
    python benchmarks/ngram_blocking.py --device cuda
"""

import os
import sys

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from fairseq.data import Dictionary
from fairseq.models.transformer import TransformerModel, base_architecture
from fairseq.ngram_repeat_block import NGramRepeatBlock
from fairseq.sequence_generator import SequenceGenerator

from benchmarks import harness, results
from benchmarks.harness import DIMS
from benchmarks.measure import (
    interleaved_ratio,
    peak_memory_and_median_time,
    separate_ratio,
    spread,
    timed,
    timed_call,
)
from mdsfair.generation.ngram_blocking import VectorizedNGramRepeatBlock


class FairseqBlockerOnHistory(torch.nn.Module):
    """fairseq's ``NGramRepeatBlock`` (Python path) given ``tokens[:, :step + 1]``."""

    def __init__(self, n: int):
        super().__init__()
        self.blocker = NGramRepeatBlock(n, use_extension=False)

    def forward(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
        return self.blocker(tokens[:, : step + 1], lprobs, bsz, beam_size, step)


BLOCKERS = {"ours": VectorizedNGramRepeatBlock, "fairseq": FairseqBlockerOnHistory}


# ----------------------------------------------------------- blocker alone


def measure_blocker(config: dict) -> list:
    """Seconds of the S blocker calls of one generation, one figure per repeat."""
    device = config["device"]
    rows, steps, dictionary = (
        config["batch"] * config["beam"],
        config["steps"],
        harness.synthetic_dictionary(config["vocab_size"]),
    )
    generator = torch.Generator().manual_seed(0)
    tokens = torch.full((rows, steps + 2), dictionary.pad(), dtype=torch.long)
    tokens[:, 0] = dictionary.eos()
    tokens[:, 1 : steps + 1] = torch.randint(
        dictionary.nspecial, dictionary.nspecial + config["history_vocab"], (rows, steps), generator=generator
    )
    tokens = tokens.to(device)
    scores = torch.randn(rows, len(dictionary), generator=generator).to(device)
    blocker = BLOCKERS[config["blocker"]](config["n"]).to(device)
    views = [tokens.clone() for _ in range(steps)]  # the buffer as the generator holds it at each step
    for step, view in enumerate(views):
        view[:, step + 1 :] = dictionary.pad()

    def run():
        for step in range(steps):
            blocker(views[step], scores, config["batch"], config["beam"], step)

    return peak_memory_and_median_time(run, device, config["repeats"])["seconds_each"]


# -------------------------------------------------------------- generation


def build_model(dims: str, dictionary: Dictionary, source_length: int, steps: int):
    args = harness.model_args(
        TransformerModel,
        dims,
        max_source_positions=source_length,
        max_target_positions=steps + 2,
        share_all_embeddings=True,
        dropout=0.0,
    )
    base_architecture(args)
    return TransformerModel.build_model(args, harness.SyntheticTask(dictionary)).eval()


class TimedBlocker(torch.nn.Module):
    """A blocker that adds the seconds spent in its calls to ``seconds``
    (synchronizing CUDA around each call, so the figure is the blocker's own)."""

    def __init__(self, blocker, device: str):
        super().__init__()
        self.blocker, self.device, self.seconds = blocker, device, 0.0

    def forward(self, tokens, lprobs, bsz: int, beam_size: int, step: int):
        seconds, lprobs = timed_call(lambda: self.blocker(tokens, lprobs, bsz, beam_size, step), self.device)
        self.seconds += seconds
        return lprobs


def generation_runners(model, dictionary, sample, options, beam):
    """name -> (generator, function that decodes ``sample`` once)."""
    runners = {}
    for name in ("off", "ours", "fairseq"):
        generator = SequenceGenerator(
            [model],
            dictionary,
            beam_size=beam,
            min_len=options.steps,
            max_len_a=0,
            max_len_b=options.steps,
            no_repeat_ngram_size=0 if name == "off" else options.n,
        )
        if name != "off":
            generator.repeat_ngram_blocker = TimedBlocker(BLOCKERS[name](options.n), options.device)
        runners[name] = (generator, lambda g=generator: g.generate([model], sample))
    return runners


def has_repeated_ngram(tokens, n: int) -> bool:
    ngrams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(ngrams) != len(set(ngrams))


def measure_generation(model, dictionary, options, beam: int, batch: int):
    """Seconds of one generation per row and seconds inside the blocker per
    generation (one figure per repeat, the rows interleaved in every repeat),
    whether ours and fairseq's generated the same hypotheses, and the share of
    unblocked hypotheses that repeat an n-gram."""
    generator = torch.Generator().manual_seed(1)
    src_tokens = torch.randint(
        dictionary.nspecial, len(dictionary), (batch, options.source_length), generator=generator
    )
    src_tokens[:, -1] = dictionary.eos()
    sample = {
        "net_input": {
            "src_tokens": src_tokens.to(options.device),
            "src_lengths": torch.full((batch,), options.source_length, device=options.device),
        }
    }
    runners = generation_runners(model, dictionary, sample, options, beam)
    with torch.no_grad():
        outputs = {name: run() for name, (_, run) in runners.items()}  # warm-up, and the hypotheses compared
        same = all(
            torch.equal(a["tokens"], b["tokens"])
            for hyps_a, hyps_b in zip(outputs["ours"], outputs["fairseq"])
            for a, b in zip(hyps_a, hyps_b)
        )
        unblocked = [h["tokens"].tolist() for hyps in outputs["off"] for h in hyps]
        repeating = sum(has_repeated_ngram(tokens, options.n) for tokens in unblocked) / len(unblocked)
        times = {name: [] for name in runners}
        blocker_times = {name: [] for name in runners if name != "off"}
        for _ in range(options.repeats):
            for name, (generator, run) in runners.items():
                if name in blocker_times:
                    generator.repeat_ngram_blocker.seconds = 0.0
                times[name].append(timed(run, options.device))
                if name in blocker_times:
                    blocker_times[name].append(generator.repeat_ngram_blocker.seconds)
    return times, blocker_times, same, repeating


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    harness.add_device(parser)
    harness.add_threads(parser)
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 5], help="beam sizes")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16], help="sources per batch")
    parser.add_argument("--steps", type=int, default=200, help="decoding steps S (min = max length)")
    parser.add_argument("--n", type=int, default=3, help="--no-repeat-ngram-size")
    harness.add_dims(
        parser, "small", "generation model: 'small' (2+2 layers, d 256, 4 heads) or 'base' (transformer base sizes)"
    )
    parser.add_argument("--vocab-size", type=int, default=50265, help="dictionary size (BART's: 50,265)")
    parser.add_argument(
        "--history-vocab",
        type=int,
        default=200,
        help="distinct ids in the blocker-alone histories (fewer: more repeated n-grams)",
    )
    parser.add_argument("--source-length", type=int, default=512, help="source tokens per example")
    harness.add_repeats(parser, "timed runs per row")
    parser.add_argument("--skip-generation", action="store_true", help="measure the blocker alone only")
    results.add_argument(parser)
    options = harness.parse(parser, argv)
    torch.set_num_threads(options.threads)
    layers, embed_dim, ffn_dim, heads = DIMS[options.dims]
    rows = harness.begin(
        options,
        "ngram_blocking",
        argv,
        options.repeats,
        f"torch {torch.__version__}; n = {options.n}; S = {options.steps} steps; vocab {options.vocab_size}; "
        f"generation model: random-weight transformer {layers}+{layers} layers, d {embed_dim}, {heads} heads, "
        f"source {options.source_length} tokens",
        threads=options.threads,
        n=options.n,
        steps=options.steps,
        dims=options.dims,
        source_tokens=options.source_length,
    )
    cell = results.repeats_cell

    print("\nblocker alone: S calls on a generator-like buffer")
    header = f"{'beam':>4} {'batch':>5} {'ours ms':>19} {'fairseq ms':>19} {'fairseq/ours':>19}"
    harness.print_header(header)
    for beam in options.beams:
        for batch in options.batches:
            measured = {}
            for blocker in BLOCKERS:
                config = dict(
                    device=options.device,
                    batch=batch,
                    beam=beam,
                    steps=options.steps,
                    n=options.n,
                    vocab_size=options.vocab_size,
                    history_vocab=options.history_vocab,
                    repeats=options.repeats,
                    blocker=blocker,
                )
                measured[blocker] = measure_blocker(config)
            ours, fairseq = measured["ours"], measured["fairseq"]
            print(
                f"{beam:>4} {batch:>5} {spread(ours).scaled(1e3).format('.1f'):>19} "
                f"{spread(fairseq).scaled(1e3).format('.1f'):>19} "
                f"{separate_ratio(fairseq, ours).format('.1f', 'x'):>19}",
                flush=True,
            )
            rows.add(
                {
                    "part": "blocker alone, S calls",
                    "beam": beam,
                    "batch": batch,
                    "mdsfair_ms": cell(ours, 1e3),
                    "fairseq_ms": cell(fairseq, 1e3),
                    "fairseq_vs_mdsfair": results.spread_cell(separate_ratio(fairseq, ours)),
                }
            )
    if options.skip_generation:
        return

    print("\ngeneration: SequenceGenerator decoding S steps; ms per step = time / (S + 1); blk = inside the blocker")
    header = (
        f"{'beam':>4} {'batch':>5} {'off ms':>19} {'ours ms':>19} {'fairseq ms':>19} {'ours blk':>22} "
        f"{'fairseq blk':>22} {'ours on/off':>22} {'fairseq on/off':>22} {'fairseq/ours':>19} "
        f"{'blk fairseq/ours':>19} {'same hyps':>10} {'off repeats':>12}"
    )
    harness.print_header(header)
    dictionary = harness.synthetic_dictionary(options.vocab_size)
    torch.manual_seed(0)
    model = build_model(options.dims, dictionary, options.source_length, options.steps).to(options.device)
    per_step = (options.steps + 1) / 1e3
    for beam in options.beams:
        for batch in options.batches:
            seconds, blocker_seconds, same, repeating = measure_generation(model, dictionary, options, beam, batch)
            off, ours, fairseq = (
                spread(seconds[name]).scaled(1 / per_step).format(".2f") for name in ("off", "ours", "fairseq")
            )
            ours_blk, fairseq_blk = (
                spread(blocker_seconds[name]).scaled(1 / per_step).format(".3f") for name in ("ours", "fairseq")
            )
            ours_on_off = interleaved_ratio(seconds["ours"], seconds["off"]).format(".3f", "x")
            fairseq_on_off = interleaved_ratio(seconds["fairseq"], seconds["off"]).format(".3f", "x")
            fairseq_ours = interleaved_ratio(seconds["fairseq"], seconds["ours"]).format(".2f", "x")
            blk_fairseq_ours = interleaved_ratio(blocker_seconds["fairseq"], blocker_seconds["ours"]).format(".1f", "x")
            print(
                f"{beam:>4} {batch:>5} {off:>19} {ours:>19} {fairseq:>19} {ours_blk:>22} {fairseq_blk:>22} "
                f"{ours_on_off:>22} {fairseq_on_off:>22} {fairseq_ours:>19} {blk_fairseq_ours:>19} "
                f"{'yes' if same else 'NO':>10} {100 * repeating:>11.0f}%",
                flush=True,
            )
            rows.add(
                {
                    "part": "generation",
                    "beam": beam,
                    "batch": batch,
                    "step_no_blocking_ms": cell(seconds["off"], 1 / per_step),
                    "step_mdsfair_ms": cell(seconds["ours"], 1 / per_step),
                    "step_fairseq_ms": cell(seconds["fairseq"], 1 / per_step),
                    "blocker_mdsfair_ms": cell(blocker_seconds["ours"], 1 / per_step),
                    "blocker_fairseq_ms": cell(blocker_seconds["fairseq"], 1 / per_step),
                    "step_on_vs_off_mdsfair": results.spread_cell(interleaved_ratio(seconds["ours"], seconds["off"])),
                    "step_on_vs_off_fairseq": results.spread_cell(
                        interleaved_ratio(seconds["fairseq"], seconds["off"])
                    ),
                    "step_fairseq_vs_mdsfair": results.spread_cell(
                        interleaved_ratio(seconds["fairseq"], seconds["ours"])
                    ),
                    "blocker_fairseq_vs_mdsfair": results.spread_cell(
                        interleaved_ratio(blocker_seconds["fairseq"], blocker_seconds["ours"])
                    ),
                    "same_hypotheses": bool(same),
                }
            )


if __name__ == "__main__":
    main()
