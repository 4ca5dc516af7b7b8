"""``mdsfair-analyze-attention``: HierEncDec's attention analysis (Shen et al.,
2023, Sec. 5.6, Fig. 3, Appendix C) for ``hierencdec_bart`` and stock ``bart``
checkpoints: the normalized self-document attention of every encoder layer
(Fig. 3a) and the decoder's cross-document standard deviation (CDS, Fig. 3b),
as defined and measured in :mod:`mdsfair.evaluation.attention_measures`.

With several checkpoints (the paper: BART, then BART + HierEncDec), the first
is the baseline and every value is also given relative to it (Fig. 3 plots
relative values); the table gives the share that uniform attention would put
on the own document (``uniform``) as the chance level::

    mdsfair-analyze-attention --checkpoint bart/checkpoint_best.pt hierencdec/checkpoint_best.pt \\
        --labels BART HierEncDec --data data-bin --split test --output-dir analysis/

writes ``attention_analysis.tsv`` (the table, also printed),
``attention_analysis.json`` (per-example values) and ``attention_analysis.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from mdsfair.argument_types import at_least, os_errors_in_one_line, output_folder_problem
from mdsfair.data.manifest import atomic_text_file
from mdsfair.evaluation.attention_measures import CDS_NORMALIZATIONS, DECODER_INPUTS, ModelAnalysis, analyze_model

logger = logging.getLogger(__name__)


# -------------------------------------------------------------- reporting


TABLE_COLUMNS = ("model", "measure", "layer", "value", "std_over_examples", "relative_to_baseline", "uniform")


def table_rows(analyses: Sequence[ModelAnalysis]) -> List[Dict[str, object]]:
    """One row per model and encoder layer (and their mean: Fig. 3a's value)
    for the self-document attention, one per model for the CDS (Fig. 3b);
    ``relative_to_baseline`` divides by the first model's value."""
    baseline = analyses[0]
    rows = []

    def row(analysis, measure, layer, values, baseline_values, uniform=None):
        value = float(np.mean(values))
        reference = float(np.mean(baseline_values))
        rows.append(
            {
                "model": analysis.label,
                "measure": measure,
                "layer": layer,
                "value": value,
                "std_over_examples": float(np.std(values)),
                "relative_to_baseline": value / reference if reference > 0 else math.nan,
                "uniform": float(np.mean(uniform)) if uniform is not None else math.nan,
            }
        )

    for analysis in analyses:
        per_layer = np.asarray(analysis.self_document)
        baseline_per_layer = np.asarray(baseline.self_document)
        same_depth = baseline_per_layer.shape[1] == per_layer.shape[1]
        for layer in range(per_layer.shape[1]):
            reference = baseline_per_layer[:, layer] if same_depth else np.full(1, math.nan)
            row(
                analysis,
                "self_document_attention",
                str(layer + 1),
                per_layer[:, layer],
                reference,
                analysis.uniform_share,
            )
        row(
            analysis,
            "self_document_attention",
            "mean",
            per_layer.mean(1),
            baseline_per_layer.mean(1),
            analysis.uniform_share,
        )
        row(analysis, "cds", "decoder", analysis.cds, baseline.cds)
    return rows


def format_table(rows: Sequence[Dict[str, object]]) -> str:
    def cell(value):
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    cells = [list(TABLE_COLUMNS)] + [[cell(row[column]) for column in TABLE_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(TABLE_COLUMNS))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in cells)


def plot(analyses: Sequence[ModelAnalysis], path: str, title: str) -> None:
    """Fig. 3 for these checkpoints: (a) self-document attention per encoder
    layer with the uniform share, (b) CDS per model relative to the first."""
    # fairseq's wav2vec module sets the root logger to DEBUG on import
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (encoder_axis, decoder_axis) = plt.subplots(1, 2, figsize=(10, 4))
    for analysis in analyses:
        layers = np.arange(1, analysis.num_layers + 1)
        encoder_axis.plot(layers, analysis.layer_means(), marker="o", label=analysis.label)
    encoder_axis.axhline(float(np.mean(analyses[0].uniform_share)), color="gray", linestyle="--", label="uniform")
    encoder_axis.set_xticks(np.arange(1, max(a.num_layers for a in analyses) + 1))
    encoder_axis.set_xlabel("encoder layer")
    encoder_axis.set_ylabel("self-document attention")
    encoder_axis.set_ylim(0, 1.05)
    encoder_axis.set_title("(a) normalized self-document attention")
    encoder_axis.legend()

    baseline_cds = float(np.mean(analyses[0].cds))
    values = [float(np.mean(a.cds)) for a in analyses]
    bars = decoder_axis.bar([a.label for a in analyses], values, color="tab:blue")
    for bar, value in zip(bars, values):
        relative = f"{value / baseline_cds:.2f}x" if baseline_cds > 0 else "-"
        decoder_axis.annotate(
            f"{value:.4f}\n({relative})", (bar.get_x() + bar.get_width() / 2, value), ha="center", va="bottom"
        )
    decoder_axis.set_ylabel("cross-document std (CDS)")
    decoder_axis.set_ylim(0, max(values + [1e-9]) * 1.3)
    decoder_axis.set_title("(b) decoder CDS (Appendix C)")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# ---------------------------------------------------------------- the CLI


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdsfair-analyze-attention",
        description="HierEncDec's attention analysis (Sec. 5.6, Appendix C): normalized self-document attention "
        "per encoder layer and the decoder's cross-document standard deviation (CDS)",
    )
    parser.add_argument(
        "--checkpoint",
        nargs="+",
        required=True,
        help="hierencdec_bart or bart checkpoints (fairseq .pt); the first is the baseline of the relative values",
    )
    parser.add_argument(
        "--labels", nargs="+", help="one name per checkpoint for the table and plot (default: file paths)"
    )
    parser.add_argument("--data", required=True, help="data-bin directory of the multidoc_summarization task")
    parser.add_argument("--split", default="test", help="split to analyze (default test, as the paper)")
    parser.add_argument(
        "--num-examples",
        type=at_least(0),
        default=200,
        help="examples drawn at random from the split, the same for every checkpoint (default 200, as Sec. 5.6); "
        "0 or more than the split: all",
    )
    parser.add_argument("--seed", type=at_least(0), default=1, help="seed of the example draw (default 1)")
    parser.add_argument("--batch-size", type=at_least(1), default=4, help="examples per forward pass (default 4)")
    parser.add_argument(
        "--decoder-input",
        choices=DECODER_INPUTS,
        default="generated",
        help="summary the decoder reads for the CDS: the model's own beam-search output (default, the paper's "
        "inference-time analysis) or the reference",
    )
    parser.add_argument(
        "--beam", type=at_least(1), default=4, help="beam size for --decoder-input generated (default 4, the authors')"
    )
    parser.add_argument(
        "--min-len", type=at_least(1), default=20, help="minimum summary length (default 20, the authors')"
    )
    parser.add_argument(
        "--max-len-b",
        type=at_least(1),
        default=1024,
        help="maximum summary length (default 1,024, the paper's target budget)",
    )
    parser.add_argument("--lenpen", type=float, default=1.0, help="beam search length penalty (default 1.0)")
    parser.add_argument(
        "--no-repeat-ngram-size",
        type=at_least(0),
        default=3,
        help="block repeated n-grams of this size (default 3, bart-large's generation config; 0: off)",
    )
    parser.add_argument(
        "--cds-normalization",
        choices=CDS_NORMALIZATIONS,
        default="softmax",
        help="how the per-document cross-attention masses are normalized before the std: 'softmax' (Eq. 7, "
        "default) or 'none' (the masses themselves, which already sum to one)",
    )
    parser.add_argument(
        "--overrides",
        default="{}",
        help="JSON dict of configuration overrides applied to every checkpoint when loading, e.g. "
        '\'{"max_source_positions": 4096, "per_document_budget": true}\' so that all models read the same input',
    )
    parser.add_argument("--output-dir", required=True, help="where attention_analysis.{tsv,json,png} go")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even when CUDA is available")
    return parser


def select_examples(num_available: int, num_examples: int, seed: int) -> np.ndarray:
    """Sorted indices of ``num_examples`` examples drawn without replacement
    (all of them when ``num_examples`` is 0 or at least ``num_available``)."""
    if num_examples < 0:
        raise ValueError(f"--num-examples must be >= 0, got {num_examples}")
    if num_examples == 0 or num_examples >= num_available:
        return np.arange(num_available)
    return np.sort(np.random.RandomState(seed).choice(num_available, num_examples, replace=False))


@os_errors_in_one_line("mdsfair-analyze-attention")
def cli_main(argv: Optional[List[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    labels = args.labels or args.checkpoint
    if len(labels) != len(args.checkpoint):
        parser.error(f"--labels names {len(labels)} models for {len(args.checkpoint)} checkpoints")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be positive, got {args.batch_size}")
    try:
        overrides = json.loads(args.overrides)
    except json.JSONDecodeError as error:
        parser.error(f"--overrides is not JSON: {error}")
    if not isinstance(overrides, dict):
        parser.error("--overrides must be a JSON object")
    problem = output_folder_problem("--output-dir", args.output_dir)
    if problem is not None:  # before any model loads: the files are written at the end
        parser.error(problem)
    for path in args.checkpoint:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"checkpoint not found: {path}")

    import torch
    from fairseq import checkpoint_utils, utils

    import mdsfair

    mdsfair.register()  # the task and the models, the checkpoint checks
    from fairseq.dataclass.configs import GenerationConfig
    from fairseq.models.bart import BARTModel

    from mdsfair.hub_interface import fairseq_model_name

    use_cuda = torch.cuda.is_available() and not args.cpu
    generation = GenerationConfig(
        beam=args.beam,
        min_len=args.min_len,
        max_len_a=0,
        max_len_b=args.max_len_b,
        lenpen=args.lenpen,
        no_repeat_ngram_size=args.no_repeat_ngram_size,
    )
    analyses, indices = [], None
    for path, label in zip(args.checkpoint, labels):
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [path], arg_overrides={"data": args.data, **overrides}
        )
        model = models[0]
        if not isinstance(model, BARTModel):
            raise ValueError(
                f"{path} holds a {fairseq_model_name(model)!r} model; the analysis reads BART encoders "
                "and decoders (hierencdec_bart or bart)"
            )
        if use_cuda:
            model = model.cuda()
        task.load_dataset(args.split)
        dataset = task.datasets[args.split]
        if indices is None:
            indices = select_examples(len(dataset), args.num_examples, args.seed)
        elif indices.max() >= len(dataset):
            raise ValueError(
                f"{path}: split {args.split!r} has {len(dataset)} examples, fewer than the first checkpoint's"
            )
        generator = task.build_generator([model], generation) if args.decoder_input == "generated" else None
        logger.info("%s: %d examples of %s/%s", label, len(indices), args.data, args.split)
        analyses.append(
            analyze_model(
                model,
                task,
                dataset,
                indices,
                args.batch_size,
                generator,
                args.cds_normalization,
                label,
                fairseq_model_name(model) or type(model).__name__,
                to_device=utils.move_to_cuda if use_cuda else (lambda sample: sample),
            )
        )
        del model, models

    rows = table_rows(analyses)
    os.makedirs(args.output_dir, exist_ok=True)
    with atomic_text_file(os.path.join(args.output_dir, "attention_analysis.tsv")) as out:
        out.write("\t".join(TABLE_COLUMNS) + "\n")
        for row in rows:
            out.write("\t".join(str(row[column]) for column in TABLE_COLUMNS) + "\n")
    with atomic_text_file(os.path.join(args.output_dir, "attention_analysis.json")) as out:
        json.dump(
            {
                "data": args.data,
                "split": args.split,
                "decoder_input": args.decoder_input,
                "cds_normalization": args.cds_normalization,
                "table": rows,
                "models": [{**vars(analysis), "checkpoint": path} for analysis, path in zip(analyses, args.checkpoint)],
            },
            out,
            indent=1,
        )
    plot(
        analyses,
        os.path.join(args.output_dir, "attention_analysis.png"),
        f"{os.path.basename(os.path.normpath(args.data))} / {args.split}: {len(indices)} examples",
    )
    print(format_table(rows))
    print(f"wrote attention_analysis.tsv, .json and .png to {args.output_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main())
