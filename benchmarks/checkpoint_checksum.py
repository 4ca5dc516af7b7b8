"""Cost of mdsfair's checkpoint checksum against the save and load it rides on.

mdsfair stores a SHA-256 of every weight tensor in each checkpoint it writes
(``mdsfair/checkpoints/checksums.py``: :func:`~mdsfair.checkpoints.checksums.model_checksum`
at save time, :func:`~mdsfair.checkpoints.checksums.verify_model_checksum` at load time).
This benchmark builds a model (default: fairseq's ``bart_base`` with BART's
50,265-symbol vocabulary, random weights) and times, in every repeat and in
this order:

* ``save``: ``torch.save`` of the model's state dict to a file in
  ``--work-dir`` (the stock baseline: what fairseq writes at the least, before
  the optimizer state), flushed to the file system;
* ``checksum``: :func:`~mdsfair.checkpoints.checksums.model_checksum` of that state dict
  (what a save adds);
* ``load``: ``torch.load(..., weights_only=True)`` of the file;
* ``verify``: :func:`~mdsfair.checkpoints.checksums.verify_model_checksum` of the loaded
  weights against the checksum (what a load adds; it must pass).

Each time is printed as median (min-max) over ``--repeats`` (3 by default)
after one warm-up repeat (:mod:`benchmarks.measure`); the four are measured in
the same repeat, so ``checksum / save`` and ``verify / load`` are computed per
repeat and printed as median (min-max) of those per-repeat ratios
(:func:`benchmarks.measure.interleaved_ratio`).

    python benchmarks/checkpoint_checksum.py                       # bart_base, 3 repeats
    python benchmarks/checkpoint_checksum.py --arch bart_large --repeats 5
"""

import os
import shlex
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.measure import interleaved_ratio, spread, timed_call

#: BART's released vocabulary (GPT-2 BPE symbols plus fairseq's 4 specials).
BART_VOCABULARY = 50265


def build_state(arch: str, vocabulary: int, model_args: str, work_dir: str):
    """The state dict of a random-weight fairseq ``arch`` with a ``vocabulary``-symbol
    dictionary, built through fairseq's own parser, task and ``build_model``."""
    from fairseq import options, tasks

    data = os.path.join(work_dir, "dict")
    os.makedirs(data, exist_ok=True)
    for side in ("src", "tgt"):
        with open(os.path.join(data, f"dict.{side}.txt"), "w", encoding="utf-8") as handle:
            handle.writelines(f"w{i} 1\n" for i in range(vocabulary - 4))  # + <s> <pad> </s> <unk>
    argv = [data, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch, *shlex.split(model_args)]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    model = tasks.setup_task(args).build_model(args)
    return model.state_dict(), sum(p.numel() for p in model.parameters())


def one_repeat(state, path: str) -> dict:
    import torch

    from mdsfair.checkpoints.checksums import model_checksum, verify_model_checksum

    def save():
        with open(path, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())

    times = {}
    times["save"], _ = timed_call(save, "cpu")
    times["checksum"], checksum = timed_call(lambda: model_checksum(state), "cpu")
    times["load"], loaded = timed_call(lambda: torch.load(path, weights_only=True), "cpu")
    # raises if the weights read back differ
    times["verify"], _ = timed_call(lambda: verify_model_checksum(loaded, checksum, path), "cpu")
    os.remove(path)
    return times


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--arch", default="bart_base", help="fairseq architecture whose weights are saved")
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=BART_VOCABULARY,
        help="symbols of the dictionary the model is built with (default: BART's)",
    )
    parser.add_argument("--model-args", default="", help="more fairseq model flags, one string (e.g. smaller dims)")
    harness.add_repeats(parser, "timed repeats after one warm-up")
    harness.add_threads(parser, default=None)
    parser.add_argument("--work-dir", help="directory the checkpoint is written to (default: a temporary one)")
    results.add_argument(parser)
    args = harness.parse(parser, argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = harness.result_rows(
        args, "checkpoint_checksum", argv, args.repeats, device="cpu", arch=args.arch, vocab_size=args.vocab_size
    )
    with tempfile.TemporaryDirectory(prefix="mdsfair-checksum-bench-", dir=args.work_dir) as work_dir:
        state, parameters = build_state(args.arch, args.vocab_size, args.model_args, work_dir)
        storages = {
            t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()  # shared embeddings once
            for t in state.values()
            if torch.is_tensor(t)
        }
        size = sum(storages.values())
        print(
            f"{harness.device_line('cpu')}, {os.cpu_count()} cores; torch {torch.__version__}; load average {os.getloadavg()[0]:.2f} at "
            f"start; {args.arch}, vocabulary {args.vocab_size:,}: {parameters / 1e6:.1f} M parameters, "
            f"{len(state)} tensors, {size / 2**20:,.0f} MiB; file in {work_dir}"
        )
        path = os.path.join(work_dir, "checkpoint.pt")
        one_repeat(state, path)  # warm-up
        runs = [one_repeat(state, path) for _ in range(args.repeats)]
    columns = {name: [run[name] for run in runs] for name in ("save", "checksum", "load", "verify")}
    print(f"{args.repeats} repeats, median (min-max) seconds:")
    for name, values in columns.items():
        print(f"  {name:<9} {spread(values).format('.2f', ' s')}")
    print(f"  checksum / save  {interleaved_ratio(columns['checksum'], columns['save']).format('.2f', 'x')}")
    print(f"  verify / load    {interleaved_ratio(columns['verify'], columns['load']).format('.2f', 'x')}")
    rows.add(
        *[{"step": name, "seconds": results.repeats_cell(values)} for name, values in columns.items()],
        {
            "step": "checksum / save",
            "ratio": results.spread_cell(interleaved_ratio(columns["checksum"], columns["save"])),
        },
        {"step": "verify / load", "ratio": results.spread_cell(interleaved_ratio(columns["verify"], columns["load"]))},
        parameters=parameters,
        checkpoint_mib=size / 2**20,
    )


if __name__ == "__main__":
    main()
