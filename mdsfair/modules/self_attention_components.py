"""Encoder self-attention components (``--encoder-self-attention``).

* ``full``: BART's (fairseq ``MultiheadAttention``);
* ``document``: HierEncDec's hierarchical encoder (Shen et al. 2023,
  Sec. 4.1): tokens attend within their document, start-of-document tokens
  also to every other one (:mod:`mdsfair.modules.document_blocked_attention`,
  blocked, dense or, on a GPU in 16-bit, varlen flash);
* ``longformer``: LED/PRIMERA's sliding window plus global tokens (Beltagy et
  al. 2020, Sec. 3; :mod:`mdsfair.modules.longformer_attention`);
* ``dependency``: DAPE's linguistic-guided encoding (Ma et al. 2022, Eq. 5-11):
  a relation mask from the dependency arcs added to the attention of the
  ``--dependency-layers`` (:mod:`mdsfair.modules.dependency_attention`).

``full`` and ``document`` also run on T5's backbone (projections without
biases, unscaled scores; :class:`~mdsfair.modules.components.BackboneConfig`)
and add the position component's bias per head to their scores (T5's
relative position bias, ``--encoder-positions t5-relative-bias``):
:mod:`mdsfair.modules.biased_self_attention`, over the document mask for
``document``.

Every one keeps fairseq's parameter names under ``self_attn``
(``q_proj``/``k_proj``/``v_proj``/``out_proj``; Longformer adds its
``*_global_proj``), so BART checkpoints restore into any of them.
"""

from dataclasses import dataclass
from typing import List, Optional

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from mdsfair.argument_types import UsageError, at_least
from mdsfair.modules.biased_self_attention import biased_self_attention, runs_as_fairseq
from mdsfair.modules.components import Component, ComponentConfig, component_flag, register_component
from mdsfair.modules.dependency_attention import (
    ARC_DIRECTIONS,
    DEPENDENCY_ENCODERS,
    MASK_TARGETS,
    DependencyGuidedMultiheadAttention,
    DependencyRelationEncoder,
)
from mdsfair.modules.document_blocked_attention import IMPLEMENTATIONS as DOCUMENT_IMPLEMENTATIONS
from mdsfair.modules.document_blocked_attention import DocumentBlockedSelfAttention, document_attention_mask
from mdsfair.modules.document_blocks import DocumentLayout
from mdsfair.modules.longformer_attention import IMPLEMENTATIONS as LONGFORMER_IMPLEMENTATIONS
from mdsfair.modules.longformer_attention import LongformerSelfAttention
from mdsfair.modules.source_structure import SourceStructure

GLOBAL_ATTENTION = ("first", "doc-sep", "documents", "none")
DOCUMENT_SEPARATOR = "<doc-sep>"


class SelfAttentionComponent(Component):
    """Call shape of the role: :meth:`build` the module of one layer,
    :meth:`prepare` the batch's context once, :meth:`attend` in every layer.
    A component that sets :attr:`takes_position_bias` also takes the
    keyword ``position_bias`` (``[B * H, T, T]``, added to the scores of
    every head) in :meth:`attend`."""

    #: its :meth:`attend` adds a position component's bias per head to the scores
    takes_position_bias: bool = False

    def build(self, layer, embed_dim: int, cfg):
        raise NotImplementedError

    def prepare(self, encoder, structure: SourceStructure):
        """The per-batch context every layer's :meth:`attend` receives."""
        return None

    def attend(self, attention, x: Tensor, padding_mask: Optional[Tensor], context, layer_index: int) -> Tensor:
        """``x [T, B, C]`` -> ``[T, B, C]`` in encoder layer ``layer_index``."""
        raise NotImplementedError


def fairseq_self_attention(cls, layer, embed_dim: int, cfg, **kwargs):
    """``cls`` (fairseq's ``MultiheadAttention`` or a subclass) built as
    fairseq's encoder layer builds its self-attention, with the biases of
    the layer's backbone (``--linear-biases``)."""
    return cls(
        embed_dim,
        cfg.encoder.attention_heads,
        dropout=cfg.attention_dropout,
        bias=layer.backbone.linear_bias,
        self_attention=True,
        q_noise=layer.quant_noise,
        qn_block_size=layer.quant_noise_block_size,
        xformers_att_config=cfg.encoder.xformers_att_config,
        **kwargs,
    )


@register_component("encoder_self_attention", "full")
class FullSelfAttention(SelfAttentionComponent):
    """BART's encoder self-attention over the whole source."""

    paper = "BART"
    summary = "attention over the whole source"
    takes_position_bias = True
    follows_backbone = True
    takes_head_width = True

    def build(self, layer, embed_dim, cfg):
        return fairseq_self_attention(MultiheadAttention, layer, embed_dim, cfg)

    def attend(self, attention, x, padding_mask, context, layer_index, position_bias=None):
        if position_bias is None and runs_as_fairseq(attention):
            x, _ = attention(query=x, key=x, value=x, key_padding_mask=padding_mask, need_weights=False)
        else:
            x, _ = biased_self_attention(attention, x, padding_mask, position_bias)
        return x


@dataclass
class DocumentAttentionConfig(ComponentConfig):
    """How HierEncDec's document attention (Sec. 4.1) is computed; every choice
    gives the numbers of the authors' dense mask."""

    document_attention: Optional[str] = component_flag(
        "blocked",
        "implementation of the document encoder attention: 'blocked' computes attention per "
        "document block (memory grows with the longest document, Sec. 7), 'dense' masks a full "
        "T x T matrix as the authors did (same numbers)",
        choices=DOCUMENT_IMPLEMENTATIONS,
    )


@register_component("encoder_self_attention", "document")
class DocumentSelfAttention(SelfAttentionComponent):
    """HierEncDec's hierarchical encoder attention (Sec. 4.1): within each
    document, plus the start-of-document (SOD) tokens among themselves."""

    config_class = DocumentAttentionConfig
    paper = "HierEncDec (Shen et al. 2023, Sec. 4.1)"
    summary = "attention within each document, the documents' `<s>` among themselves (blocked, dense or varlen flash)"
    side_input_notes = {"src_doc_ids": "optional: else one document per `<s>`"}
    implemented_in = ("mdsfair.modules.document_blocked_attention", "mdsfair.modules.document_blocks")
    uses_documents = True
    needs_document_start_tokens = True
    takes_position_bias = True
    follows_backbone = True

    def side_inputs(self):
        return {"src_doc_ids": False}  # else one document per <s>-opened run

    def build(self, layer, embed_dim, cfg):
        return fairseq_self_attention(
            DocumentBlockedSelfAttention, layer, embed_dim, cfg, implementation=self.config.document_attention
        )

    def prepare(self, encoder, structure):
        return DocumentLayout.from_document_ids(structure.document_ids, structure)

    def attend(self, attention, x, padding_mask, context, layer_index, position_bias=None):
        """The document rule (Sec. 4.1); with a ``position_bias`` (T5's
        relative bias) the bias of every head with the rule's disallowed
        pairs at ``-inf``, over the whole source (``[B * H, T, T]``, as
        the ``dense`` implementation's mask)."""
        if position_bias is None:
            x, _ = attention.forward_documents(x, context)
            return x
        allowed = document_attention_mask(context.document_ids)
        heads, length = attention.num_heads, allowed.size(-1)
        allowed = allowed.unsqueeze(1).expand(-1, heads, -1, -1).reshape(-1, length, length)
        x, _ = biased_self_attention(attention, x, None, position_bias.masked_fill(~allowed, float("-inf")))
        return x


def parse_attention_window(value, num_layers: int) -> List[int]:
    """``--attention-window``: one even window for all layers or one per layer."""
    text = str(value)
    try:
        windows = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"--attention-window {text!r}: expected an even integer or a comma list of them") from None
    if len(windows) == 1:
        windows = windows * num_layers
    if len(windows) != num_layers:
        raise ValueError(f"--attention-window {text!r} gives {len(windows)} windows for {num_layers} encoder layers")
    bad = [w for w in windows if w <= 0 or w % 2]
    if bad:
        raise ValueError(f"--attention-window {text!r}: every window must be a positive even number, got {bad}")
    return windows


def global_attention_mask(
    src_tokens: Tensor,
    padding_idx: int,
    mode: str,
    document_separator: Optional[int] = None,
    src_doc_ids: Optional[Tensor] = None,
) -> Tensor:
    """``[B, T]`` bool, True at the tokens with global attention; padding
    (left or right) is never global.

    * ``first``: the first real token of every source (its ``<s>``), as
      Hugging Face's LED summarization examples set ``global_attention_mask[:, 0] = 1``;
    * ``doc-sep``: the first token and every ``<doc-sep>`` (PRIMERA,
      allenai/PRIMER ``script/primer_hf_main.py``);
    * ``documents``: the first token of every document, from ``src_doc_ids``;
    * ``none``: no token (LoBART's local attention, Manakul & Gales 2021, ACL).
    """
    if mode == "none":
        return torch.zeros_like(src_tokens, dtype=torch.bool)
    real = src_tokens.ne(padding_idx)
    first = real & real.long().cumsum(dim=1).eq(1)
    if mode == "first":
        return first
    if mode == "doc-sep":
        if document_separator is None:
            raise ValueError("--global-attention doc-sep needs the <doc-sep> id (task --source-layout primera)")
        return first | (real & src_tokens.eq(document_separator))
    if mode == "documents":
        if src_doc_ids is None:
            raise ValueError(
                "--global-attention documents needs the batch's src_doc_ids (the multidoc_summarization task "
                "gives them)"
            )
        if src_doc_ids.shape != src_tokens.shape:
            raise ValueError(f"src_doc_ids {tuple(src_doc_ids.shape)} must match src_tokens {tuple(src_tokens.shape)}")
        ids = src_doc_ids.masked_fill(~real, -1)
        previous = torch.cat([ids.new_full((ids.size(0), 1), -1), ids[:, :-1]], dim=1)
        return first | (real & ids.ne(previous))
    raise ValueError(f"--global-attention must be one of {GLOBAL_ATTENTION}, got {mode!r}")


def document_separator_index(task) -> int:
    """The ``<doc-sep>`` id: the task's (``--source-layout primera``), else the
    dictionary's; an error when the dictionary has none."""
    separator = task.document_separator() if hasattr(task, "document_separator") else None
    if separator is not None:
        return separator
    dictionary = task.source_dictionary
    index = dictionary.index(DOCUMENT_SEPARATOR)
    if index == dictionary.unk():
        raise UsageError(
            f"--global-attention doc-sep: the dictionary has no {DOCUMENT_SEPARATOR} symbol; use a data-bin "
            f"whose dictionary has it with --source-layout primera, or --global-attention first/documents"
        )
    return index


@dataclass
class LongformerAttentionConfig(ComponentConfig):
    """LED's encoder attention (allenai/led-*-16384): window 1,024, the first
    token global; PRIMERA's architectures fill 512 and ``doc-sep``."""

    attention_window: Optional[str] = component_flag(
        "1024",  # a string, as --attention-window (type=str) stores it
        "Longformer window per encoder layer: one even number for all layers or a comma list with one "
        "per layer; window w lets each token see w/2 tokens on each side (Hugging Face's "
        "attention_window; 512 under the primera architecture, as the released checkpoints)",
        type=str,
    )
    global_attention: Optional[str] = component_flag(
        "first",
        "tokens with global attention: 'first' = the first source token (LED), 'doc-sep' = the "
        "first token and every <doc-sep> (PRIMERA; the primera architecture's), 'documents' = "
        "the first token of every document (from the data-bin's document ids), 'none' = no global "
        "token, the sliding window alone (LoBART; the attention has no global projections)",
        choices=GLOBAL_ATTENTION,
    )
    longformer_attention: Optional[str] = component_flag(
        "fused",
        "computation of the encoder attention (same numbers): 'fused' = every window through "
        "torch's scaled_dot_product_attention with a shared band mask (fused kernels), 'banded' = "
        "explicit banded score tensors (the portable reference, as Hugging Face computes them)",
        choices=LONGFORMER_IMPLEMENTATIONS,
    )


@register_component("encoder_self_attention", "longformer")
class LongformerSelfAttentionComponent(SelfAttentionComponent):
    """LED/PRIMERA's sliding-window + global attention (Beltagy et al. 2020)."""

    config_class = LongformerAttentionConfig
    paper = "LED / PRIMERA (Beltagy et al. 2020, Sec. 3; Xiao et al. 2022)"
    summary = "sliding window plus global tokens"
    side_input_notes = {"src_doc_ids": "required with `--global-attention documents`"}
    implemented_in = ("mdsfair.modules.longformer_attention",)

    def __init__(self, args):
        super().__init__(args)
        self.windows = parse_attention_window(self.config.attention_window, args.encoder_layers)
        self.global_attention: str = self.config.global_attention
        self.document_separator: Optional[int] = None

    def side_inputs(self):
        return {"src_doc_ids": True} if self.global_attention == "documents" else {}

    def on_build_model(self, model, task):
        """PRIMERA's check: a ``--global-attention doc-sep`` model meets
        PRIMERA's layout. fairseq-generate builds its task from its own
        command line, not the checkpoint's, so without this check a PRIMERA
        checkpoint on a data-bin that records no PRIMERA layout would decode
        without a single ``<doc-sep>`` (only the first token global) and
        without an error. A ``--source-layout`` given on the command line is
        taken as meant."""
        args = self.args
        if self.global_attention != "doc-sep":
            return
        layout = getattr(task, "source_layout", None)
        if layout is not None and layout != "primera" and not getattr(task, "source_layout_explicit", True):
            data_dir = getattr(task, "data_dir", "the data-bin")
            raise UsageError(
                f"--arch {getattr(args, 'arch', 'led')} uses --global-attention doc-sep (PRIMERA: global attention on "
                f"<s> and every <doc-sep>), but the task's source layout is {layout!r}: {data_dir} records no PRIMERA "
                f"layout, so the documents would be joined without <doc-sep>. Add --source-layout primera "
                f"--per-document-budget to this command, or preprocess the data-bin with mdsfair-preprocess "
                f"--source-layout primera (--dict of the imported model); --source-layout documents decodes "
                f"without <doc-sep> on purpose"
            )
        self.document_separator = document_separator_index(task)

    def build(self, layer, embed_dim, cfg):
        return LongformerSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            self.windows[layer.layer_index],
            dropout=cfg.attention_dropout,
            implementation=self.config.longformer_attention,
            global_projections=self.global_attention != "none",
        )

    def prepare(self, encoder, structure):
        global_mask = global_attention_mask(
            structure.src_tokens,
            encoder.padding_idx,
            self.global_attention,
            self.document_separator,
            structure.side_input("src_doc_ids"),
        )
        return global_mask

    def attend(self, attention, x, padding_mask, context, layer_index):
        return attention(x, padding_mask, context)


def parse_dependency_layers(spec: str, num_layers: int) -> List[int]:
    """``--dependency-layers``: ``all`` or comma-separated 0-based layer indices."""
    if spec.strip() == "all":
        return list(range(num_layers))
    try:
        layers = sorted({int(part) for part in spec.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"--dependency-layers {spec!r}: give 'all' or comma-separated layer indices")
    bad = [i for i in layers if not 0 <= i < num_layers]
    if bad or not layers:
        raise ValueError(f"--dependency-layers {spec!r}: indices must lie in 0..{num_layers - 1}")
    return layers


@dataclass
class DependencyAttentionConfig(ComponentConfig):
    """DAPE's linguistic-guided encoding (Ma et al. 2022): the MLP ``F_depEnc``
    (Eq. 7) on the attention weights (Eq. 9) of every encoder layer; where the
    paper is silent (hidden size, LeakyReLU slope: PyTorch's, arc direction)
    the choices of examples/dape/README.md."""

    dependency_encoder: Optional[str] = component_flag(
        "mlp",
        "relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); "
        "linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N "
        "by relation frequency [core dependents first | ROOT first]",
        choices=DEPENDENCY_ENCODERS,
    )
    dependency_encoder_hidden_dim: Optional[int] = component_flag(
        64, "hidden size of F_depEnc (not given in the paper)", type=at_least(1)
    )
    dependency_leaky_relu_slope: Optional[float] = component_flag(
        0.01, "negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper)", type=float
    )
    dependency_arc_direction: Optional[str] = component_flag(
        "both",
        "which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) or head-to-dependent",
        choices=ARC_DIRECTIONS,
    )
    dependency_no_arc_encoding: bool = component_flag(
        False,
        "give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0",
        action="store_true",
    )
    dependency_mask_on: Optional[str] = component_flag(
        "weights",
        "weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: "
        "out = A V + M V (Table VI 'added on values')",
        choices=MASK_TARGETS,
    )
    dependency_layers: Optional[str] = component_flag(
        "all",
        "encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, or 'all'",
        type=str,
    )


@register_component("encoder_self_attention", "dependency")
class DependencySelfAttention(SelfAttentionComponent):
    """DAPE's dependency-guided self-attention (Ma et al. 2022, Eq. 8-11): the
    relation mask ``M`` that ``F_depEnc`` (Eq. 6-7, ``encoder.dependency_encoder``)
    builds once per source from the dependency arcs is added to the attention
    weights (or values) of the ``--dependency-layers``; the other layers attend
    as fairseq's."""

    config_class = DependencyAttentionConfig
    paper = "DAPE (Ma et al. 2022, Eq. 5-11)"
    summary = "a relation mask from the dependency arcs added to the attention"
    side_input_notes = {
        name: "checked with what to do when missing" for name in ("src_dep_head", "src_dep_rel", "src_dep_word")
    }
    implemented_in = ("mdsfair.modules.dependency_attention",)

    def side_inputs(self):
        # checked in prepare, with what to do (the arcs come from preprocessing's side data)
        return {"src_dep_head": False, "src_dep_rel": False, "src_dep_word": False}

    def build_encoder_modules(self, encoder):
        config = self.config
        encoder.dependency_encoder = DependencyRelationEncoder(
            variant=config.dependency_encoder,
            hidden_dim=config.dependency_encoder_hidden_dim,
            negative_slope=config.dependency_leaky_relu_slope,
            direction=config.dependency_arc_direction,
            encode_no_arc=config.dependency_no_arc_encoding,
        )
        self.layers = parse_dependency_layers(config.dependency_layers, encoder.num_layers)

    def build(self, layer, embed_dim, cfg):
        return fairseq_self_attention(
            DependencyGuidedMultiheadAttention, layer, embed_dim, cfg, mask_on=self.config.dependency_mask_on
        )

    def prepare(self, encoder, structure):
        """The dependency relation mask ``[B, T, T]`` shared by the guided layers."""
        head, relation = structure.side_input("src_dep_head"), structure.side_input("src_dep_rel")
        if head is None or relation is None:
            raise ValueError(
                "the linguistic-guided encoding (--encoder-self-attention dependency) needs dependency arcs "
                "(src_dep_head, src_dep_rel): preprocess with `mdsfair-preprocess --side-data dep_head dep_rel`, "
                "or train with --no-dependency-encoding"
            )
        return encoder.dependency_encoder(head, relation, structure.side_input("src_dep_word"))

    def attend(self, attention, x, padding_mask, context, layer_index):
        mask = context if layer_index in self.layers else None
        x, _ = attention(
            query=x, key=x, value=x, key_padding_mask=padding_mask, need_weights=False, dependency_mask=mask
        )
        return x
