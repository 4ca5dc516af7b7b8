"""Cross-attention components (``--cross-attention``).

* ``full``: BART's encoder-decoder attention;
* ``document-scaled``: HierEncDec's hierarchical decoder (Shen et al. 2023,
  Sec. 4.2, Eq. 3-5): the softmax within each document scaled by a softmax
  over the start-of-document scores
  (:mod:`mdsfair.modules.hierarchical_cross_attention`); its source context
  holds the documents, reordered with the hypotheses in beam search;
* ``sparse``: Manakul & Gales 2021: every query attends to the tokens of its
  top-r sentences (Eq. 3, 6), ranked by the approximator (Eq. 7-10) or the
  model-free Eq. 19, trained with the KL loss of Eq. 4, 11
  (:mod:`mdsfair.modules.sparse_cross_attention`); the encoder output keeps
  one copy per source through beam search (:class:`SparseSourceContext`
  reorders the rows, not the sources).

``full``, ``document-scaled`` and ``sparse`` also run on T5's backbone
(projections without biases, unscaled scores;
:class:`~mdsfair.modules.components.BackboneConfig`): fairseq's attention
honours both in the decoder, whose cross-attention always takes its own
computation (``static_kv``), not PyTorch's; ``full``'s
(:class:`~mdsfair.modules.biased_self_attention.EncoderDecoderAttention`)
then takes its softmax in the model's dtype (float64 in a float64 model), as
Hugging Face's T5, and heads of ``--attention-head-dim``; so does
``sparse``'s word-level attention
(:meth:`~mdsfair.modules.sparse_cross_attention.SparseCrossAttention.softmax_dtype`),
whose heads are d_model / heads (its approximator's W^Q reads and writes
the model's width, App. A.1).

Call shape: :meth:`CrossAttentionComponent.build` the module of one decoder
layer; :meth:`~CrossAttentionComponent.source_context` what the decoder reads
of the source, once per batch (a
:class:`~mdsfair.modules.source_structure.SourceContext`, one entry of the
encoder output, which reorders itself for beam search);
:meth:`~CrossAttentionComponent.decoder_context` once per decoder pass, from
that context; :meth:`~CrossAttentionComponent.attend` in every decoder layer,
returning ``(x, attention, extra)``.
"""

import dataclasses
import logging
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional

import torch
from torch import Tensor, nn

from mdsfair.argument_types import at_least
from mdsfair.modules.activation_checkpointing import activation_checkpointing, checkpoint_layer
from mdsfair.modules.biased_self_attention import EncoderDecoderAttention
from mdsfair.modules.components import Component, ComponentConfig, component_flag, register_component
from mdsfair.modules.hierarchical_cross_attention import HierarchicalCrossAttention
from mdsfair.modules.hypothesis_rows import HypothesisRows
from mdsfair.modules.sentence_approximator import (
    SENTENCE_ENCODERS,
    PoolingSentenceEncoder,
    SentenceEncoder,
    approximator_parameter_names,
)
from mdsfair.modules.sentence_saliency import SentenceLayout, sentence_layout
from mdsfair.modules.sentence_selection import kept_token_bounds
from mdsfair.modules.source_structure import SOURCE_CONTEXT, SourceContext, SourceStructure
from mdsfair.modules.sparse_cross_attention import (
    APPROXIMATORS,
    GENERATION_PATHS,
    SENTENCE_SELECTIONS,
    SentenceContext,
    SparseCrossAttention,
)

logger = logging.getLogger(__name__)

#: Sentences per recomputed chunk of the BiGRU sentence encoder under --checkpoint-activations.
SENTENCE_ENCODER_CHECKPOINT_CHUNK = 32


class CrossAttentionComponent(Component):
    """Call shape of the role (see the module docstring)."""

    def build(self, layer, embed_dim: int, cfg):
        raise NotImplementedError

    def source_context(self, encoder, encoder_states: Tensor, structure: SourceStructure) -> Optional[SourceContext]:
        """What the decoder reads of the source beside the encoder states
        ``[T, B, C]``, made once per batch from ``structure``; None: nothing."""
        return None

    def reorder_encoder_out(self, encoder, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """fairseq's reordering (every entry expanded to the hypotheses), the
        source context with it (:meth:`SourceContext.index_select`)."""
        reordered = encoder.reorder_stock_encoder_out(encoder_out, new_order)
        reordered[SOURCE_CONTEXT] = [context.index_select(new_order) for context in encoder_out.get(SOURCE_CONTEXT, [])]
        return reordered

    def decoder_context(self, decoder, source: Optional[SourceContext], incremental_state):
        """The per-pass context every layer's :meth:`attend` receives, from
        the :meth:`source_context` of the encoder output (None when it has none)."""
        return None

    def attend(
        self,
        attention,
        x,
        encoder_states,
        padding_mask,
        context,
        incremental_state=None,
        need_attn: bool = False,
        alignment_heads: Optional[int] = None,
        need_weights: Optional[bool] = None,
    ):
        """``(x [T_tgt, B, C], attention, extra)``: with ``need_attn`` the
        cross-attention weights ``[B, T_tgt, S]`` averaged over the first
        ``alignment_heads`` heads (all when None), else None; ``extra`` what
        the component reports per layer, or None. By default fairseq's call
        of the module :meth:`build` made (:func:`stock_attend`)."""
        return stock_attend(
            attention, x, encoder_states, padding_mask, incremental_state, need_attn, alignment_heads, need_weights
        )

    def decoder_extra(self, extras: List) -> Dict[str, List]:
        """What the decoder output's extra dictionary gains from the layers' extras."""
        return {}

    def wrap_decoder_layer(self, layer, cfg):
        from mdsfair.modules.transformer_layers import wrap_layer

        return wrap_layer(layer, cfg, structured=True)


def fairseq_cross_attention(cls, layer, embed_dim: int, cfg, **kwargs):
    """``cls`` built as fairseq's decoder layer builds its encoder attention,
    with the biases of the layer's backbone (``--linear-biases``)."""
    return cls(
        embed_dim,
        cfg.decoder.attention_heads,
        kdim=cfg.encoder.embed_dim,
        vdim=cfg.encoder.embed_dim,
        dropout=cfg.attention_dropout,
        bias=layer.backbone.linear_bias,
        encoder_decoder_attention=True,
        q_noise=layer.quant_noise,
        qn_block_size=layer.quant_noise_block_size,
        xformers_att_config=cfg.encoder.xformers_att_config,
        **kwargs,
    )


def stock_attend(
    attention, x, encoder_states, padding_mask, incremental_state, need_attn, alignment_heads, need_weights=None
):
    """fairseq's decoder layer's cross-attention call; with ``need_attn`` the
    weights averaged over the first ``alignment_heads`` heads (all when
    None), as fairseq's decoder reduces its alignment layer's."""
    x, weights = attention(
        query=x,
        key=encoder_states,
        value=encoder_states,
        key_padding_mask=padding_mask,
        incremental_state=incremental_state,
        static_kv=True,
        need_weights=need_attn if need_weights is None else need_weights,
        need_head_weights=need_attn,
    )
    if not need_attn or weights is None:
        return x, None, None
    weights = weights.float().to(x)
    if alignment_heads is not None:
        weights = weights[:alignment_heads]
    return x, weights.mean(dim=0), None


@register_component("cross_attention", "full")
class FullCrossAttention(CrossAttentionComponent):
    """BART's encoder-decoder attention over every source token."""

    paper = "BART"
    summary = "attention over every source token"
    follows_backbone = True
    takes_head_width = True

    def build(self, layer, embed_dim, cfg):
        return fairseq_cross_attention(EncoderDecoderAttention, layer, embed_dim, cfg)


@register_component("cross_attention", "document-scaled")
class DocumentScaledCrossAttention(CrossAttentionComponent):
    """HierEncDec's hierarchical cross-attention (Sec. 4.2, Eq. 3-5)."""

    paper = "HierEncDec (Shen et al. 2023, Sec. 4.2, Eq. 3-5)"
    summary = "the softmax within each document scaled by one over the documents"
    side_input_notes = {"src_doc_ids": "optional: else one document per `<s>`"}
    implemented_in = ("mdsfair.modules.hierarchical_cross_attention",)
    uses_documents = True
    needs_document_start_tokens = True
    follows_backbone = True

    def side_inputs(self):
        return {"src_doc_ids": False}  # else one document per <s>-opened run

    def refusal(self, components):
        encoder_attention = components["encoder_self_attention"]
        if encoder_attention.name == "longformer" and encoder_attention.config.global_attention == "doc-sep":
            return (
                "Eq. 3-5 read each document's opening <s> (its start-of-document token), but PRIMERA's "
                "layout (--global-attention doc-sep) joins the documents with <doc-sep> and opens none with "
                "<s>; use --global-attention documents on the documents layout (as primera_hierencdec does)"
            )
        return None

    def build(self, layer, embed_dim, cfg):
        return fairseq_cross_attention(HierarchicalCrossAttention, layer, embed_dim, cfg)

    def source_context(self, encoder, encoder_states, structure):
        return SourceContext(document_ids=structure.document_ids)

    def decoder_context(self, decoder, source, incremental_state):
        return required_context(source, self).document_ids

    def attend(
        self,
        attention,
        x,
        encoder_states,
        padding_mask,
        context,
        incremental_state=None,
        need_attn=False,
        alignment_heads=None,
        need_weights=None,
    ):
        # the key documents reach fairseq's attention (apply_sparse_mask) for this call only
        attention.key_document_ids = context
        try:
            return stock_attend(
                attention, x, encoder_states, padding_mask, incremental_state, need_attn, alignment_heads, need_weights
            )
        finally:
            attention.key_document_ids = None


def build_sentence_encoder(config: "SparseCrossAttentionConfig", args) -> nn.Module:
    """The sentence encoder of the model-based approximator: the BiGRU of
    Eq. 10 (App. A.1) or the attention pooling proposed in Sec. 4.5."""
    kind = config.sentence_encoder
    if kind == "bigru":
        return SentenceEncoder(
            args.encoder_embed_dim,
            # unset (absent or None, as checkpoints store it): the model's width
            config.sentence_encoder_hidden_dim or args.encoder_embed_dim,
            num_layers=config.sentence_encoder_layers,
            dropout=args.dropout,
        )
    if kind == "attention-pooling":
        return PoolingSentenceEncoder(
            args.encoder_embed_dim, args.encoder_attention_heads, dropout=args.attention_dropout
        )
    raise ValueError(f"--sentence-encoder must be one of {SENTENCE_ENCODERS}, got {kind!r}")


def required_context(source: Optional[SourceContext], component) -> SourceContext:
    """``source``, the encoder output's context that ``component`` reads; its
    absence (an encoder output made without it) is refused, naming the component."""
    if source is None:
        raise ValueError(f"{component!r} needs the encoder output's {SOURCE_CONTEXT!r}, which it lacks")
    return source


@dataclass
class SparseSourceContext(SourceContext):
    """The sparse cross-attention's source (Manakul & Gales 2021), one copy
    per source through beam search: the sentences of every source
    (:attr:`sentence_ids`, their :attr:`layout`, the approximator's
    :attr:`sentence_states`, Eq. 10), the source each decoder row reads
    (:attr:`hypothesis_source_index`, None: row ``i`` reads source ``i``)
    and, in evaluation, the kept-token bounds of generation's layouts."""

    layout: Optional[SentenceLayout] = None
    #: a host tensor (:func:`~mdsfair.modules.sentence_selection.kept_token_bounds`); None in training
    kept_token_bounds: Optional[Tensor] = None
    #: ``[B']`` the source of every decoder row; None before any reordering
    hypothesis_source_index: Optional[Tensor] = None
    #: the rows' :class:`SentenceContext`, made once per reordering
    sentence_context: Optional[SentenceContext] = None

    def index_select(self, new_order: Tensor) -> "SparseSourceContext":
        """Reorder the decoder rows, not the sources: row ``i`` now reads the
        source that row ``new_order[i]`` read (``new_order`` may expand to the
        beam, permute hypotheses, or drop finished sources)."""
        rows = self.hypothesis_source_index
        source_index = rows.index_select(0, new_order) if rows is not None else new_order
        reordered = dataclasses.replace(self, hypothesis_source_index=source_index, sentence_context=None)
        # the rows and the sentence context, once per reordering (one synchronization, here); under
        # static decoding the rows never change after the expansion
        reordered.sentence_context = reordered.rows_context()
        return reordered

    def rows_context(self) -> SentenceContext:
        """The sparse cross-attention's view of the rows: the one
        :meth:`index_select` made for the reordered rows, else built here."""
        if self.sentence_context is not None:
            return self.sentence_context
        num_sources = self.sentence_ids.size(0)
        if self.hypothesis_source_index is not None:
            rows = HypothesisRows.from_source_index(self.hypothesis_source_index, num_sources)
        else:
            rows = HypothesisRows.identity(num_sources, self.sentence_ids.device)
        return SentenceContext(self.sentence_ids, self.layout, self.sentence_states, rows, self.kept_token_bounds)


class SparseDecoderContext(NamedTuple):
    """One decoder pass of the sparse cross-attention: the sentences, whether
    the exact saliencies are computed (teacher forcing), and the pass's draw
    for ``mix`` selection (one per forward pass, shared by every layer)."""

    sentences: SentenceContext
    compute_saliency: bool
    mix_draw: Optional[float]


@dataclass
class SparseCrossAttentionConfig(ComponentConfig):
    """Manakul & Gales 2021: r = 5 (their CNN/DailyMail setting, Table 3) and
    the 2-layer BiGRU of the model-based approximator with the model's width
    (App. A.1). Two flags have no fixed value: --sentence-encoder-hidden-dim
    (unset: the model's --encoder-embed-dim) and --mix-decay-updates (the
    updates of one epoch; mix requires it)."""

    top_r: Optional[int] = component_flag(
        5,
        "sentences kept by every cross-attention query (Eq. 6; the "
        "paper's r on CNN/DailyMail); 0 keeps all (full attention)",
        type=at_least(0),
        metavar="R",
    )
    sentence_selection: Optional[str] = component_flag(
        "approx",
        "saliency that ranks sentences: ideal (exact Eq. 4), approx (the approximator, "
        "Eq. 7, or the model-free Eq. 19), random, or mix (Sec. 4.3 scheduled sampling "
        "ideal->approx in training, one draw per forward pass shared by all layers; approx "
        "in evaluation and generation)",
        choices=SENTENCE_SELECTIONS,
    )
    approximator: Optional[str] = component_flag(
        "model-based",
        "model-based (BiGRU sentence encoder + W^Q/W^K, Eq. 8-10) or model-free "
        "(App. D Eq. 19, phi = ELU + 1, no parameters; the unnormalized scores, Z_m "
        "dropped, averaged over heads before top-r, as App. D and the authors' decoding)",
        choices=APPROXIMATORS,
    )
    sentence_encoder: Optional[str] = component_flag(
        "bigru",
        "sentence encoder of the model-based approximator (f2 of Eq. 7): bigru, the "
        "bidirectional GRU of Eq. 10 (App. A.1), or attention-pooling, the cheaper "
        "hierarchical attention over each sentence's tokens that Sec. 4.5 proposes "
        "(multi-head pooling, no recurrence)",
        choices=SENTENCE_ENCODERS,
    )
    sentence_encoder_layers: Optional[int] = component_flag(
        2, "layers of the bidirectional GRU sentence encoder (App. A.1)", type=at_least(1), metavar="N"
    )
    sentence_encoder_hidden_dim: Optional[int] = component_flag(
        None,
        "hidden size per direction of the GRU (App. A.1: the model dimension, 1024 for "
        "BART-large) (default: --encoder-embed-dim)",
        type=at_least(1),
        metavar="D",
    )
    share_selection_across_beams: bool = component_flag(
        False,
        "average the sentence scores over the beam hypotheses of a source before top-r "
        "(the authors' decoding); off: every hypothesis selects its own sentences",
        action="store_true",
    )
    sparse_generation_path: Optional[str] = component_flag(
        "auto",
        "how incremental generation reads the top-r sentences: gather their encoder states "
        "per hypothesis (cost ~ kept tokens * heads), mask the full per-source attention "
        "(cost ~ N, same output), or auto: gather at a step when the most tokens a "
        "hypothesis keeps * heads <= 2 * N",
        choices=GENERATION_PATHS,
    )
    mix_decay_updates: Optional[int] = component_flag(
        None,
        "for --sentence-selection mix: use the exact saliency with probability "
        "max(0, 1 - update/N), else the approximation (Sec. 4.3: 1 - step/epoch_size, "
        "so N = the updates of one epoch)",
        type=at_least(1),
        metavar="N",
    )


@register_component("cross_attention", "sparse")
class SparseSentenceCrossAttention(CrossAttentionComponent):
    """Manakul & Gales 2021: attention to the top-r sentences (see the module docstring)."""

    follows_backbone = True
    config_class = SparseCrossAttentionConfig
    paper = "Manakul & Gales 2021 (Eq. 3-11)"
    summary = "each query reads the tokens of its top-r sentences, ranked by an approximator trained with a KL loss"
    side_input_notes = {"src_sent_ids": "required"}
    implemented_in = (
        "mdsfair.modules.sparse_cross_attention",
        "mdsfair.modules.sentence_selection",
        "mdsfair.modules.sentence_approximator",
    )

    def side_inputs(self):
        return {"src_sent_ids": True}

    # ----------------------------------------------------------- encoder side

    def build_encoder_modules(self, encoder):
        """The sentence encoder of the model-based approximator
        (``encoder.sentence_encoder``, shared by all layers), or None."""
        args = self.args
        sentence_encoder = (
            build_sentence_encoder(self.config, args) if self.config.approximator == "model-based" else None
        )
        if isinstance(sentence_encoder, SentenceEncoder) and activation_checkpointing(args):
            # --checkpoint-activations: the BiGRU's working set over every
            # sentence of the batch is the largest of the model, so it is
            # recomputed a chunk of sentences at a time
            sentence_encoder.checkpoint_activations(
                SENTENCE_ENCODER_CHECKPOINT_CHUNK, offload_to_cpu=bool(getattr(args, "offload_activations", False))
            )
        elif sentence_encoder is not None:
            # the pooling encoder reads the encoder states and a layout of index
            # tensors; while the approximator trains on the frozen encoder none
            # of its inputs requires grad, and checkpoint_layer still gives its
            # own parameters their gradients
            sentence_encoder = checkpoint_layer(sentence_encoder, args)
        encoder.sentence_encoder = sentence_encoder

    def source_context(self, encoder, encoder_states, structure):
        layout = sentence_layout(structure.sentence_ids)
        return SparseSourceContext(
            sentence_ids=structure.sentence_ids,
            sentence_states=(
                encoder.sentence_encoder(encoder_states.transpose(0, 1), layout)
                if encoder.sentence_encoder is not None
                else None
            ),
            layout=layout,
            # in evaluation: sizes generation's kept-token layouts without a synchronization per step
            # (one per batch, here)
            kept_token_bounds=None if encoder.training else kept_token_bounds(layout.lengths),
        )

    def reorder_encoder_out(self, encoder, encoder_out, new_order):
        """The encoder output stays one copy per source; its context
        reorders the decoder rows (:meth:`SparseSourceContext.index_select`)."""
        reordered = dict(encoder_out)
        reordered[SOURCE_CONTEXT] = [context.index_select(new_order) for context in encoder_out.get(SOURCE_CONTEXT, [])]
        return reordered

    # ----------------------------------------------------------- decoder side

    def build(self, layer, embed_dim, cfg):
        config = self.config
        return SparseCrossAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            top_r=config.top_r,
            selection=config.sentence_selection,
            approximator=config.approximator,
            sentence_dim=cfg.encoder.embed_dim,
            share_selection_across_beams=config.share_selection_across_beams,
            # no default (--sentence-selection mix requires it); None in checkpoints saved before the flag
            mix_decay_updates=config.mix_decay_updates,
            generation_path=config.sparse_generation_path,
            bias=layer.backbone.linear_bias,
        )

    def decoder_context(self, decoder, source, incremental_state):
        sentences = required_context(source, self).rows_context()
        mix_draw = None
        if decoder.training and any(layer.encoder_attn.selection == "mix" for layer in decoder.layers):
            # Sec. 4.3's scheduled mix: one uniform draw per training forward pass, shared by every layer
            mix_draw = torch.rand(()).item()
        return SparseDecoderContext(sentences, incremental_state is None, mix_draw)

    def attend(
        self,
        attention,
        x,
        encoder_states,
        padding_mask,
        context,
        incremental_state=None,
        need_attn=False,
        alignment_heads=None,
        need_weights=None,
    ):
        x, sentence_attention = attention(
            x,
            encoder_states,
            padding_mask,
            context.sentences,
            incremental_state=incremental_state,
            compute_saliency=context.compute_saliency,
            need_weights=need_attn,
            weight_heads=alignment_heads,
            mix_draw=context.mix_draw,
        )
        return x, sentence_attention.token_attention, sentence_attention

    def decoder_extra(self, extras):
        return {"sentence_attention": list(extras)}

    # ----------------------------------------------------------- the model

    def after_init(self, model):
        """BART's init_bert_params just re-initialized every Linear; restore
        the approximator's own initialization (App. A.1)."""
        if model.encoder.sentence_encoder is not None:
            model.encoder.sentence_encoder.reset_parameters()
        for layer in model.decoder.layers:
            layer.encoder_attn.initialize_approximator_from_cross_attention()

    def upgrade_state_dict(self, model, state_dict, prefix):
        """Restoring a checkpoint without the approximator (BART, LED, T5,
        ...): create it (App. A.1), W^Q/W^K copied from the checkpoint's
        cross-attention q_proj/k_proj (weights and biases; where the
        checkpoint's projections have no biases, T5's, W^Q/W^K's stay at the
        zeros :meth:`after_init` gave them), the sentence encoder freshly
        initialized."""
        created = 0
        for key, value in model.state_dict().items():
            full_key = prefix + key
            if full_key in state_dict:
                continue
            if ".encoder_attn.sentence_attention.sentence_query_proj." in key:
                source = full_key.replace("sentence_attention.sentence_query_proj.", "q_proj.")
            elif ".encoder_attn.sentence_attention.sentence_key_proj." in key:
                source = full_key.replace("sentence_attention.sentence_key_proj.", "k_proj.")
            elif key.startswith("encoder.sentence_encoder."):
                source = None
            else:
                continue
            state_dict[full_key] = state_dict[source].clone() if source in state_dict else value.clone()
            created += 1
        if created:
            logger.info(
                "sparse cross-attention: created %d approximator tensors absent from the checkpoint "
                "(W^Q/W^K copied from the cross-attention projections)",
                created,
            )

    @staticmethod
    def approximator_parameter_names(model):
        """Names of theta~ (Eq. 13-14): sentence encoder and W^Q/W^K."""
        return approximator_parameter_names(model.named_parameters())
