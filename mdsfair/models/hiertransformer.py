"""Hierarchical Transformer (Liu & Lapata, ACL 2019): ``--arch hiertransformer``.

The encoder reads the L' ranked paragraphs of a cluster as blocks:

* embeddings (Eq. 7-10): word embedding plus ``[e_i ; e_j]``, sinusoidal
  encodings of the paragraph rank ``i`` and the token position ``j`` inside
  the paragraph (``d/2`` each);
* local layers (Eq. 11-12): transformer layers inside each paragraph, run on
  all paragraphs of the batch at once as ``[N, L]`` blocks, so memory grows
  with ``P * L^2`` rather than ``(P * L)^2``;
* global layers (Eq. 13-23): multi-head pooling of each paragraph,
  inter-paragraph attention per head, the fused context ``W_c [context^1; ...]``
  added to every token, then a feed-forward network with a residual and a
  layer norm. Optionally graph-informed heads (Eq. 24).

The decoder is fairseq's transformer decoder attending over the states of all
non-pad tokens of all paragraphs (the flat source order is the concatenation
of the paragraphs in rank order), so fairseq's SequenceGenerator, beam search,
length penalty and incremental decoding work unchanged. Its target positions
are Eq. 7-8's sinusoids from position 0 (``--decoder-position-encoding``);
``--decoder-output-bias``, ``--decoder-start-symbol bos``, ``--layernorm-eps``
and ``--no-source-special-tokens`` give the hiersumm code's generator bias,
``<S>`` start token, LayerNorm epsilon and special-token-free paragraphs, which
``--arch hiertransformer_hiersumm`` sets together with the code's dropouts, so
that this arch computes exactly what the authors' model computes
(``mdsfair-import hiersumm`` converts their released checkpoint).

Inputs come from task ``multidoc_summarization``: ``src_tokens``,
``src_para_ids`` (paragraph index = rank, since ``mdsfair-rank`` writes
paragraphs ranked) and, with ``--graph``, the side data
``src_graph_similarity`` / ``src_graph_discourse`` ``[B, P, P]``. The
``<s>`` document-start tokens and the final ``</s>`` of the data contract sit
inside the first / last paragraph of their document and are encoded like
words.
"""

import logging
from typing import Dict, List, Optional

import torch
from fairseq.models import FairseqEncoder, register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerModel
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from fairseq.modules import FairseqDropout, LayerNorm, TransformerEncoderLayer
from torch import Tensor, nn

from mdsfair.argument_types import at_least, number_between
from mdsfair.data.side_inputs import check_side_inputs
from mdsfair.models.flag_defaults import FlagDefaults, derived
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.modules.activation_checkpointing import checkpoint_layer
from mdsfair.modules.global_transformer_layer import GlobalTransformerLayer
from mdsfair.modules.paragraph_blocks import ParagraphBlocks
from mdsfair.modules.sinusoidal import ParagraphTokenPositionalEncoding, SinusoidalPositions

logger = logging.getLogger(__name__)

GRAPH_CHOICES = ("none", "similarity", "discourse")
DECODER_POSITION_ENCODINGS = ("interleaved", "fairseq")
DECODER_START_SYMBOLS = ("eos", "bos")
UNBOUNDED_SOURCE_POSITIONS = 10**9

#: The one source of the hiertransformer model's defaults
#: (:mod:`mdsfair.models.flag_defaults`): the paper's WikiSum model (Liu &
#: Lapata 2019, Section 4: d 256, 8 heads, feed-forward 1,024, 5 local + 2
#: global layers, dropout 0.1, shared embeddings, post-LN); the decoder depth,
#: which the paper does not give, is the 6 layers of its flat-transformer
#: baseline. The choices of the authors' code (hiersumm) are off here, as in
#: fairseq; ``hiertransformer_hiersumm`` turns them on.
DEFAULTS = FlagDefaults(
    {
        # fairseq's transformer flags that the architectures set
        "encoder_embed_dim": 256,
        "encoder_ffn_embed_dim": 1024,
        "encoder_attention_heads": 8,
        "encoder_normalize_before": False,
        "decoder_embed_dim": derived("--encoder-embed-dim", lambda args: args.encoder_embed_dim),
        "decoder_ffn_embed_dim": derived("--encoder-ffn-embed-dim", lambda args: args.encoder_ffn_embed_dim),
        "decoder_attention_heads": derived("--encoder-attention-heads", lambda args: args.encoder_attention_heads),
        "decoder_layers": 6,
        "decoder_normalize_before": False,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "share_all_embeddings": True,
        "share_decoder_input_output_embed": True,
        "no_scale_embedding": False,
        "max_source_positions": 1024,
        "max_target_positions": 1024,
        # the hierarchical encoder's flags
        "local_layers": 5,
        "global_layers": 2,
        "global_heads": derived("--encoder-attention-heads", lambda args: args.encoder_attention_heads),
        "no_paragraph_position": False,
        "token_position_first": False,
        "shared_inter_paragraph_attention": False,
        "no_pooling_head_projection": False,
        "graph": "none",
        "graph_heads": 1,
        "no_source_special_tokens": False,
        # the decoder's and every LayerNorm's
        "decoder_position_encoding": "interleaved",
        "decoder_output_bias": False,
        "decoder_start_symbol": "eos",
        "layernorm_eps": 1e-5,
    }
)


class HierarchicalTransformerEncoder(FairseqEncoder):
    """Local layers over paragraph blocks, then global layers (Section 3.2).

    ``--checkpoint-activations`` wraps every local and global layer (a global
    layer's :class:`ParagraphBlocks` argument holds only index tensors, which
    need no gradient, so fairseq's wrapper may pass it by reference).

    Returns fairseq's encoder-output dict over the flat source
    (``encoder_out [T, B, d]``, ``encoder_padding_mask [B, T]``), so the
    decoder attends over all non-pad tokens of all paragraphs.
    """

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(dictionary)
        embed_dim = embed_tokens.embedding_dim
        self.padding_idx = embed_tokens.padding_idx
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if args.no_scale_embedding else embed_dim**0.5
        self.embed_positions = ParagraphTokenPositionalEncoding(
            embed_dim,
            paragraph_position=not args.no_paragraph_position,
            token_position_first=args.token_position_first,
        )
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)
        self.graph = args.graph
        self.ignored_source_symbols = (
            sorted({dictionary.bos(), dictionary.eos()}) if args.no_source_special_tokens else []
        )
        self.local_layers = nn.ModuleList(
            [checkpoint_layer(TransformerEncoderLayer(args), args) for _ in range(args.local_layers)]
        )
        self.global_layers = nn.ModuleList(
            [checkpoint_layer(GlobalTransformerLayer(args), args) for _ in range(args.global_layers)]
        )
        self.layer_norm = LayerNorm(embed_dim) if args.encoder_normalize_before else None

    def forward_embedding(self, src_tokens: Tensor, blocks: ParagraphBlocks, paragraph_ids: Tensor) -> Tensor:
        """Eq. 10: ``x0_ij = w_ij + [e_i ; e_j]`` as ``[B, T, d]``."""
        word = self.embed_scale * self.embed_tokens(src_tokens)
        position = self.embed_positions(paragraph_ids.clamp(min=0), blocks.position_in_block)
        return self.dropout_module(word + position.type_as(word))

    def source_padding_mask(self, src_tokens: Tensor) -> Tensor:
        """``[B, T]`` True at the tokens the encoder does not read: padding
        and, with ``--no-source-special-tokens``, the data contract's ``<s>``
        and ``</s>``. A masked ``<s>`` opens its paragraph, so the paragraph's
        first word takes position 0 as if the ``<s>`` had not been inserted."""
        mask = src_tokens.eq(self.padding_idx)
        for symbol in self.ignored_source_symbols:
            mask = mask | src_tokens.eq(symbol)
        return mask

    def side_inputs(self) -> Dict[str, bool]:
        """Data-contract inputs this encoder reads: name -> required (the
        paragraph of every token; the paragraph graph that ``--graph``
        chooses; the other graph is handed over when the batch has it)."""
        return {
            "src_para_ids": True,
            "src_graph_similarity": self.graph == "similarity",
            "src_graph_discourse": self.graph == "discourse",
        }

    def graph_input(
        self, blocks: ParagraphBlocks, src_graph_similarity: Optional[Tensor], src_graph_discourse: Optional[Tensor]
    ) -> Optional[Tensor]:
        """The ``[B, P, P]`` graph of Eq. 24 over the batch's ``P`` paragraphs
        (the batch check made sure the ``--graph`` one is given and covers
        them), or None without ``--graph``."""
        if self.graph == "none":
            return None
        graph = src_graph_similarity if self.graph == "similarity" else src_graph_discourse
        num_paragraphs = blocks.num_paragraphs
        return graph[:, :num_paragraphs, :num_paragraphs]

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        src_para_ids: Optional[Tensor] = None,
        src_graph_similarity: Optional[Tensor] = None,
        src_graph_discourse: Optional[Tensor] = None,
    ) -> Dict[str, List[Tensor]]:
        """
        Args:
            src_tokens: ``[B, T]`` right-padded flat source.
            src_lengths: ``[B]`` (unused; padding is read from the tokens).
            src_para_ids: ``[B, T]`` paragraph (rank) of every token, -1 at pad.
            src_graph_similarity / src_graph_discourse: ``[B, P, P]`` graphs.

        The side inputs are checked once, here
        (:func:`~mdsfair.data.side_inputs.check_side_inputs`).
        """
        given = {
            "src_para_ids": src_para_ids,
            "src_graph_similarity": src_graph_similarity,
            "src_graph_discourse": src_graph_discourse,
        }
        check_side_inputs(
            src_tokens,
            {name: value for name, value in given.items() if value is not None},
            self.side_inputs(),
            "hiertransformer" + (f" --graph {self.graph}" if self.graph != "none" else ""),
            padding_mask=src_tokens.eq(self.padding_idx),
        )
        padding_mask = self.source_padding_mask(src_tokens)
        blocks = ParagraphBlocks.from_paragraph_ids(src_para_ids, ~padding_mask)
        graph = self.graph_input(blocks, src_graph_similarity, src_graph_discourse)
        x = self.forward_embedding(src_tokens, blocks, src_para_ids)
        block_padding_mask = blocks.block_padding_mask()
        x = blocks.to_blocks(x)  # [N, L, d]

        x = x.transpose(0, 1)  # fairseq layers are time-first: [L, N, d]
        for layer in self.local_layers:
            x = layer(x, encoder_padding_mask=block_padding_mask)
        x = x.transpose(0, 1)
        for layer in self.global_layers:
            x = layer(x, block_padding_mask, blocks, graph)
        if self.layer_norm is not None:
            x = self.layer_norm(x)

        x = blocks.to_flat(x).transpose(0, 1)  # [T, B, d], zeros at padding
        return {
            "encoder_out": [x],
            "encoder_padding_mask": [padding_mask],
            "encoder_embedding": [],
            "encoder_states": [],
            "src_tokens": [],
            "src_lengths": [(~padding_mask).sum(dim=1, dtype=torch.int32).reshape(-1, 1)],
        }

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Select beams/examples ``new_order`` (the flat memory is batch dim 1)."""
        return {
            "encoder_out": [encoder_out["encoder_out"][0].index_select(1, new_order)],
            "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)],
            "encoder_embedding": [],
            "encoder_states": [],
            "src_tokens": [],
            "src_lengths": [encoder_out["src_lengths"][0].index_select(0, new_order)],
        }

    def max_positions(self):
        """Sinusoidal rank and position encodings have no length limit, so
        the task's ``--max-source-positions`` / ``--max-paragraphs`` alone set
        the input size: a model trained on 1,600 tokens can be tested on
        3,000 (the paper's last row of Table 2)."""
        return UNBOUNDED_SOURCE_POSITIONS


class HierarchicalTransformerDecoder(TransformerDecoder):
    """fairseq's transformer decoder with the choices the hiersumm code makes.

    * ``--decoder-position-encoding interleaved`` (default): Eq. 7-8 target
      positions from 0 (:class:`~mdsfair.modules.sinusoidal.SinusoidalPositions`),
      as the paper's encoding and the hiersumm decoder; ``fairseq`` keeps
      fairseq's ``SinusoidalPositionalEmbedding``.
    * ``--decoder-output-bias``: the output projection ``W x + b`` has a bias
      (hiersumm's generator ``nn.Linear(d, V)``, whose weight alone is tied
      to the embeddings).
    * ``--decoder-start-symbol bos``: the first decoder input is ``<s>``
      instead of fairseq's ``</s>``; hiersumm's targets start with ``<S>``.
      Column 0 of ``prev_output_tokens`` is replaced in training and in
      (incremental) generation alike.
    """

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(
            args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn, output_projection=output_projection
        )
        if self.embed_positions is not None and args.decoder_position_encoding == "interleaved":
            if args.decoder_learned_pos:
                raise ValueError("--decoder-learned-pos and --decoder-position-encoding interleaved exclude each other")
            self.embed_positions = SinusoidalPositions(self.embed_dim)
        self.start_symbol = dictionary.bos() if args.decoder_start_symbol == "bos" else None

    def build_output_projection(self, args, dictionary, embed_tokens):
        super().build_output_projection(args, dictionary, embed_tokens)
        if not self.args.decoder_output_bias:
            return
        if self.adaptive_softmax is not None:
            raise ValueError("--decoder-output-bias does not apply to an adaptive softmax")
        weight = self.output_projection.weight
        projection = nn.Linear(weight.size(1), weight.size(0), bias=True)
        projection.weight = weight  # stays tied to the embeddings when it was
        nn.init.zeros_(projection.bias)
        self.output_projection = projection

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **kwargs):
        if self.start_symbol is not None:
            prev_output_tokens = prev_output_tokens.clone()
            prev_output_tokens[:, 0] = self.start_symbol
        return super().extract_features(prev_output_tokens, encoder_out, incremental_state, **kwargs)


def set_layer_norm_eps(model: nn.Module, eps: float) -> int:
    """Give every LayerNorm of ``model`` the epsilon ``eps``; returns how many
    there are. (fairseq builds its LayerNorms with 1e-5; hiersumm's have 1e-6.)"""
    count = 0
    for module in model.modules():
        if isinstance(module, nn.LayerNorm) or type(module).__name__ == "FusedLayerNorm":
            module.eps = eps
            count += 1
    return count


@register_model("hiertransformer")
class HierarchicalTransformerModel(MultiDocHubModel, TransformerModel):
    """Hierarchical Transformer encoder + fairseq transformer decoder."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = "Hierarchical Transformer (Liu & Lapata 2019) with graph-informed heads"

    def side_inputs(self):
        """Data-contract inputs this model reads: name -> required (its
        encoder's: the paragraphs and the ``--graph`` one)."""
        return self.encoder.side_inputs()

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument(
            "--local-layers",
            type=at_least(1),
            metavar="N",
            help="local transformer layers inside paragraphs (Eq. 11-12; Section 4)",
        )
        parser.add_argument(
            "--global-layers",
            type=at_least(0),
            metavar="N",
            help=(
                "global transformer layers across paragraphs on top of the local "
                "ones (Eq. 13-23; Section 4; 0 = Table 3's 'w/o GT')"
            ),
        )
        parser.add_argument(
            "--global-heads",
            type=at_least(1),
            metavar="N",
            help=("heads of multi-head pooling and inter-paragraph attention (1 = Table 3's 'w/o MP')"),
        )
        parser.add_argument(
            "--no-paragraph-position",
            action="store_true",
            help=(
                "encode only the token position inside the paragraph, over all d "
                "dimensions (Table 3's 'w/o PP'); the paper concatenates paragraph "
                "rank and token position"
            ),
        )
        parser.add_argument(
            "--token-position-first",
            action="store_true",
            help=(
                "lay out the position encoding as [e_j ; e_i] (token position "
                "first), as the hiersumm code does; the paper writes [e_i ; e_j] "
                "(Eq. 9)"
            ),
        )
        parser.add_argument(
            "--shared-inter-paragraph-attention",
            action="store_true",
            help=(
                "one single-head attention shared by all heads in the "
                "inter-paragraph attention (the hiersumm code); the paper has "
                "per-head W^z_q, W^z_k, W^z_v (Eq. 17-19)"
            ),
        )
        parser.add_argument(
            "--no-pooling-head-projection",
            action="store_true",
            help=("drop the per-head W^z_c of multi-head pooling (Eq. 16), as the hiersumm code does"),
        )
        parser.add_argument(
            "--graph",
            choices=GRAPH_CHOICES,
            help=(
                "graph-informed attention (Eq. 24): replace --graph-heads learned "
                "inter-paragraph heads with the row-normalised paragraph graph read "
                "from side data src_graph_similarity / src_graph_discourse "
                "(mdsfair-preprocess --side-data graph_similarity|graph_discourse)"
            ),
        )
        parser.add_argument(
            "--graph-heads",
            type=at_least(0),
            metavar="N",
            help=("learned heads the graph replaces in every global layer (Eq. 24; the default is the paper's)"),
        )
        parser.add_argument(
            "--decoder-position-encoding",
            choices=DECODER_POSITION_ENCODINGS,
            help=(
                "target positions: 'interleaved' = Eq. 7-8 (sin at even, cos at "
                "odd dimensions, frequency 10000^(-2i/d), first token at position "
                "0), as the paper and the hiersumm decoder; 'fairseq' = fairseq's "
                "SinusoidalPositionalEmbedding (sin half then cos half, from "
                "position 2)"
            ),
        )
        parser.add_argument(
            "--decoder-output-bias",
            action="store_true",
            help=("give the output projection a bias (its weight stays tied), as hiersumm's generator nn.Linear(d, V)"),
        )
        parser.add_argument(
            "--decoder-start-symbol",
            choices=DECODER_START_SYMBOLS,
            help=("first decoder input: fairseq's </s> (eos) or <s> (bos), as hiersumm's targets start with <S>"),
        )
        parser.add_argument(
            "--layernorm-eps",
            type=number_between(0, 1, low_inclusive=False),
            metavar="EPS",
            help=("epsilon of every LayerNorm (the default is fairseq's; hiersumm 1e-6)"),
        )
        parser.add_argument(
            "--no-source-special-tokens",
            action="store_true",
            help=(
                "the encoder skips the data contract's <s> / </s> source tokens "
                "(masked like padding, which equals removing them), so it reads "
                "exactly the paragraphs, as the hiersumm code"
            ),
        )

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)
        if args.global_heads < 1 or args.encoder_embed_dim % args.global_heads:
            raise ValueError(
                f"--global-heads {args.global_heads} must be positive and divide --encoder-embed-dim "
                f"{args.encoder_embed_dim}"
            )
        if args.graph != "none" and not 1 <= args.graph_heads <= args.global_heads:
            raise ValueError(f"--graph-heads must be between 1 and --global-heads ({args.global_heads})")
        if args.graph != "none" and args.global_layers == 0:
            raise ValueError("--graph needs at least one global layer (--global-layers)")
        if args.encoder_layers_to_keep:
            raise ValueError("--encoder-layers-to-keep is not supported by hiertransformer")
        model = super().build_model(args, task)
        set_layer_norm_eps(model, args.layernorm_eps)
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return HierarchicalTransformerEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return HierarchicalTransformerDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=args.no_cross_attention)

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor,
        prev_output_tokens: Tensor,
        src_para_ids: Optional[Tensor] = None,
        src_graph_similarity: Optional[Tensor] = None,
        src_graph_discourse: Optional[Tensor] = None,
        features_only: bool = False,
    ):
        encoder_out = self.encoder(
            src_tokens,
            src_lengths=src_lengths,
            src_para_ids=src_para_ids,
            src_graph_similarity=src_graph_similarity,
            src_graph_discourse=src_graph_discourse,
        )
        return self.decoder(
            prev_output_tokens, encoder_out=encoder_out, features_only=features_only, src_lengths=src_lengths
        )


@register_model_architecture("hiertransformer", "hiertransformer")
def base_architecture(args):
    """The paper's WikiSum model (Section 4): d 256, 8 heads, feed-forward
    1,024, 5 local + 2 global layers, dropout 0.1, shared embeddings, post-LN
    (:data:`DEFAULTS`). The paper does not give the decoder depth; we use the
    6 layers of its flat transformer baseline."""
    DEFAULTS.fill(args)
    # not a default: fairseq's encoder depth is always the two stacks together
    args.encoder_layers = args.local_layers + args.global_layers
    transformer_base_architecture(args)


@register_model_architecture("hiertransformer", "hiertransformer_hiersumm")
def hiersumm_architecture(args):
    """The model of the authors' released code (hiersumm, README command
    ``-enc_layers 8 -inter_layers 6,7 -dec_layers 1 -enc_dropout 0.1
    -dec_dropout 0.1``): 6 local + 2 global layers, a 1-layer decoder, pre-LN
    everywhere with LayerNorm eps 1e-6, one inter-paragraph attention shared
    by the heads, no per-head pooling projection, position layout
    [e_j ; e_i], dropout 0.1 on residuals, attention weights and the
    feed-forward inner activation, Eq. 7-8 decoder positions from 0, a
    generator bias, ``<S>`` (bos) as the first decoder input, and paragraphs
    read without ``<s>`` / ``</s>``."""
    DEFAULTS.fill(
        args,
        local_layers=6,
        decoder_layers=1,
        encoder_normalize_before=True,
        decoder_normalize_before=True,
        shared_inter_paragraph_attention=True,
        no_pooling_head_projection=True,
        token_position_first=True,
        attention_dropout=0.1,
        activation_dropout=0.1,
        decoder_output_bias=True,
        decoder_start_symbol="bos",
        layernorm_eps=1e-6,
        no_source_special_tokens=True,
    )
    base_architecture(args)


@register_model_architecture("hiertransformer", "hiertransformer_tiny")
def tiny_architecture(args):
    """For tests: d 32, 4 heads, feed-forward 64, 2 local + 1 global layers,
    2 decoder layers."""
    DEFAULTS.fill(
        args,
        encoder_embed_dim=32,
        encoder_ffn_embed_dim=64,
        encoder_attention_heads=4,
        local_layers=2,
        global_layers=1,
        decoder_layers=2,
    )
    base_architecture(args)
