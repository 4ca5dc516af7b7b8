"""Peak memory of one training step with and without ``--checkpoint-activations``.

For every architecture given (default: one per system at base dimensions), one
training step (forward and backward of the system's training criterion, no
optimizer update) on one synthetic cluster of about ``--source-tokens``
source tokens, built with fairseq-train's own argument parsing, task, model
and criterion; dropout is on as in training. The step's peak memory above
what the model and the batch already hold is measured as in every mdsfair
benchmark (:mod:`benchmarks.measure`: ``torch.cuda.max_memory_allocated`` on
CUDA; on CPU the growth of the peak resident size of a fresh forked process
per run). Prints, per architecture, the median (min-max) of ``--repeats``
runs of each variant and the ratio checkpointed / plain: the plain model is
the stock baseline, measured in the same run.

    python benchmarks/activation_checkpointing.py                       # CPU, 1 thread, 3 repeats
    python benchmarks/activation_checkpointing.py --archs hiertransformer --source-tokens 4096
"""

import os
import statistics
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import harness, results
from benchmarks.harness import LABEL_SMOOTHED
from benchmarks.measure import allocate_gradients, in_fresh_process, spread, timed_steps

#: One architecture per system at base dimensions, with its training task and criterion.
SYSTEMS = {
    "hiertransformer": LABEL_SMOOTHED,
    "hierencdec_bart_base": LABEL_SMOOTHED,
    "pagesum_bart_base": LABEL_SMOOTHED,
    "sparse_bart_base": [
        "--task",
        "multidoc_summarization_sparse",
        "--criterion",
        "sparse_kl",
        "--sparse-training-stage",
        "joint",
    ],
    "dape_transformer": LABEL_SMOOTHED,
    "led_base": LABEL_SMOOTHED,
}


def training_argv(config: dict, max_source_positions: int) -> list:
    """``fairseq-train``'s arguments for ``config["arch"]`` on the data-bin
    ``config["data"]``, mdsfair as ``--user-dir``: the system's task and
    criterion (:data:`SYSTEMS`; another arch takes the Hierarchical
    Transformer's) and ``--max-source-positions``."""
    return [
        config["data"],
        "--user-dir",
        os.path.join(REPO_ROOT, "mdsfair"),
        "--arch",
        config["arch"],
        *SYSTEMS.get(config["arch"], SYSTEMS["hiertransformer"]),
        "--max-source-positions",
        str(max_source_positions),
    ]


def measure(config: dict) -> dict:
    import torch
    from fairseq import options, tasks, utils

    import mdsfair

    mdsfair.register()  # fairseq's --user-dir skips a package that is already imported
    torch.set_num_threads(config["threads"])
    argv = [*training_argv(config, config["source_tokens"]), *config["flags"]]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    utils.set_torch_seed(1)
    task = tasks.setup_task(args)
    task.load_dataset("train")
    dtype = harness.DTYPES[config.get("dtype", "fp32")]
    model = task.build_model(args).to(config["device"]).to(dtype).train()
    criterion = task.build_criterion(args)
    dataset = task.dataset("train")
    sample = dataset.collater([dataset[int(dataset.src_sizes.argmax())]])
    sample = task._sample_for(model, sample) if hasattr(task, "_sample_for") else sample
    sample = utils.move_to_cuda(sample) if config["device"] == "cuda" else sample
    sample = utils.apply_to_sample(lambda t: t.to(dtype) if t.is_floating_point() else t, sample)
    allocate_gradients(model)

    def step():
        loss, _, _ = criterion(model, sample)
        loss.backward()
        model.zero_grad(set_to_none=False)

    measured = timed_steps(step, config["device"], 0)
    return {"peak_mib": measured["peak_mib"], "source_tokens": int(sample["net_input"]["src_tokens"].numel())}


def main(argv=None):
    parser = harness.argument_parser(__doc__)
    parser.add_argument("--archs", nargs="+", default=list(SYSTEMS), help="architectures to measure")
    parser.add_argument("--source-tokens", type=int, default=2048, help="source tokens of the cluster (truncated to)")
    harness.add_repeats(parser, "runs of each variant, each in a fresh process")
    harness.add_device(parser)
    harness.add_threads(parser)
    parser.add_argument("--data", help="a data-bin with dep_head/dep_rel side data (default: synthesized)")
    results.add_argument(parser)
    args = harness.parse(parser, argv)
    work = None
    if args.data is None:
        work = tempfile.TemporaryDirectory(prefix="mdsfair-ckpt-bench-")
        # clusters of about 2,000-2,400 source tokens (12 documents)
        args.data = harness.synthetic_data_bin(work.name, 2048, train=4, document_separator=False)
    rows = harness.begin(
        args,
        "activation_checkpointing",
        argv,
        args.repeats,
        "one training step, batch 1, fp32",
        dtype="fp32",
        batch_size=1,
        threads=args.threads,
    )
    print(f"{'architecture':<22} {'tokens':>6} {'plain MiB':>22} {'checkpointed MiB':>22} {'ratio':>6}")
    for arch in args.archs:
        peaks = {(): [], ("--checkpoint-activations",): []}
        tokens = None
        for _ in range(args.repeats):
            for flags in peaks:
                config = {
                    "device": args.device,
                    "threads": args.threads,
                    "arch": arch,
                    "flags": list(flags),
                    "data": args.data,
                    "source_tokens": args.source_tokens,
                }
                result = in_fresh_process(measure, config)
                peaks[flags].append(result["peak_mib"])
                tokens = result["source_tokens"]
        plain, checkpointed = peaks[()], peaks[("--checkpoint-activations",)]

        ratio = statistics.median(checkpointed) / statistics.median(plain)
        print(
            f"{arch:<22} {tokens:>6} {spread(plain).format('.0f'):>22} {spread(checkpointed).format('.0f'):>22} "
            f"{ratio:>6.2f}",
            flush=True,
        )
        rows.add(
            {
                "arch": arch,
                "source_tokens": tokens,
                "plain_mib": results.repeats_cell(plain),
                "checkpointed_mib": results.repeats_cell(checkpointed),
                "checkpointed_vs_plain": ratio,
            }
        )
    if work is not None:
        work.cleanup()


if __name__ == "__main__":
    main()
