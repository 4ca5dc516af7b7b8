"""``mdsfair-analyze-attention``: HierEncDec's attention analysis (Shen et al.,
2023, Sec. 5.6, Fig. 3, Appendix C) for ``hierencdec_bart`` and stock ``bart``
checkpoints.

Encoder (Sec. 5.6 "Encoder Analysis", Fig. 3a): the *normalized
self-document attention*, the attention mass a source token puts on the
tokens of its own document. "Normalized" are the attention weights
themselves (the softmax output, as Appendix C calls the cross-attention
weights "normalized"): per layer, averaged over heads, summed over the keys
of the query's document, averaged over the real source tokens of an example,
then over examples. It is not re-normalized across documents with Eq. 7's
softmax: with about 100 documents (Rotten Tomatoes) that softmax bounds the
ratio between two models by ``e * N / (e + N - 1) < e``, yet the paper reports
19.5x. A per-example normalization by the data (document count or length)
would not change the ratio between models either; the table gives the share
that uniform attention would put on the own document (``uniform``) as the
chance level.

Decoder (Sec. 5.6 "Decoder Analysis", Fig. 3b, Appendix C): the cross-document
standard deviation (CDS). For each summary token the cross-attention weights
are averaged over heads and layers, summed per document (Eq. 6), normalized
across the example's documents with a softmax (Eq. 7), and their standard
deviation across those documents is the token's CDS (Eq. 8, population
standard deviation); an example's CDS is the mean over its summary tokens.
As in the paper the summary tokens are the model's own beam-search output
(``--decoder-input generated``); the decoder reads them with teacher forcing,
which gives the weights of incremental decoding.

Every reduction is a scatter over ``src_doc_ids`` (no loop over documents);
the encoder weights of a layer are reduced as soon as they are computed.

With several checkpoints (the paper: BART, then BART + HierEncDec), the first
is the baseline and every value is also given relative to it (Fig. 3 plots
relative values)::

    mdsfair-analyze-attention --checkpoint bart/checkpoint_best.pt hierencdec/checkpoint_best.pt \\
        --labels BART HierEncDec --data data-bin --split test --output-dir analysis/

writes ``attention_analysis.tsv`` (the table, also printed),
``attention_analysis.json`` (per-example values) and ``attention_analysis.png``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

import numpy as np

from mdsfair.argument_types import at_least, os_errors_in_one_line
from mdsfair.data.manifest import atomic_text_file

if TYPE_CHECKING:  # torch is imported where a measure runs, so that --help stays light
    from torch import Tensor

logger = logging.getLogger(__name__)

CDS_NORMALIZATIONS = ("softmax", "none")
DECODER_INPUTS = ("generated", "reference")


# ------------------------------------------------------------- measures


def _no_grad(function):
    """``torch.no_grad()`` around ``function``, importing torch at call time."""

    @functools.wraps(function)
    def without_gradients(*args, **kwargs):
        import torch

        with torch.no_grad():
            return function(*args, **kwargs)

    return without_gradients


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values [B, T]`` over the True entries of ``mask [B, T]``, per row."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def document_lengths(document_ids: Tensor) -> Tensor:
    """``[B, N]`` tokens per document of ``document_ids [B, S]`` (-1 at padding)."""
    num_documents = int(document_ids.max()) + 1
    lengths = document_ids.new_zeros(document_ids.size(0), num_documents + 1)
    lengths.scatter_add_(
        1, document_ids.masked_fill(document_ids.lt(0), num_documents), document_ids.new_ones(document_ids.shape)
    )
    return lengths[:, :num_documents]


def document_masses(weights: Tensor, document_ids: Tensor) -> Tensor:
    """Attention mass per document (Eq. 6): ``weights [B, ..., S]`` over the
    source tokens, ``document_ids [B, S]`` (-1 at padding) -> ``[B, ..., N]``."""
    if document_ids.shape != (weights.size(0), weights.size(-1)):
        raise ValueError(
            f"document ids {tuple(document_ids.shape)} do not match the attention keys "
            f"(batch {weights.size(0)}, source length {weights.size(-1)})"
        )
    num_documents = int(document_ids.max()) + 1
    segments = document_ids.masked_fill(document_ids.lt(0), num_documents)  # padding: an extra, dropped segment
    segments = segments.view((weights.size(0),) + (1,) * (weights.dim() - 2) + (-1,)).expand_as(weights)
    masses = weights.new_zeros(weights.shape[:-1] + (num_documents + 1,))
    return masses.scatter_add_(-1, segments, weights)[..., :num_documents]


def self_document_attention(weights: Tensor, document_ids: Tensor) -> Tensor:
    """Normalized self-document attention of one encoder layer (Sec. 5.6).

    Args:
        weights: ``[B, T, T]`` self-attention probabilities averaged over heads
            (the mass on a document is linear in the weights, so this is the
            mean over heads of each head's mass).
        document_ids: ``[B, T]`` document of every source token, -1 at padding.

    Returns:
        ``[B]``: per example, the mean over its source tokens of the attention
        mass on the token's own document.
    """
    masses = document_masses(weights.float(), document_ids)  # [B, T, N]
    own = masses.gather(-1, document_ids.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return masked_mean(own, document_ids.ge(0))


def uniform_self_document_share(document_ids: Tensor) -> Tensor:
    """``[B]``: the self-document attention of uniform attention over the
    source (own document length / source length, averaged over tokens)."""
    lengths = document_lengths(document_ids).float()
    own = lengths.gather(1, document_ids.clamp(min=0)) / lengths.sum(1, keepdim=True)
    return masked_mean(own, document_ids.ge(0))


def cross_document_std(
    weights: Tensor, document_ids: Tensor, target_mask: Tensor, normalization: str = "softmax"
) -> Tensor:
    """Cross-document standard deviation (Appendix C, Eq. 6-8).

    Args:
        weights: ``[B, T_tgt, S]`` cross-attention weights averaged over heads
            and layers.
        document_ids: ``[B, S]`` document of every source token, -1 at padding.
        target_mask: ``[B, T_tgt]`` True at the summary tokens to average.
        normalization: ``softmax`` across documents (Eq. 7) or ``none`` (the
            masses of Eq. 6, which already sum to one).

    Returns:
        ``[B]``: per example, the mean CDS over its summary tokens.
    """
    if normalization not in CDS_NORMALIZATIONS:
        raise ValueError(f"unknown CDS normalization {normalization!r}; choose one of {CDS_NORMALIZATIONS}")
    masses = document_masses(weights.float(), document_ids)  # Eq. 6, [B, T_tgt, N]
    exists = document_lengths(document_ids).gt(0).unsqueeze(1)  # [B, 1, N]
    if normalization == "softmax":
        masses = masses.masked_fill(~exists, float("-inf")).softmax(dim=-1)  # Eq. 7
    masses = masses.masked_fill(~exists, 0.0)
    count = exists.sum(-1)
    mean = masses.sum(-1, keepdim=True) / count.unsqueeze(-1)
    deviation = ((masses - mean) ** 2).masked_fill(~exists, 0.0).sum(-1) / count
    return masked_mean(deviation.sqrt(), target_mask)  # Eq. 8, mean over the summary


# --------------------------------------------- reading a model's attention


def encoder_self_attention_weights(
    layer, x: Tensor, encoder_padding_mask: Optional[Tensor], document_layout=None, attn_mask=None
) -> Tensor:
    """``[B, T, T]`` self-attention probabilities, averaged over heads, of a
    fairseq encoder layer on its input ``x [T, B, C]``: the hierarchical rule
    (Sec. 4.1) when the HierEncDec encoder passes a ``document_layout``, else
    BART's full attention (fairseq's fused path, which returns head-averaged
    weights only)."""
    if layer.normalize_before:
        x = layer.self_attn_layer_norm(x)
    if document_layout is not None:
        _, weights = layer.self_attn.forward_documents(x, document_layout, need_weights=True)
        return weights.mean(dim=1)
    _, weights = layer.self_attn(
        query=x, key=x, value=x, key_padding_mask=encoder_padding_mask, attn_mask=attn_mask, need_weights=True
    )
    return weights


class AttentionRecorder:
    """Hooks on a (HierEncDec or stock) BART model that reduce its attention
    to the analysis measures during one forward pass over sources with
    ``document_ids [B, S]``::

        with AttentionRecorder(model, document_ids) as recorder:
            model(**net_input)

    Then :attr:`self_document` holds every encoder layer's self-document
    attention ``[B]`` and :meth:`cross_attention` the decoder's
    cross-attention averaged over heads and layers ``[B, T_tgt, S]``.
    """

    def __init__(self, model, document_ids: Tensor):
        self.encoder_layers = list(model.encoder.layers)
        self.cross_attentions = [layer.encoder_attn for layer in model.decoder.layers if layer.encoder_attn is not None]
        if not self.cross_attentions:
            raise ValueError("the model's decoder has no encoder-decoder attention")
        self.document_ids = document_ids
        self.self_document: List[Tensor] = []
        self.cross_attention_sum: Optional[Tensor] = None
        self.cross_attention_layers = 0
        self._handles = []
        self._beam_sizes = []

    def __enter__(self):
        for layer in self.encoder_layers:
            self._handles.append(layer.register_forward_pre_hook(self._record_encoder_layer, with_kwargs=True))
        for attention in self.cross_attentions:
            self._handles.append(attention.register_forward_pre_hook(self._ask_head_weights, with_kwargs=True))
            self._handles.append(attention.register_forward_hook(self._record_cross_attention))
            # generation made BART's cross-attention "beamable" (one key per beam);
            # teacher forcing has one key set per query row
            self._beam_sizes.append(getattr(attention, "beam_size", 1))
            attention.beam_size = 1
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for attention, beam_size in zip(self.cross_attentions, self._beam_sizes):
            attention.beam_size = beam_size
        self._beam_sizes.clear()

    def _record_encoder_layer(self, layer, args, kwargs):
        x = args[0] if args else kwargs["x"]
        padding_mask = args[1] if len(args) > 1 else kwargs.get("encoder_padding_mask")
        # mdsfair's component layers take the self-attention's per-batch context third
        # (mdsfair/modules/transformer_layers.py): HierEncDec's document layout
        context = args[2] if len(args) > 2 else kwargs.get("attention_context", kwargs.get("document_layout"))
        from mdsfair.modules.document_blocked_attention import DocumentLayout

        layout = context if isinstance(context, DocumentLayout) else None
        weights = encoder_self_attention_weights(layer, x, padding_mask, layout, kwargs.get("attn_mask"))
        self.self_document.append(self_document_attention(weights, self.document_ids))

    @staticmethod
    def _ask_head_weights(attention, args, kwargs):
        return args, {**kwargs, "need_head_weights": True}

    def _record_cross_attention(self, attention, args, output):
        head_weights = output[1].float().mean(dim=0)  # [H, B, T_tgt, S] -> [B, T_tgt, S]
        if self.cross_attention_sum is None:
            self.cross_attention_sum = head_weights
        else:
            self.cross_attention_sum = self.cross_attention_sum + head_weights
        self.cross_attention_layers += 1

    def cross_attention(self) -> Tensor:
        if self.cross_attention_sum is None:
            raise RuntimeError("no cross-attention recorded: run the model inside the recorder's with-block")
        return self.cross_attention_sum / self.cross_attention_layers


# ----------------------------------------------------------- the analysis


@dataclass
class ModelAnalysis:
    """Per-example measures of one checkpoint (examples in ``example_ids`` order)."""

    label: str
    model_name: str
    example_ids: List[int] = field(default_factory=list)
    self_document: List[List[float]] = field(default_factory=list)  # [example][layer]
    uniform_share: List[float] = field(default_factory=list)
    cds: List[float] = field(default_factory=list)
    summary_tokens: List[int] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.self_document[0]) if self.self_document else 0

    def layer_means(self) -> np.ndarray:
        return np.asarray(self.self_document).mean(axis=0)


def summaries_as_decoder_input(summaries: Sequence[Tensor], pad: int, eos: int):
    """Teacher-forcing input for token sequences that end with ``eos``:
    ``(prev_output_tokens, target_mask)``, both ``[B, T_tgt]``."""
    from fairseq.data import data_utils

    prev_output_tokens = data_utils.collate_tokens(summaries, pad, eos, move_eos_to_beginning=True)
    target_mask = data_utils.collate_tokens(summaries, pad, eos).ne(pad)
    return prev_output_tokens, target_mask


@_no_grad
def analyze_model(
    model,
    task,
    dataset,
    indices: Sequence[int],
    batch_size: int,
    generator=None,
    cds_normalization: str = "softmax",
    label: str = "model",
    model_name: str = "",
    to_device=lambda sample: sample,
) -> ModelAnalysis:
    """The encoder and decoder measures of ``model`` on ``dataset[indices]``.

    With a ``generator`` the decoder reads the model's best beam-search
    hypothesis (the paper's inference-time analysis), else the reference.
    """
    import torch

    from mdsfair.tasks.multidoc_summarization import net_input_for

    model.eval()
    dictionary = task.target_dictionary
    result = ModelAnalysis(label=label, model_name=model_name)
    for start in range(0, len(indices), batch_size):
        sample = to_device(dataset.collater([dataset[int(i)] for i in indices[start : start + batch_size]]))
        net_input = sample["net_input"]
        if "src_doc_ids" not in net_input:
            raise ValueError("the batch has no src_doc_ids: the data-bin does not follow the mdsfair data contract")
        if generator is not None:
            hypotheses = task.inference_step(generator, [model], sample)
            summaries = [hypos[0]["tokens"] for hypos in hypotheses]
        else:
            if sample.get("target") is None:
                raise ValueError("the split has no reference summaries; use --decoder-input generated")
            summaries = [row[row.ne(dictionary.pad())] for row in sample["target"]]
        prev_output_tokens, target_mask = summaries_as_decoder_input(summaries, dictionary.pad(), dictionary.eos())
        prev_output_tokens = prev_output_tokens.to(net_input["src_tokens"].device)
        target_mask = target_mask.to(prev_output_tokens.device)
        document_ids = net_input["src_doc_ids"]
        inputs = net_input_for(model, {**net_input, "prev_output_tokens": prev_output_tokens})
        with AttentionRecorder(model, document_ids) as recorder:
            model(**inputs, features_only=True)
        self_document = torch.stack(recorder.self_document, dim=1)  # [B, layers]
        cds = cross_document_std(recorder.cross_attention(), document_ids, target_mask, cds_normalization)
        result.example_ids.extend(sample["id"].tolist())
        result.self_document.extend(self_document.cpu().tolist())
        result.uniform_share.extend(uniform_self_document_share(document_ids).cpu().tolist())
        result.cds.extend(cds.cpu().tolist())
        result.summary_tokens.extend(target_mask.sum(1).cpu().tolist())
    return result


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
    parser.add_argument("--seed", type=int, default=1, help="seed of the example draw (default 1)")
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
    args = get_parser().parse_args(argv)
    labels = args.labels or args.checkpoint
    if len(labels) != len(args.checkpoint):
        raise ValueError(f"--labels names {len(labels)} models for {len(args.checkpoint)} checkpoints")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be positive, got {args.batch_size}")
    try:
        overrides = json.loads(args.overrides)
    except json.JSONDecodeError as error:
        raise ValueError(f"--overrides is not JSON: {error}")
    if not isinstance(overrides, dict):
        raise ValueError("--overrides must be a JSON object")
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
