"""HierEncDec: hierarchical encoding and decoding on BART (Shen et al.,
Findings of EMNLP 2023), without new parameters.

Input (Sec. 4.1, the data contract's default): every document starts with
``<s>``, its start-of-document (SOD) token, and one ``</s>`` closes the source.

* Hierarchical encoder (Sec. 4.1): tokens attend within their document, SOD
  tokens also to every other SOD token
  (:mod:`mdsfair.modules.document_blocked_attention`, computed per document
  block rather than as a masked ``T x T`` matrix);
* position restart (Sec. 4.1.1): encoder positions restart at every document
  (:mod:`mdsfair.modules.segment_positions`);
* hierarchical decoder (Sec. 4.2, Eq. 3-5): cross-attention softmax within
  each document scaled by a softmax over the SOD scores
  (:mod:`mdsfair.modules.hierarchical_cross_attention`).

The ablation flags switch each part off (Table 3); with all of them off the
model computes exactly BART. The document structure is carried in the
encoder output (``src_doc_ids``) and reordered with it, so beam search runs
at any batch size. A BART checkpoint's 1,026-row position table is extended
by tiling when the checkpoint is loaded (Sec. 5.3).
"""
import logging
from contextlib import contextmanager
from typing import Dict, List, Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerEncoderBase
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor

from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.activation_checkpointing import activation_checkpointing, checkpoint_layer
from mdsfair.modules.document_blocked_attention import IMPLEMENTATIONS, DocumentBlockedSelfAttention, DocumentLayout
from mdsfair.modules.hierarchical_cross_attention import HierarchicalCrossAttention
from mdsfair.modules.segment_positions import (
    TILING_METHODS,
    restarted_position_embedding,
    segment_ids_from_start_tokens,
    segment_start_mask,
    tile_position_table,
)

logger = logging.getLogger(__name__)

#: The one source of the hierencdec_bart model's defaults
#: (``mdsfair.models.flag_defaults``): Shen et al. 2023, every part of the
#: hierarchy on (Table 3 row 0), position tables extended by tiling as
#: Beltagy et al. (Sec. 5.3), the blocked encoder attention (same numbers as
#: the authors' dense mask).
DEFAULTS = FlagDefaults({
    "no_hierarchical_encoder": False,
    "no_hierarchical_decoder": False,
    "no_position_restart": False,
    "document_attention": "blocked",
    "position_tiling": "beltagy",
})


def wrap_layer(layer, cfg, attribute_inputs=()):
    """Activation checkpointing and FSDP wrapping as fairseq's own builders do
    (``attribute_inputs``: see :func:`mdsfair.modules.activation_checkpointing.checkpoint_layer`)."""
    layer = checkpoint_layer(layer, cfg, attribute_inputs)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not activation_checkpointing(cfg) else 0)


class HierEncDecEncoderLayer(TransformerEncoderLayerBase):
    """BART encoder layer whose self-attention can follow the document rule."""

    def __init__(self, cfg, document_attention_implementation: str = "blocked"):
        self.document_attention_implementation = document_attention_implementation
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        return DocumentBlockedSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.encoder.xformers_att_config,
            implementation=self.document_attention_implementation,
        )

    def forward(
        self,
        x: Tensor,
        encoder_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        document_layout: Optional[DocumentLayout] = None,
    ):
        """Stock layer when ``document_layout`` is None, else the same
        post-/pre-norm residual block around the hierarchical self-attention."""
        if document_layout is None:
            return super().forward(x, encoder_padding_mask, attn_mask)
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn.forward_documents(x, document_layout)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class HierEncDecEncoder(TransformerEncoderBase):
    """BART encoder with the hierarchical self-attention and position restart
    of Sec. 4.1. Adds ``src_doc_ids`` to its output for the decoder."""

    def __init__(self, args, dictionary, embed_tokens):
        self.hierarchical_encoder = not args.no_hierarchical_encoder
        self.position_restart = not args.no_position_restart
        self.hierarchical_decoder = not args.no_hierarchical_decoder
        self.document_attention_implementation = args.document_attention
        super().__init__(TransformerConfig.from_namespace(args), dictionary, embed_tokens)
        if self.position_restart and self.embed_positions is not None and not hasattr(self.embed_positions, "weight"):
            raise ValueError("position restart needs learned positions (--encoder-learned-pos); or pass --no-position-restart")

    def build_encoder_layer(self, cfg):
        return wrap_layer(HierEncDecEncoderLayer(cfg, self.document_attention_implementation), cfg)

    @property
    def uses_documents(self) -> bool:
        return self.hierarchical_encoder or self.position_restart or self.hierarchical_decoder

    def set_document_attention(self, implementation: str) -> None:
        """Switch every layer between the ``blocked`` and ``dense`` encoder attention."""
        for module in self.modules():
            if isinstance(module, DocumentBlockedSelfAttention):
                module._check_implementation(implementation)
                module.implementation = implementation
        self.document_attention_implementation = implementation

    def document_ids(self, src_tokens: Tensor, src_doc_ids: Optional[Tensor]) -> Tensor:
        """The data contract's ``src_doc_ids``, or, when the input has none
        (hub, plain token batches), one document per ``<s>``-opened run."""
        if src_doc_ids is None:
            src_doc_ids = segment_ids_from_start_tokens(src_tokens, self.dictionary.bos(), self.padding_idx)
        if src_doc_ids.shape != src_tokens.shape:
            raise ValueError(f"src_doc_ids {tuple(src_doc_ids.shape)} must match src_tokens {tuple(src_tokens.shape)}")
        real = src_tokens.ne(self.padding_idx)
        if (real & src_doc_ids.lt(0)).any():
            raise ValueError("every source token needs a document: the source must start with <s> (or pass src_doc_ids)")
        src_doc_ids = src_doc_ids.masked_fill(~real, -1)
        if self.hierarchical_encoder or self.hierarchical_decoder:
            starts = segment_start_mask(src_doc_ids)
            if src_tokens[starts].ne(self.dictionary.bos()).any():
                raise ValueError(
                    "the hierarchical encoder/decoder use each document's first token <s> as its "
                    "start-of-document token, but some document does not start with <s>; drop "
                    "--no-document-start-token or turn the hierarchical parts off (Table 3 row 5)"
                )
        return src_doc_ids

    def forward_embedding(
        self, src_tokens, token_embedding: Optional[Tensor] = None, document_ids: Optional[Tensor] = None
    ):
        """Token + position embedding; positions restart per document when
        ``document_ids`` is given (Sec. 4.1.1)."""
        if document_ids is None or self.embed_positions is None:
            return super().forward_embedding(src_tokens, token_embedding)
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = embed = self.embed_scale * token_embedding
        x = embed + restarted_position_embedding(document_ids, self.embed_positions.weight, self.padding_idx)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x, embed

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        src_doc_ids: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        """Like fairseq's encoder; ``src_doc_ids [B, T]`` (data contract)
        gives the documents. Output adds ``src_doc_ids`` (empty list when the
        hierarchical decoder is off)."""
        document_ids = self.document_ids(src_tokens, src_doc_ids) if self.uses_documents else None
        layout = DocumentLayout.from_document_ids(document_ids) if self.hierarchical_encoder else None

        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = encoder_padding_mask.any()
        x, encoder_embedding = self.forward_embedding(
            src_tokens, token_embeddings, document_ids if self.position_restart else None
        )
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x) * has_pads.type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        encoder_states = [x] if return_all_hiddens else []
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=encoder_padding_mask if has_pads else None, document_layout=layout)
            if return_all_hiddens:
                encoder_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)

        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [src_lengths],
            "src_doc_ids": [document_ids] if self.hierarchical_decoder else [],  # B x T
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Reorder like fairseq, and the document ids with the rest (beam search)."""
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        reordered["src_doc_ids"] = [ids.index_select(0, new_order) for ids in encoder_out.get("src_doc_ids", [])]
        return reordered


class HierEncDecDecoderLayer(TransformerDecoderLayerBase):
    """BART decoder layer whose cross-attention can follow Eq. 3-5."""

    def build_encoder_attention(self, embed_dim, cfg):
        return HierarchicalCrossAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )


class HierEncDecDecoder(TransformerDecoderBase):
    """BART decoder; self-attention unchanged, cross-attention hierarchical
    (Sec. 4.2) over the documents named by the encoder output's ``src_doc_ids``."""

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = HierEncDecDecoderLayer(cfg, no_encoder_attn)
        # The key documents reach the cross-attention as an attribute set for
        # one pass (_cross_attention_documents); a checkpointed layer
        # recomputes after that pass, so it takes them as an input.
        documents = [(layer.encoder_attn, "key_document_ids")] if layer.encoder_attn is not None else []
        return wrap_layer(layer, cfg, documents)

    @contextmanager
    def _cross_attention_documents(self, document_ids: Optional[Tensor]):
        """Give every cross-attention the key documents for one forward pass."""
        attentions = [m for m in self.modules() if isinstance(m, HierarchicalCrossAttention)]
        for attention in attentions:
            attention.key_document_ids = document_ids
        try:
            yield
        finally:
            for attention in attentions:
                attention.key_document_ids = None

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state=None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        document_ids = None
        if encoder_out is not None and len(encoder_out.get("src_doc_ids", [])) > 0:
            document_ids = encoder_out["src_doc_ids"][0]
        with self._cross_attention_documents(document_ids):
            return super().extract_features_scriptable(
                prev_output_tokens,
                encoder_out,
                incremental_state,
                full_context_alignment,
                alignment_layer,
                alignment_heads,
            )


@register_model("hierencdec_bart")
class HierEncDecBARTModel(MultiDocHubModel, BARTModel):
    """BART with HierEncDec's hierarchical encoder and decoder; no new parameters.

    Table 3 rows as flags (``<s>`` tokens are the task's default, removed by
    the task's ``--no-document-start-token``):

    ====  =================================================================
    row   flags
    ====  =================================================================
    0     (defaults)
    1     ``--no-position-restart``
    2     ``--no-hierarchical-decoder``
    3     ``--no-hierarchical-decoder --no-position-restart``
    4     ``--no-hierarchical-encoder --no-hierarchical-decoder --no-position-restart``
    5     row 4 + task ``--no-document-start-token`` (= BART)
    ====  =================================================================
    """

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "HierEncDec on BART (Shen et al., 2023): "
        "document-restricted encoder, Eq. 3-5 cross-attention, beam search at any batch size"
    )

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument(
            "--no-hierarchical-encoder", action="store_true",
            help=("full encoder self-attention over all documents instead of attention within each document "
                  "plus the start-of-document exchange (Sec. 4.1; Table 3 'HierEnc' off)"),
        )
        parser.add_argument(
            "--no-hierarchical-decoder", action="store_true",
            help="stock cross-attention softmax instead of Eq. 3-5 (Sec. 4.2; Table 3 'HierDec' off)",
        )
        parser.add_argument(
            "--no-position-restart", action="store_true",
            help=("one position sequence over the whole source instead of restarting at every document "
                  "(Sec. 4.1.1; Table 3 'posres' off)"),
        )
        parser.add_argument(
            "--document-attention", choices=IMPLEMENTATIONS,
            help=("implementation of the hierarchical encoder attention: 'blocked' computes attention per "
                  "document block (memory grows with the longest document, Sec. 7), 'dense' masks a full "
                  "T x T matrix as the authors did (same numbers)"),
        )
        parser.add_argument(
            "--position-tiling", choices=TILING_METHODS,
            help=("how a shorter checkpoint position table is extended on load: 'beltagy' repeats the real "
                  "positions (the paper, Sec. 5.3, after Longformer), 'authors' repeats the whole table "
                  "including fairseq/HF's two offset rows as the authors' code does"),
        )

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return HierEncDecEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        # --no-cross-attention is fairseq's flag, which BART's architectures leave unset
        no_encoder_attn = getattr(args, "no_cross_attention", False)
        return HierEncDecDecoder(
            TransformerConfig.from_namespace(args), tgt_dict, embed_tokens, no_encoder_attn=no_encoder_attn
        )

    def forward(
        self,
        src_tokens,
        src_lengths,
        prev_output_tokens,
        src_doc_ids: Optional[Tensor] = None,
        features_only: bool = False,
        classification_head_name: Optional[str] = None,
        token_embeddings: Optional[Tensor] = None,
        return_all_hiddens: bool = True,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        """BART's forward with the documents (``src_doc_ids``, data contract)."""
        if classification_head_name is not None:
            features_only = True
        encoder_out = self.encoder(
            src_tokens,
            src_lengths=src_lengths,
            src_doc_ids=src_doc_ids,
            token_embeddings=token_embeddings,
            return_all_hiddens=return_all_hiddens,
        )
        x, extra = self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )
        if classification_head_name is not None:
            sentence_representation = x[src_tokens.eq(self.eos), :].view(x.size(0), -1, x.size(-1))[:, -1, :]
            x = self.classification_heads[classification_head_name](sentence_representation)
        return x, extra

    def set_beam_size(self, beam):
        """BART's "beamable" cross-attention keeps one encoder output per
        example and stops reordering it, which would leave the documents
        (``src_doc_ids``) of a shrinking batch stale; with the hierarchical
        decoder the encoder output is expanded per hypothesis and reordered."""
        if self.args.no_hierarchical_decoder:
            super().set_beam_size(beam)

    def upgrade_state_dict_named(self, state_dict, name):
        """BART's upgrades, then tile shorter position tables (Sec. 5.3)."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name != "" else ""
        for part in (self.encoder, self.decoder):
            if part.embed_positions is None or not hasattr(part.embed_positions, "weight"):
                continue
            key = f"{prefix}{'encoder' if part is self.encoder else 'decoder'}.embed_positions.weight"
            if key not in state_dict:
                continue
            target_rows = part.embed_positions.weight.size(0)
            loaded = state_dict[key]
            if loaded.size(0) != target_rows:
                logger.info(
                    "extending %s from %d to %d rows by %s tiling", key, loaded.size(0), target_rows, self.args.position_tiling
                )
                state_dict[key] = tile_position_table(loaded, target_rows, part.padding_idx, self.args.position_tiling)


def hierencdec_defaults(args):
    """HierEncDec's own defaults (:data:`DEFAULTS`) and 4,096 source
    positions (Sec. 5.3, after Xiao et al. 2022; BART's own is 1,024); the
    target keeps BART's 1,024 positions."""
    DEFAULTS.fill(args)
    args.max_source_positions = getattr(args, "max_source_positions", 4096)


@register_model_architecture("hierencdec_bart", "hierencdec_bart_large")
def hierencdec_bart_large(args):
    hierencdec_defaults(args)
    bart_large_architecture(args)


@register_model_architecture("hierencdec_bart", "hierencdec_bart_base")
def hierencdec_bart_base(args):
    hierencdec_defaults(args)
    bart_base_architecture(args)


@register_model_architecture("hierencdec_bart", "hierencdec_bart_tiny")
def hierencdec_bart_tiny(args):
    """Tiny dims for tests (the shape of ``tests.utils.TINY_BART_ARGS``)."""
    set_tiny_dimensions(args)
    hierencdec_bart_base(args)
