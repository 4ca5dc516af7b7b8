"""The multi-document encoder-decoder assembled from components: BART's
embeddings, layers and output projection with the encoder self-attention,
encoder positions and cross-attention chosen by
``--encoder-self-attention``, ``--encoder-positions`` and ``--cross-attention``
(:mod:`mdsfair.modules.components`; their flags, defaults and combination
checks: :mod:`mdsfair.models.component_flags`).

This module registers nothing: ``mdsfair/models/multidoc_bart.py`` registers
the model assembled from flags (``multidoc_bart``), and HierEncDec, LED/PRIMERA
and the sparse decoder register their families (``hierencdec_bart``, ``led``,
``sparse_bart``; the names their checkpoints, hub entries and the model
contract know) as the same class with presets of the flags
(:mod:`mdsfair.models.presets`).

Side inputs: every component declares the data-contract inputs it reads;
:meth:`ComponentBARTModel.side_inputs` is their union, the task hands the
model exactly those, and :meth:`ComponentEncoder.forward` checks them once
(:func:`~mdsfair.data.side_inputs.check_side_inputs`: an input that no
component declares, a missing required one, one out of its dtype or shape,
values off their rule), naming it. The components read them from the batch's
:class:`~mdsfair.modules.source_structure.SourceStructure`; what the
cross-attention reads of the source is one entry of the encoder output, its
:class:`~mdsfair.modules.source_structure.SourceContext`, reordered with the
hypotheses in beam search.
"""

import copy
from typing import Dict, List, Optional

import torch
from fairseq.models.bart import BARTModel
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerEncoderBase
from torch import Tensor, nn

from mdsfair.data.side_inputs import check_side_inputs
from mdsfair.models.component_flags import (
    add_component_args,
    build_components,
    component_defaults,
    side_input_declarations,
)
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.side_input_forward import SideInputForward
from mdsfair.modules.components import BackboneConfig
from mdsfair.modules.segment_positions import segment_ids_from_start_tokens
from mdsfair.modules.source_structure import SOURCE_CONTEXT, SourceStructure
from mdsfair.modules.transformer_layers import (
    STACK_NORMS,
    ComponentDecoderLayer,
    ComponentEncoderLayer,
    OutputProjection,
    embed_source,
    logits_without,
    use_backbone_norms,
    wrap_layer,
)


class ComponentEncoder(TransformerEncoderBase):
    """BART's encoder with a self-attention and a position component; its
    output carries what the cross-attention component needs."""

    def __init__(self, args, dictionary, embed_tokens, components):
        self.components = components
        self.self_attention_component = components["encoder_self_attention"]
        self.position_component = components["encoder_positions"]
        self.cross_attention_component = components["cross_attention"]
        self.side_input_declarations = side_input_declarations(components)
        #: the components that need each declared input, for the check's message
        self.side_input_readers = {
            name: [repr(c) for c in components.values() if c.side_inputs().get(name)]
            for name in self.side_input_declarations
        }
        self.uses_documents = any(c.uses_documents for c in components.values())
        self.needs_document_start_tokens = any(c.needs_document_start_tokens for c in components.values())
        self._layers_built = 0
        cfg = copy.deepcopy(TransformerConfig.from_namespace(args))  # (a model's own config is shared)
        cfg.max_source_positions = getattr(args, "max_encoder_positions", None) or cfg.max_source_positions
        self.position_component.configure(cfg)
        super().__init__(cfg, dictionary, embed_tokens)
        backbone = BackboneConfig.of(args)
        use_backbone_norms(self, STACK_NORMS, backbone)
        self.stack_output_dropout = backbone.stack_output_dropout
        for component in components.values():
            component.build_encoder_modules(self)

    def build_encoder_layer(self, cfg):
        layer = ComponentEncoderLayer(cfg, self.self_attention_component, self._layers_built)
        self._layers_built += 1
        # LongT5's context holds the blocked bias, a function of trainable tables: checkpointing records it
        return wrap_layer(layer, cfg, structured=getattr(self.self_attention_component, "reads_position_tables", False))

    # ------------------------------------------------------------- forward

    def side_inputs_of(
        self,
        src_tokens: Tensor,
        positional,
        side_inputs: Dict[str, Optional[Tensor]],
        padding_mask: Tensor,
        value_checks: List,
    ) -> Dict[str, Tensor]:
        """The side inputs by name (positional ones in declaration order, None:
        not given), checked once (:func:`~mdsfair.data.side_inputs.check_side_inputs`;
        the checks of their values are appended to ``value_checks``, which the
        batch's :class:`SourceStructure` reads with its other checks)."""
        names = list(self.side_input_declarations)
        if len(positional) > len(names):
            raise TypeError(f"the encoder takes {len(names)} positional side inputs ({names}), got {len(positional)}")
        given = dict(zip(names, positional))
        for name, value in side_inputs.items():
            if name in given:
                raise TypeError(f"side input {name} given twice")
            given[name] = value
        given = {name: value for name, value in given.items() if value is not None}
        check_side_inputs(
            src_tokens,
            given,
            self.side_input_declarations,
            ", ".join(repr(c) for c in self.components.values()),
            self.side_input_readers,
            padding_mask=padding_mask,
            pending=value_checks,
        )
        return given

    def document_ids(
        self, src_tokens: Tensor, src_doc_ids: Optional[Tensor], structure: Optional[SourceStructure] = None
    ) -> Tensor:
        """The data contract's ``src_doc_ids`` (its values checked with the
        other side inputs, :func:`~mdsfair.data.side_inputs.check_side_inputs`:
        >= 0 at every token, negative at padding), or, when the input has none
        (hub, plain token batches), one document per ``<s>``-opened run (-1 at
        padding). The checks of the ids wait in ``structure`` for its one host
        read (:meth:`SourceStructure.read`); without it they are read here."""
        checks = (
            structure if structure is not None else SourceStructure(src_tokens, src_tokens.eq(self.padding_idx), {})
        )
        if src_doc_ids is None:
            src_doc_ids = segment_ids_from_start_tokens(src_tokens, self.dictionary.bos(), self.padding_idx)
            # a negative id at a token that is not padding (True > False)
            checks.check(
                torch.gt(src_doc_ids.lt(0), checks.padding_mask).any(),
                "every source token needs a document: the source must start with <s> (or pass src_doc_ids)",
            )
        if self.needs_document_start_tokens:
            users = [repr(c) for c in self.components.values() if c.needs_document_start_tokens]
            checks.document_ids = src_doc_ids  # its runs are computed once, here, for every component
            checks.check(
                torch.bitwise_and(checks.document_runs().start_mask, src_tokens.ne(self.dictionary.bos())).any(),
                f"{', '.join(users)} use each document's first token <s> as its start-of-document token, "
                "but some document does not start with <s>; drop --no-document-start-token or use components "
                "without start-of-document tokens (HierEncDec Table 3 row 5)",
            )
        if structure is None:
            checks.read()
        return src_doc_ids

    def forward_embedding(
        self, src_tokens, token_embedding: Optional[Tensor] = None, structure: Optional[SourceStructure] = None
    ):
        """Token + position embedding (the position component's)."""
        if structure is None:
            structure = SourceStructure(src_tokens, src_tokens.eq(self.padding_idx), {})
        return embed_source(self, src_tokens, token_embedding, self.position_component.embed(self, structure))

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        *positional_side_inputs: Optional[Tensor],
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        **side_inputs: Optional[Tensor],
    ):
        """fairseq's encoder output dictionary (``encoder_out [T, B, C]``)
        plus the cross-attention component's ``source_context`` (none or one
        :class:`~mdsfair.modules.source_structure.SourceContext`). ``side_inputs``: the
        data-contract inputs the components declare (by name, or positional
        after ``src_lengths`` in :attr:`side_input_declarations` order)."""
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        value_checks = []
        side_inputs = self.side_inputs_of(
            src_tokens, positional_side_inputs, side_inputs, encoder_padding_mask, value_checks
        )
        if src_tokens.size(1) > self.max_source_positions:
            raise ValueError(
                f"source of {src_tokens.size(1)} tokens exceeds the encoder's {self.max_source_positions} positions "
                "(--max-encoder-positions)"
            )
        structure = SourceStructure(src_tokens, encoder_padding_mask, side_inputs, pending_checks=value_checks)
        if self.uses_documents:
            structure.document_ids = self.document_ids(src_tokens, side_inputs.get("src_doc_ids"), structure)
        # the components' host values and every check of the input: one host read, before any layer
        structure.request("has_pads", encoder_padding_mask.any())
        self.position_component.prepare(self, structure)
        context = self.self_attention_component.prepare(self, structure)
        has_pads = structure.value("has_pads")
        if structure.pending_checks:
            structure.read()

        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings, structure)
        if has_pads:
            x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        position_bias = None  # once for every layer; LongT5's attention reads the tables itself (prepare)
        if not getattr(self.self_attention_component, "reads_position_tables", False):
            position_bias = self.position_component.attention_bias(self, structure)
        layer_inputs = (context,) if position_bias is None else (context, position_bias)

        encoder_states = [x] if return_all_hiddens else []
        for layer in self.layers:
            x = layer(x, encoder_padding_mask if has_pads else None, *layer_inputs)
            if return_all_hiddens:
                encoder_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if self.stack_output_dropout:
            x = self.dropout_module(x)

        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        encoder_out = {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }
        source_context = self.cross_attention_component.source_context(self, x, structure)
        encoder_out[SOURCE_CONTEXT] = [source_context] if source_context is not None else []
        return encoder_out

    def reorder_stock_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        return TransformerEncoderBase.reorder_encoder_out(self, encoder_out, new_order)

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """As the cross-attention component keeps the encoder output in beam search."""
        return self.cross_attention_component.reorder_encoder_out(self, encoder_out, new_order)


class ComponentDecoder(TransformerDecoderBase):
    """BART's decoder whose cross-attention is a component's. The extra
    output holds ``attn`` (the ``alignment_layer``'s cross-attention averaged
    over ``alignment_heads``, as fairseq's) and ``inner_states``, plus the
    component's entries (the sparse decoder's ``sentence_attention``).

    A family whose vocabulary and positions are not BART's sets (its
    :meth:`ComponentBARTModel.decoder_options`): ``start_index``, the token
    the decoder reads at the first target position in place of the
    collater's ``</s>`` (PEGASUS starts from ``<pad>``; None: ``</s>``, as
    BART); ``absent_index``, a dictionary entry the model never predicts
    (:func:`~mdsfair.modules.transformer_layers.logits_without`); ``positions``,
    the decoder's ``embed_positions`` in place of fairseq's; and
    ``masks_input_padding`` False for a decoder whose inputs attend to the
    padding after them, as T5's (the tokens before it see none of it).

    The position component may give the decoder its own positions (T5's
    causal relative bias: no ``embed_positions``, a bias added to every
    self-attention layer's scores); the backbone (``--normalization``,
    ``--untie-output-embedding``) sets its norms and output layer."""

    def __init__(
        self,
        args,
        dictionary,
        embed_tokens,
        components,
        start_index: Optional[int] = None,
        absent_index: Optional[int] = None,
        positions: Optional[nn.Module] = None,
        masks_input_padding: bool = True,
    ):
        self.cross_attention_component, self.masks_input_padding = components["cross_attention"], masks_input_padding
        self.position_component = components["encoder_positions"]
        backbone = BackboneConfig.of(args)
        cfg = TransformerConfig.from_namespace(args)
        self.position_component.configure_decoder(cfg)
        if backbone.untie_output_embedding:
            cfg.share_decoder_input_output_embed = False
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=False)
        use_backbone_norms(self, STACK_NORMS, backbone)
        self.stack_output_dropout = backbone.stack_output_dropout
        self.position_component.build_decoder_modules(self)
        self.start_index = start_index
        self.absent_index = absent_index
        if positions is not None and self.embed_positions is not None:
            self.embed_positions = positions

    def input_tokens(self, prev_output_tokens: Tensor) -> Tensor:
        """The tokens the decoder embeds: ``prev_output_tokens`` with the
        first read as ``start_index`` when the family sets one."""
        if self.start_index is None:
            return prev_output_tokens
        tokens = prev_output_tokens.clone()
        tokens[:, 0] = self.start_index
        return tokens

    def output_layer(self, features: Tensor) -> Tensor:
        """fairseq's output projection; the ``absent_index`` entry below every
        other when the family sets one."""
        logits = super().output_layer(features)
        return logits if self.absent_index is None else logits_without(logits, self.absent_index)

    def build_output_projection(self, cfg, dictionary, embed_tokens):
        """fairseq's output projection (tied to the token embedding or its
        own), as the :class:`~mdsfair.modules.transformer_layers.OutputProjection`
        it is: the same module, its class named (no parameter is made twice)."""
        super().build_output_projection(cfg, dictionary, embed_tokens)
        if type(self.output_projection) is nn.Linear:
            self.output_projection.__class__ = OutputProjection

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        if no_encoder_attn:
            raise ValueError("mdsfair's encoder-decoders need encoder-decoder attention (--no-cross-attention)")
        layer_class = getattr(self.cross_attention_component, "decoder_layer_class", ComponentDecoderLayer)
        layer = layer_class(cfg, self.cross_attention_component)
        return self.cross_attention_component.wrap_decoder_layer(layer, cfg)

    def extract_features(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state=None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        if encoder_out is None or len(encoder_out.get("encoder_out", [])) == 0:
            raise ValueError("the decoder needs the encoder output")
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        encoder_states = encoder_out["encoder_out"][0]
        padding_mask = encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) else None
        source_context = encoder_out.get(SOURCE_CONTEXT, [])
        context = self.cross_attention_component.decoder_context(
            self, source_context[0] if len(source_context) > 0 else None, incremental_state
        )

        positions = (
            self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
            if self.embed_positions is not None
            else None
        )
        position_bias = self.position_component.decoder_attention_bias(self, prev_output_tokens, incremental_state)
        input_tokens = self.input_tokens(prev_output_tokens)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            input_tokens = input_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        x = self.embed_scale * self.embed_tokens(input_tokens.contiguous())
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x = x + positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x).transpose(0, 1)

        if incremental_state is not None or not self.masks_input_padding:
            # a generation step's token is never padding (beam search never chooses it, and forced
            # prefix tokens skip it): no mask, and no host read of one at every step
            self_attn_padding_mask = None
        else:
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
            if not self_attn_padding_mask.any():
                self_attn_padding_mask = None
        self_attn_mask = (
            self.buffered_future_mask(x) if incremental_state is None and not full_context_alignment else None
        )
        if position_bias is not None:  # [B * H, T, S], the future mask added
            self_attn_mask = position_bias if self_attn_mask is None else position_bias + self_attn_mask

        inner_states: List[Optional[Tensor]] = [x]
        extras = []
        attn: Optional[Tensor] = None
        for index, layer in enumerate(self.layers):
            x, layer_attn, extra = layer(
                x,
                encoder_states,
                padding_mask,
                context,
                incremental_state=incremental_state,
                self_attn_mask=self_attn_mask,
                self_attn_padding_mask=self_attn_padding_mask,
                need_attn=index == alignment_layer,
                alignment_heads=alignment_heads,
            )
            inner_states.append(x)
            extras.append(extra)
            if index == alignment_layer and layer_attn is not None:
                attn = layer_attn.float().to(x)

        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if self.stack_output_dropout:
            x = self.dropout_module(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [attn], "inner_states": inner_states, **self.cross_attention_component.decoder_extra(extras)}


class ComponentBARTModel(SideInputForward, BARTModel):
    """BART assembled from components (see the module docstring).
    Registered subclasses set ``hub_description`` and their presets."""

    #: the components of the model :meth:`build_model` is building (its
    #: encoder and decoder share them)
    _components_being_built = None

    #: the model's flag defaults (``mdsfair.models.flag_defaults``): a family's presets
    defaults: FlagDefaults = None

    @classmethod
    def add_args(cls, parser):
        """BART's flags, every component's, and the family's own
        (:meth:`add_family_args`), each tabled default in its help."""

        def add(parser):
            BARTModel.add_args(parser)
            add_component_args(parser)
            cls.add_family_args(parser)

        (cls.defaults or component_defaults()).documented(add)(parser)

    @staticmethod
    def add_family_args(parser) -> None:
        """A family's own flags (HierEncDec's Table 3 ablations)."""

    @classmethod
    def build_model(cls, args, task):
        """BART's ``build_model`` with the components of ``args``; the
        task's source budget must fit the encoder's position table."""
        components = build_components(args)
        budget = getattr(args, "max_source_positions", None)
        if budget is not None and budget > args.max_encoder_positions:
            raise ValueError(
                f"--max-source-positions {budget} exceeds the encoder's position table "
                f"(--max-encoder-positions {args.max_encoder_positions})"
            )
        # BART's build_model calls build_encoder / build_decoder with args only
        ComponentBARTModel._components_being_built = components
        try:
            model = super().build_model(args, task)
        finally:
            ComponentBARTModel._components_being_built = None
        for component in components.values():
            component.on_build_model(model, task)
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return ComponentEncoder(args, src_dict, embed_tokens, cls._components_being_built or build_components(args))

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        components = cls._components_being_built or build_components(args)
        return ComponentDecoder(args, tgt_dict, embed_tokens, components, **cls.decoder_options(args, tgt_dict))

    @classmethod
    def decoder_options(cls, args, dictionary) -> Dict[str, object]:
        """A family's settings of :class:`ComponentDecoder` (its start token,
        a token it never predicts, its positions); BART's are the defaults."""
        return {}

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.components = encoder.components
        self.initialize_backbone()
        for component in self.components.values():
            component.after_init(self)

    def initialize_backbone(self) -> None:
        """A family's initialisation of its backbone, after BART's
        (``init_bert_params``, which ``BARTModel`` applies) and before the
        components' own (:meth:`Component.after_init`); BART's has no other."""

    def side_inputs(self) -> Dict[str, bool]:
        """Data-contract inputs the components read: name -> required."""
        return dict(self.encoder.side_input_declarations)

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())

    def set_beam_size(self, beam):
        """BART's "beamable" cross-attention (one encoder row shared by an
        example's beams) stays off: it is a speed-up only, it bypasses the
        components' reordering of the encoder output, and once set it stays
        on the model, so a later forward pass whose batch is not
        ``examples x beam`` fails."""

    def upgrade_state_dict_named(self, state_dict, name):
        """BART's upgrades, then each component's (position tables extended,
        the sparse approximator created)."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name != "" else ""
        for component in self.components.values():
            component.upgrade_state_dict(self, state_dict, prefix)

    def approximator_parameter_names(self):
        """Names of the sparse cross-attention's approximator theta~ (Eq. 13-14)."""
        component = self.components["cross_attention"]
        if not hasattr(component, "approximator_parameter_names"):
            raise ValueError(f"{component!r} has no approximator")
        return component.approximator_parameter_names(self)
