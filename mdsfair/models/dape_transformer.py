"""Document-aware positional encoding and linguistic-guided encoding for
abstractive MDS (Ma et al., IJCNN 2022; ``../shared/papers/dape-linguistic-ma2022.txt``).

A flat Transformer encoder-decoder over the concatenated source documents with
two changes to the encoder (Fig. 1):

* **document-aware positional encoding** (Section III-A, Eq. 1-4): the input
  of the encoder is ``e + alpha * Stack_dim(f_doc(k)) + f_token(i)`` for the
  ``i``-th token of document ``k``
  (:class:`~mdsfair.modules.document_positional_encoding.DocumentAwarePositionalEncoding`);
* **linguistic-guided encoding** (Section III-B, Eq. 5-11): the encoder
  self-attention weights become ``A~ = M * A + A`` with ``M`` the dependency
  relation mask learned from the source's dependency arcs
  (:mod:`mdsfair.modules.dependency_attention`; arcs from
  ``mdsfair-preprocess --side-data dep_head dep_rel``).

Ablations (Table III): ``--no-doc-positions`` (fairseq's own token positions
over the concatenation), ``--no-dependency-encoding``. With both, the model is
fairseq's ``transformer`` with the same parameter names and outputs.

The decoder is fairseq's Transformer decoder (the summary has no parse), so
incremental decoding is fairseq's.
"""
import logging
from typing import List, Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerEncoderBase, TransformerModel, base_architecture
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor

from mdsfair.models.component_model import encoder_decoder_forward
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.dependency_attention import (
    ARC_DIRECTIONS,
    DEPENDENCY_ENCODERS,
    MASK_TARGETS,
    DependencyGuidedMultiheadAttention,
    DependencyRelationEncoder,
)
from mdsfair.modules.transformer_layers import embed_source
from mdsfair.modules.document_positional_encoding import (
    DOC_POSITION_FUNCTIONS,
    TOKEN_POSITION_MODES,
    DocumentAwarePositionalEncoding,
)

logger = logging.getLogger(__name__)

#: The one source of the dape_transformer model's defaults
#: (``mdsfair.models.flag_defaults``): Ma et al. 2022's full model (Table III,
#: both encodings on), f_doc = sin with alpha 0.1 (Sec. IV-B, Table IV), the
#: MLP F_depEnc on the attention weights of every encoder layer (Eq. 7-9);
#: where the paper is silent (hidden size, LeakyReLU slope: PyTorch's, arc
#: direction, 0-based document index) the choices of examples/dape/README.md.
DEFAULTS = FlagDefaults({
    "no_doc_positions": False,
    "no_dependency_encoding": False,
    "doc_position_fn": "sin",
    "doc_position_alpha": 0.1,
    "doc_position_linear_slope": 1.0,
    "doc_position_offset": 0,
    "doc_token_positions": "per-document",
    "dependency_encoder": "mlp",
    "dependency_encoder_hidden_dim": 64,
    "dependency_leaky_relu_slope": 0.01,
    "dependency_arc_direction": "both",
    "dependency_no_arc_encoding": False,
    "dependency_mask_on": "weights",
    "dependency_layers": "all",
    # fairseq's Transformer flags where the paper differs from fairseq's base_architecture
    "encoder_layers": 8,
    "decoder_layers": 8,
    "share_all_embeddings": True,
})


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


class DependencyGuidedEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention may take the dependency
    relation mask (Eq. 8-11); parameter names are fairseq's."""

    def build_self_attention(self, embed_dim, cfg):
        return DependencyGuidedMultiheadAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            xformers_att_config=cfg.encoder.xformers_att_config,
            mask_on=cfg.dependency_mask_on,
        )

    def forward(
        self,
        x: Tensor,
        encoder_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor] = None,
        dependency_mask: Optional[Tensor] = None,
    ):
        """As fairseq's layer; ``dependency_mask`` is ``[B, T, T]`` or None."""
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(
            query=x,
            key=x,
            value=x,
            key_padding_mask=encoder_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
            dependency_mask=dependency_mask,
        )
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        x = self.fc2(x)
        fc_result = x
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        if self.return_fc and not torch.jit.is_scripting():
            return x, fc_result
        return x


class DapeTransformerEncoder(TransformerEncoderBase):
    """Transformer encoder with document-aware positions and dependency-guided
    self-attention."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        embed_dim = embed_tokens.embedding_dim
        self.document_positional_encoding = (
            None
            if cfg.no_doc_positions
            else DocumentAwarePositionalEncoding(
                embed_dim,
                self.padding_idx,
                function=cfg.doc_position_fn,
                alpha=cfg.doc_position_alpha,
                linear_slope=cfg.doc_position_linear_slope,
                offset=cfg.doc_position_offset,
                token_positions=cfg.doc_token_positions,
            )
        )
        if cfg.no_dependency_encoding:
            self.dependency_encoder = None
            self.dependency_layers: List[int] = []
        else:
            self.dependency_encoder = DependencyRelationEncoder(
                variant=cfg.dependency_encoder,
                hidden_dim=cfg.dependency_encoder_hidden_dim,
                negative_slope=cfg.dependency_leaky_relu_slope,
                direction=cfg.dependency_arc_direction,
                encode_no_arc=cfg.dependency_no_arc_encoding,
            )
            self.dependency_layers = parse_dependency_layers(cfg.dependency_layers, self.num_layers)

    def build_encoder_layer(self, cfg):
        layer = DependencyGuidedEncoderLayer(cfg, return_fc=self.return_fc)
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def forward_embedding(
        self,
        src_tokens: Tensor,
        token_embedding: Optional[Tensor] = None,
        src_doc_ids: Optional[Tensor] = None,
    ):
        """Eq. 4: ``E = e + alpha * Stack_dim(f_doc(k)) + f_token(i)``."""
        if self.document_positional_encoding is None:
            return super().forward_embedding(src_tokens, token_embedding)
        positions = self.document_positional_encoding(src_tokens, src_doc_ids, self.embed_positions)
        return embed_source(self, src_tokens, token_embedding, positions)

    def dependency_mask(
        self,
        src_tokens: Tensor,
        src_dep_head: Optional[Tensor],
        src_dep_rel: Optional[Tensor],
        src_dep_word: Optional[Tensor],
    ) -> Optional[Tensor]:
        """The dependency relation mask ``[B, T, T]`` shared by the guided layers."""
        if self.dependency_encoder is None:
            return None
        if src_dep_head is None or src_dep_rel is None:
            raise ValueError(
                "dape_transformer's linguistic-guided encoding needs dependency arcs (src_dep_head, src_dep_rel): "
                "preprocess with `mdsfair-preprocess --side-data dep_head dep_rel`, or train with "
                "--no-dependency-encoding"
            )
        for name, tensor in (("src_dep_head", src_dep_head), ("src_dep_rel", src_dep_rel), ("src_dep_word", src_dep_word)):
            if tensor is not None and tensor.shape != src_tokens.shape:
                raise ValueError(f"{name} {tuple(tensor.shape)} does not match src_tokens {tuple(src_tokens.shape)}")
        return self.dependency_encoder(src_dep_head, src_dep_rel, src_dep_word)

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        src_doc_ids: Optional[Tensor] = None,
        src_dep_head: Optional[Tensor] = None,
        src_dep_rel: Optional[Tensor] = None,
        src_dep_word: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        """As fairseq's encoder, with the structure inputs of the task
        (``src_doc_ids``, ``src_dep_head``, ``src_dep_rel``, ``src_dep_word``:
        ``[B, T]``, ``-1`` at padding)."""
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = encoder_padding_mask.any()
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings, src_doc_ids)
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x) * has_pads.type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        dependency_mask = self.dependency_mask(src_tokens, src_dep_head, src_dep_rel, src_dep_word)

        encoder_states = [x] if return_all_hiddens else []
        fc_results = []
        for index, layer in enumerate(self.layers):
            layer_output = layer(
                x,
                encoder_padding_mask=encoder_padding_mask if has_pads else None,
                dependency_mask=dependency_mask if index in self.dependency_layers else None,
            )
            if isinstance(layer_output, tuple) and len(layer_output) == 2:
                x, fc_result = layer_output
            else:
                x, fc_result = layer_output, None
            if return_all_hiddens:
                encoder_states.append(x)
                fc_results.append(fc_result)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }


@register_model("dape_transformer")
class DapeTransformerModel(MultiDocHubModel, TransformerModel):
    """Transformer with document-aware positional encoding and linguistic-guided
    encoding (Ma et al., 2022). Train on ``--task multidoc_summarization``
    with a data-bin preprocessed with ``--side-data dep_head dep_rel``."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "Transformer with document-aware positions and dependency-guided encoder attention (Ma et al. 2022); "
        "raw clusters are parsed with spaCy as in preprocessing"
    )

    def side_inputs(self):
        """Data-contract inputs this model reads: name -> required
        (documents and dependency arcs; each part is off when its input is absent)."""
        return {"src_doc_ids": False, "src_dep_head": False, "src_dep_rel": False, "src_dep_word": False}

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument(
            "--no-doc-positions", action="store_true",
            help=("ablation 'w/o doc-pos en' (Table III): fairseq's token positions over the concatenated "
                  "source, no document encoding"),
        )
        parser.add_argument(
            "--no-dependency-encoding", action="store_true",
            help="ablation 'w/o depen en' (Table III): plain encoder self-attention, no dependency arcs needed",
        )
        # document-aware positional encoding (DocumentAwarePositionalEncoding)
        parser.add_argument(
            "--doc-position-fn", choices=DOC_POSITION_FUNCTIONS,
            help=("document positional encoding function f_doc (Eq. 1; Tables IV, V): sin (the paper's), cos, "
                  "sin-cos = iter(sin, cos) over dimensions, scaled-sin-cos = iter(sin(0.1k), cos(0.1k)), "
                  "linear = slope*k, same = one value for all documents, random = fixed random value per document"),
        )
        parser.add_argument(
            "--doc-position-alpha", type=float,
            help="alpha of Eq. 2, the weight of the document encoding (the paper's)",
        )
        parser.add_argument(
            "--doc-position-linear-slope", type=float,
            help="slope of --doc-position-fn linear (Table V: 1, 2, 5, 10)",
        )
        parser.add_argument(
            "--doc-position-offset", type=int,
            help=("k = 0-based document index + offset (0: the reading under which the paper's sin/cos "
                  "comparison of Table IV holds; 1: k = 1..q as in its notation)"),
        )
        parser.add_argument(
            "--doc-token-positions", choices=TOKEN_POSITION_MODES,
            help=("token position i of Eq. 1: per-document (restarts at every document, t_i^k) or stream "
                  "(positions over the concatenated source)"),
        )
        # linguistic-guided encoding (DependencyRelationEncoder, DependencyGuidedMultiheadAttention)
        parser.add_argument(
            "--dependency-encoder", choices=DEPENDENCY_ENCODERS,
            help=("relation encoding (Table VI): mlp = F_depEnc, Linear-LeakyReLU-Linear (the paper's, Eq. 7); "
                  "linear = one linear layer; arithmetic[-core|-root] = fixed weights 1, (N-1)/N, ..., 1/N "
                  "by relation frequency [core dependents first | ROOT first]"),
        )
        parser.add_argument(
            "--dependency-encoder-hidden-dim", type=int,
            help="hidden size of F_depEnc (not given in the paper)",
        )
        parser.add_argument(
            "--dependency-leaky-relu-slope", type=float,
            help="negative slope of F_depEnc's LeakyReLU (PyTorch's; not given in the paper)",
        )
        parser.add_argument(
            "--dependency-arc-direction", choices=ARC_DIRECTIONS,
            help=("which cells an arc fills: both (M_ij = M_ji), dependent-to-head (row = dependent) "
                  "or head-to-dependent"),
        )
        parser.add_argument(
            "--dependency-no-arc-encoding", action="store_true",
            help="give token pairs without an arc F_depEnc(0) (literal Eq. 5-6) instead of 0",
        )
        parser.add_argument(
            "--dependency-mask-on", choices=MASK_TARGETS,
            help=("weights: A~ = M*A + A on the attention weights (Eq. 9, the paper's); values: "
                  "out = A V + M V (Table VI 'added on values')"),
        )
        parser.add_argument(
            "--dependency-layers", type=str,
            help=("encoder layers (0-based, comma-separated) whose self-attention uses the dependency mask, "
                  "or 'all'"),
        )

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return DapeTransformerEncoder(cfg, src_dict, embed_tokens)

    def forward(
        self,
        src_tokens,
        src_lengths,
        prev_output_tokens,
        src_doc_ids: Optional[Tensor] = None,
        src_dep_head: Optional[Tensor] = None,
        src_dep_rel: Optional[Tensor] = None,
        src_dep_word: Optional[Tensor] = None,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        side_inputs = {"src_doc_ids": src_doc_ids, "src_dep_head": src_dep_head, "src_dep_rel": src_dep_rel,
                       "src_dep_word": src_dep_word}
        return encoder_decoder_forward(
            self, src_tokens, src_lengths, prev_output_tokens, side_inputs, features_only,
            return_all_hiddens=return_all_hiddens, alignment_layer=alignment_layer, alignment_heads=alignment_heads,
        )


@register_model_architecture("dape_transformer", "dape_transformer")
def dape_transformer_architecture(args):
    """The paper's model (Section IV-B): 8 encoder and 8 decoder layers,
    Transformer-base dimensions, dropout 0.1, shared source/target embeddings
    (one dictionary, as the OpenNMT Multi-News baseline it builds on).
    fairseq's ``base_architecture`` gives the rest (d 512, FFN 2048, 8
    heads, dropout 0.1); :data:`DEFAULTS` holds the fairseq Transformer
    flags where the paper differs from it."""
    DEFAULTS.fill(args)
    base_architecture(args)


@register_model_architecture("dape_transformer", "dape_transformer_tiny")
def dape_transformer_tiny_architecture(args):
    """Tiny dimensions for tests: 2 + 2 layers, d 32, 4 heads, FFN 64."""
    set_tiny_dimensions(args)
    dape_transformer_architecture(args)
