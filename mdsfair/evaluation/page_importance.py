"""``mdsfair-page-importance``: PageSum's page importance per decoding step (Fig. 3).

The normalized confidences ``c_ij`` of Eq. 8 say how much page ``j`` contributes
to the prediction of summary token ``i``. As in the paper's Fig. 3 they are
read while the decoder reads a summary with teacher forcing: the reference
(default), a given token sequence (``--summaries``), or the model's own summary
(``--from-generation``: fairseq's beam search runs first, then the weights of
its best hypothesis are read). Since incremental decoding equals full decoding,
the weights over a generated summary are the ones the generator used at each
of its decoding steps.

Writes ``page_importance.jsonl`` (one line per example: id, summary tokens,
``weights[step][page]``, which pages hold tokens) and one heatmap PNG per
example (pages x decoding steps, darker = more important)::

    mdsfair-page-importance --checkpoint ckpt/checkpoint_best.pt \\
        --data data-bin --split test --examples 0,1 --output-dir importance/ \\
        --from-generation --beam 4 --lenpen 2.0 --no-repeat-ngram-size 3
"""

import argparse
import json
import logging
import os
from typing import TYPE_CHECKING, List, Optional

from mdsfair.argument_types import at_least, number_between, os_errors_in_one_line, output_folder_problem
from mdsfair.data.manifest import atomic_text_file

if TYPE_CHECKING:  # torch is imported when a command runs, not for --help
    import torch


def parse_examples(text: str) -> List[int]:
    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--examples must be comma-separated example indices, got {text!r}")
    if not indices:
        raise ValueError("--examples is empty")
    return indices


def page_importance(model, sample) -> "torch.Tensor":
    """Teacher-forced confidence weights ``[B, T, P]`` of a PageSum model on
    ``sample`` (a collated batch with ``prev_output_tokens``)."""
    if getattr(model.decoder, "page_confidence", None) is None:
        raise ValueError("the checkpoint is not a page-wise PageSum model (trained with --global-decoding?)")
    import torch

    with torch.no_grad():
        _, extra = model(**sample["net_input"], features_only=True)
    return extra["page_weights"][0].float()


def generated_summaries(task, model, sample, args) -> List["torch.Tensor"]:
    """The best beam-search hypothesis (token ids ending in ``</s>``) of every
    example of ``sample``, generated with the options of ``args``."""
    generator = task.build_generator([model], args)
    hypotheses = task.inference_step(generator, [model], sample)
    return [hypos[0]["tokens"].cpu() for hypos in hypotheses]


def plot_heatmap(weights, title: str, path: str):
    """Pages (rows) x decoding steps (columns), as Fig. 3."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, pages = weights.shape
    figure, axis = plt.subplots(figsize=(min(2 + steps * 0.12, 24), 1 + pages * 0.35))
    image = axis.imshow(weights.T, aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    axis.set_xlabel("decoding step")
    axis.set_ylabel("page")
    axis.set_yticks(range(pages))
    axis.set_title(title)
    figure.colorbar(image, ax=axis, fraction=0.03)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


@os_errors_in_one_line("mdsfair-page-importance")
def cli_main(argv: Optional[List[str]] = None):
    parser = argparse.ArgumentParser(prog="mdsfair-page-importance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="PageSum checkpoint (fairseq .pt)")
    parser.add_argument("--data", required=True, help="data-bin directory of the multidoc_summarization task")
    parser.add_argument("--split", default="valid", help="split to read (default valid)")
    parser.add_argument("--examples", default="0", help="comma-separated example indices of the split (default 0)")
    parser.add_argument(
        "--summaries",
        help="optional text file, one summary per line in --examples order, encoded with the data's "
        "subword model by the caller and given as space-separated dictionary symbols; default: the references",
    )
    parser.add_argument(
        "--from-generation",
        action="store_true",
        help="read the weights over the model's own summary: run beam search first (--beam, --lenpen, "
        "--max-len-a, --max-len-b, --min-len, --no-repeat-ngram-size), then teacher-force its best "
        "hypothesis; the weights are those of every decoding step of the generation",
    )
    generation = parser.add_argument_group("generation (with --from-generation)")
    generation.add_argument(
        "--beam",
        type=at_least(1),
        default=4,
        help="beam size (default 4, the authors' generation: bart-large-cnn's num_beams)",
    )
    generation.add_argument(
        "--lenpen", type=float, default=2.0, help="length penalty (default 2.0, the authors' generate call)"
    )
    generation.add_argument(
        "--max-len-a",
        type=number_between(0, float("inf")),
        default=0,
        help="max length = a * source length + b (default 0)",
    )
    generation.add_argument(
        "--max-len-b", type=at_least(1), default=200, help="max length = a * source length + b (default 200)"
    )
    generation.add_argument(
        "--min-len", type=at_least(1), default=1, help="minimum summary length in tokens (default 1)"
    )
    generation.add_argument(
        "--no-repeat-ngram-size",
        type=at_least(0),
        default=3,
        help="block repeated n-grams of this size (default 3, the paper's)",
    )
    parser.add_argument("--output-dir", required=True, help="where page_importance.jsonl and the PNGs go")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even when CUDA is available")
    args = parser.parse_args(argv)
    if args.from_generation and args.summaries:
        parser.error("--from-generation and --summaries are exclusive: the summary is either generated or given")
    problem = output_folder_problem("--output-dir", args.output_dir)
    if problem is not None:  # before the model loads: the files are written at the end
        parser.error(problem)

    import torch
    from fairseq import checkpoint_utils, utils

    import mdsfair

    mdsfair.register()  # the task and model, the checkpoint checks
    # importing fairseq sets the root logger to DEBUG (its wav2vec module), which would print
    # matplotlib's font search (a hundred and more "findfont" lines) while the heatmaps are drawn
    logging.getLogger("matplotlib").setLevel(logging.WARNING)

    indices = parse_examples(args.examples)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [args.checkpoint], arg_overrides={"data": args.data}
    )
    model = models[0].eval()
    use_cuda = torch.cuda.is_available() and not args.cpu
    if use_cuda:
        model = model.cuda()
    task.load_dataset(args.split)
    dataset = task.datasets[args.split]
    for index in indices:
        if not 0 <= index < len(dataset):
            raise ValueError(f"example {index} is not in split {args.split!r} ({len(dataset)} examples)")
    items = [dataset[index] for index in indices]
    if args.summaries:
        with open(args.summaries, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
        if len(lines) != len(items):
            raise ValueError(f"{args.summaries} has {len(lines)} lines for {len(items)} examples")
        from mdsfair.preprocess.subword import text_symbol_indices

        dictionary = task.target_dictionary
        for item, line in zip(items, lines):
            # the pipeline's lookup: a control symbol written in the file (</s>, <pad>) is <unk>, never a control id
            ids = text_symbol_indices(dictionary, line.split()).tolist() + [dictionary.eos()]
            item["target"] = torch.LongTensor(ids)
    if args.from_generation:
        source_sample = dataset.collater(items)
        if use_cuda:
            source_sample = utils.move_to_cuda(source_sample)
        for item, summary in zip(items, generated_summaries(task, model, source_sample, args)):
            item["target"] = summary
    sample = dataset.collater(items)
    sample = task._sample_for(model, sample)
    if use_cuda:
        sample = utils.move_to_cuda(sample)
    weights = page_importance(model, sample).cpu()

    os.makedirs(args.output_dir, exist_ok=True)
    dictionary = task.target_dictionary
    with atomic_text_file(os.path.join(args.output_dir, "page_importance.jsonl")) as out:
        for row, (index, item) in enumerate(zip(indices, items)):
            target = item["target"]
            steps = len(target)
            example_weights = weights[row, :steps]
            used_pages = example_weights.sum(0) > 0
            record = {
                "split": args.split,
                "example": index,
                "summary": "generated" if args.from_generation else "given" if args.summaries else "reference",
                "summary_tokens": [dictionary[t] for t in target.tolist()],
                "page_has_tokens": used_pages.tolist(),
                "weights": [[round(float(w), 6) for w in step] for step in example_weights.tolist()],
            }
            out.write(json.dumps(record) + "\n")
            plot_heatmap(
                example_weights[:, used_pages].numpy(),
                f"{args.split} example {index}: page importance per decoding step",
                os.path.join(args.output_dir, f"page_importance_{args.split}_{index}.png"),
            )
    print(f"wrote {len(indices)} examples to {args.output_dir}")


if __name__ == "__main__":
    cli_main()
