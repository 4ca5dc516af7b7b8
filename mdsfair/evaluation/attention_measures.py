"""The measures of HierEncDec's attention analysis (Shen et al., 2023, Sec. 5.6,
Fig. 3, Appendix C), read from ``hierencdec_bart`` and stock ``bart`` models
during one forward pass; the command is ``mdsfair-analyze-attention``
(:mod:`mdsfair.evaluation.attention_analysis`).

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
would not change the ratio between models either; the share that uniform
attention would put on the own document (:func:`uniform_self_document_share`)
is the chance level.

Decoder (Sec. 5.6 "Decoder Analysis", Fig. 3b, Appendix C): the cross-document
standard deviation (CDS). For each summary token the cross-attention weights
are averaged over heads and layers, summed per document (Eq. 6), normalized
across the example's documents with a softmax (Eq. 7), and their standard
deviation across those documents is the token's CDS (Eq. 8, population
standard deviation); an example's CDS is the mean over its summary tokens.
As in the paper the summary tokens are the model's own beam-search output
(:func:`analyze_model` with a generator); the decoder reads them with teacher
forcing, which gives the weights of incremental decoding.

Every reduction is a scatter over ``src_doc_ids`` (no loop over documents);
the encoder weights of a layer are reduced as soon as they are computed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # torch is imported where a measure runs, so that --help stays light
    from torch import Tensor

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
        from mdsfair.modules.document_blocks import DocumentLayout

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

    from mdsfair.tasks.model_inputs import net_input_for

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
