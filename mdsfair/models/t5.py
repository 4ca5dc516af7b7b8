"""T5 v1.1 (Raffel et al. 2020, Sec. 2.1 and 3.1; the v1.1 changes of
google-research/text-to-text-transfer-transformer's released checkpoints)
as an mdsfair encoder-decoder, ``--arch t5_v1_1_{small,base,large}``, equal
to Hugging Face's ``T5ForConditionalGeneration`` on the weights
``mdsfair-import hf-t5`` converts (:mod:`mdsfair.importers.hf_t5`).

The layers (:mod:`mdsfair.modules.t5_layers`): pre-norm RMS layer norms, no
biases, attention without score scaling, the gated-GELU feed-forward, and
one bucketed relative position bias per stack (bidirectional in the encoder,
causal in the decoder) computed once and added in every layer; the token
embeddings are not scaled and are shared by encoder and decoder; the output
layer is its own matrix (v1.1 unties it); each stack ends with a layer norm
and dropout.

**Vocabulary.** T5's SentencePiece vocabulary has ``<pad>`` 0, ``</s>`` 1,
``<unk>`` 2 and no ``<s>``. A fairseq dictionary (``dict.txt``, as every
data-bin, task and the hub load it) always starts ``<s> <pad> </s> <unk>``,
so the imported dictionary is T5's vocabulary shifted by one: fairseq index
``i + 1`` is Hugging Face id ``i``, and index 0 is fairseq's ``<s>``, which T5
never predicts: its logit is set 100 below the lowest logit of the step
(a probability under ``e^-100`` of the least likely token's, below float64's
resolution of the others' log-probabilities), with no gradient.

**Decoding starts from** ``<pad>``, T5's ``decoder_start_token_id``: the
decoder reads the first token of every target row (fairseq's ``</s>``, which
the task's collater and both generators put there) as ``<pad>``. The decoder
masks no padding of its own input (T5's does not): a row's padding comes
after its tokens and the attention is causal.

**LongT5** (Guo et al. 2022), ``--arch longt5_{tglobal,local}_base``,
``longt5_tglobal_large``, equal to Hugging Face's
``LongT5ForConditionalGeneration`` on the weights ``mdsfair-import
hf-longt5`` converts: T5 v1.1 whose encoder self-attention is local or
transient-global (``--encoder-self-attention``, Sec. 2.1;
:mod:`mdsfair.modules.longt5_attention`: ``--local-radius`` 127,
``--global-block-size`` 16) over up to 16,384 source tokens, and whose
output layer is the token embedding (``--share-decoder-input-output-embed``),
not scaled. Its encoder reads each source row from its first token
(:func:`~mdsfair.modules.longt5_attention.right_padded`), since its blocks
start there.
"""

from typing import Dict, List, Optional

import torch
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from torch import Tensor, nn
from torch.nn import functional as F

from mdsfair.argument_types import at_least, number_between
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.t5_component_flags import add_refused_component_args, own_role_choice, refuse_component_flags
from mdsfair.models.tiny_dimensions import TINY_DIMENSIONS
from mdsfair.modules.activation_checkpointing import add_activation_checkpointing_args, checkpoint_layer
from mdsfair.modules.longt5_attention import (
    ENCODER_SELF_ATTENTION_KINDS,
    encoder_position_bias,
    encoder_self_attention,
    right_padded,
)
from mdsfair.modules.t5_layers import (
    FEED_FORWARD_KINDS,
    RelativePositionBias,
    T5DecoderLayer,
    T5EncoderLayer,
    T5LayerNorm,
    attention_bias,
)

#: How far below the step's lowest logit the never-predicted ``<s>`` lies.
ABSENT_TOKEN_MARGIN = 100.0

#: The one source of the t5_v1_1 model's defaults (:mod:`mdsfair.models.flag_defaults`):
#: google/t5-v1_1-base's config.json.
DEFAULTS = FlagDefaults(
    {
        "encoder_embed_dim": 768,
        "encoder_ffn_embed_dim": 2048,
        "encoder_attention_heads": 12,
        "encoder_layers": 12,
        "decoder_layers": 12,
        "attention_head_dim": 64,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "t5_feed_forward": "gated-gelu",
        "encoder_self_attention": "full",
        "local_radius": 127,
        "global_block_size": 16,
        "share_decoder_input_output_embed": False,
        "layer_norm_eps": 1e-6,
        "dropout": 0.1,
        "max_source_positions": 1024,
        "max_target_positions": 1024,
        "checkpoint_activations": False,
        "offload_activations": False,
    }
)


class T5Encoder(FairseqEncoder):
    """Embedding, dropout, the layers with the stack's bidirectional position
    bias (LongT5: its blocked biases, on the rows right-padded), final layer
    norm and dropout."""

    def __init__(self, args, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.padding_idx = dictionary.pad()
        self.dropout = args.dropout
        self.heads = args.encoder_attention_heads
        self.max_source_positions = args.max_source_positions
        self.blocked = args.encoder_self_attention != "full"
        self.position_bias = encoder_position_bias(args)
        self.layers = nn.ModuleList(
            [
                checkpoint_layer(T5EncoderLayer(args, encoder_self_attention(args)), args, structured=self.blocked)
                for _ in range(args.encoder_layers)
            ]
        )
        self.layer_norm = T5LayerNorm(args.encoder_embed_dim, args.layer_norm_eps)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None):
        padding_mask = src_tokens.eq(self.padding_idx)
        if self.blocked:
            src_tokens, padding_mask = right_padded(src_tokens, padding_mask)
        x = F.dropout(self.embed_tokens(src_tokens), p=self.dropout, training=self.training)
        length = src_tokens.size(1)
        if self.blocked:
            bias = self.position_bias(padding_mask, x.dtype)
        else:
            bias = attention_bias(self.position_bias(length, length), x, padding_mask[:, None, None, :], self.heads)
        for layer in self.layers:
            x = layer(x, bias)
        x = F.dropout(self.layer_norm(x), p=self.dropout, training=self.training)
        return {
            "encoder_out": [x.transpose(0, 1)],  # T x B x C, as fairseq's encoders
            "encoder_padding_mask": [padding_mask],
            "encoder_embedding": [],
            "encoder_states": [],
            "src_tokens": [],
            "src_lengths": [],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        return {
            "encoder_out": [encoder_out["encoder_out"][0].index_select(1, new_order)],
            "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)],
            "encoder_embedding": [],
            "encoder_states": [],
            "src_tokens": [],
            "src_lengths": [],
        }

    def max_positions(self) -> int:
        return self.max_source_positions


class T5Decoder(FairseqIncrementalDecoder):
    """Embedding of the targets (their first token read as ``<pad>``),
    the layers with the stack's causal position bias and the encoder's
    padding mask, final layer norm, dropout, and the untied output layer."""

    def __init__(self, args, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.start_index = dictionary.pad()
        self.absent_index = dictionary.bos()
        self.dropout = args.dropout
        self.heads = args.decoder_attention_heads
        self.max_target_positions = args.max_target_positions
        self.position_bias = RelativePositionBias(
            self.heads, args.relative_attention_num_buckets, args.relative_attention_max_distance, bidirectional=False
        )
        self.layers = nn.ModuleList([checkpoint_layer(T5DecoderLayer(args), args) for _ in range(args.decoder_layers)])
        self.layer_norm = T5LayerNorm(args.decoder_embed_dim, args.layer_norm_eps)
        self.output_projection = nn.Linear(args.decoder_embed_dim, len(dictionary), bias=False)

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Dict[str, List[Tensor]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        **unused,
    ):
        x = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, {"attn": [None], "inner_states": None}

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **unused) -> Tensor:
        tokens = prev_output_tokens.clone()
        tokens[:, 0] = self.start_index
        caches: Optional[List[Dict[str, Dict[str, Tensor]]]] = None
        past = 0
        if incremental_state is not None:
            caches = self.caches(incremental_state)
            past = caches[0]["self"]["key"].size(2) if caches[0] else 0
            tokens = tokens[:, past:]
        x = F.dropout(self.embed_tokens(tokens), p=self.dropout, training=self.training)
        queries, keys = tokens.size(1), past + tokens.size(1)
        key_positions = torch.arange(keys, device=tokens.device)
        future = key_positions[None, :] > key_positions[past:, None]
        self_bias = attention_bias(self.position_bias(queries, keys, past), x, future[None, None], self.heads)
        encoder_states = encoder_out["encoder_out"][0].transpose(0, 1)
        source_padding = encoder_out["encoder_padding_mask"][0][:, None, None, :]
        cross_bias = attention_bias(None, x, source_padding, self.heads)
        for index, layer in enumerate(self.layers):
            x = layer(x, self_bias, encoder_states, cross_bias, caches[index] if caches is not None else None)
        if caches is not None:
            self.set_incremental_state(incremental_state, "cache", self.flat_cache(caches))
        return F.dropout(self.layer_norm(x), p=self.dropout, training=self.training)

    def caches(self, incremental_state) -> List[Dict[str, Dict[str, Tensor]]]:
        """Each layer's ``{"self": {key, value}, "cross": {key, value}}`` from
        the flat incremental state (``"3.self.key"``; empty at the first step)."""
        state = self.get_incremental_state(incremental_state, "cache") or {}
        caches: List[Dict[str, Dict[str, Tensor]]] = [{} for _ in self.layers]
        for name, value in state.items():
            index, part, tensor = name.split(".")
            caches[int(index)].setdefault(part, {})[tensor] = value
        return caches

    @staticmethod
    def flat_cache(caches: List[Dict[str, Dict[str, Tensor]]]) -> Dict[str, Tensor]:
        return {
            f"{index}.{part}.{name}": value
            for index, cache in enumerate(caches)
            for part, tensors in cache.items()
            for name, value in tensors.items()
        }

    def output_layer(self, features: Tensor) -> Tensor:
        logits = self.output_projection(features)
        lowest = logits.detach().min(dim=-1).values - ABSENT_TOKEN_MARGIN
        return logits.index_copy(-1, logits.new_tensor([self.absent_index], dtype=torch.long), lowest.unsqueeze(-1))

    def max_positions(self) -> int:
        return self.max_target_positions

    def reorder_incremental_state(self, incremental_state, new_order: Tensor) -> None:
        state = self.get_incremental_state(incremental_state, "cache")
        if state:
            reordered = {name: value.index_select(0, new_order) for name, value in state.items()}
            self.set_incremental_state(incremental_state, "cache", reordered)


@register_model("t5_v1_1")
class T5Model(MultiDocHubModel, FairseqEncoderDecoderModel):
    """T5 v1.1 (Raffel et al. 2020) as Hugging Face's T5ForConditionalGeneration
    computes it; import a Hugging Face folder with ``mdsfair-import hf-t5``."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = "T5 v1.1 (Raffel et al. 2020): imported from Hugging Face with mdsfair-import hf-t5"

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        parser.add_argument("--encoder-embed-dim", type=at_least(1), metavar="N", help="model dimension d_model")
        parser.add_argument(
            "--encoder-ffn-embed-dim", type=at_least(1), metavar="N", help="hidden size d_ff of the feed-forward"
        )
        parser.add_argument("--encoder-attention-heads", type=at_least(1), metavar="N", help="attention heads")
        parser.add_argument("--encoder-layers", type=at_least(1), metavar="N", help="encoder layers")
        parser.add_argument("--decoder-layers", type=at_least(1), metavar="N", help="decoder layers")
        parser.add_argument(
            "--attention-head-dim", type=at_least(1), metavar="N", help="width d_kv of one attention head"
        )
        parser.add_argument(
            "--relative-attention-num-buckets",
            type=at_least(2),
            metavar="N",
            help="buckets of the relative position bias, half of them for exact offsets",
        )
        parser.add_argument(
            "--relative-attention-max-distance",
            type=at_least(1),
            metavar="N",
            help="offsets from this distance on share the last bucket of the relative position bias",
        )
        parser.add_argument(
            "--t5-feed-forward",
            choices=FEED_FORWARD_KINDS,
            help="feed-forward block: relu (T5) or gated-gelu (T5 v1.1, tanh GELU)",
        )
        parser.add_argument(
            "--encoder-self-attention",
            type=own_role_choice("encoder_self_attention", ENCODER_SELF_ATTENTION_KINDS),
            choices=ENCODER_SELF_ATTENTION_KINDS,
            help="encoder self-attention: full (T5), or LongT5's local or transient-global (Guo et al. 2022, Sec. 2.1)",
        )
        parser.add_argument(
            "--local-radius",
            type=at_least(1),
            metavar="R",
            help="LongT5: each token attends to the tokens within R positions of it (blocks of R + 1 tokens)",
        )
        parser.add_argument(
            "--global-block-size",
            type=at_least(1),
            metavar="K",
            help="LongT5 transient-global: one global token per block of K tokens, the sum of their states",
        )
        parser.add_argument(
            "--share-decoder-input-output-embed",
            action="store_true",
            default=None,
            help="the output layer is the token embedding, unscaled (LongT5), not its own matrix (T5 v1.1)",
        )
        parser.add_argument("--layer-norm-eps", type=float, metavar="EPS", help="epsilon of the RMS layer norms")
        parser.add_argument(
            "--dropout",
            type=number_between(0, 1, high_inclusive=False),
            metavar="P",
            help="dropout of the embeddings, attention probabilities, sub-layer outputs and feed-forward",
        )
        add_activation_checkpointing_args(parser)
        add_refused_component_args(parser)

    @classmethod
    def build_model(cls, args, task):
        t5_v1_1_base_architecture(args)
        refuse_component_flags(args, own=tuple(DEFAULTS))
        # one model dimension: the decoder's sizes are the encoder's
        args.decoder_embed_dim = args.encoder_embed_dim
        args.decoder_ffn_embed_dim = args.encoder_ffn_embed_dim
        args.decoder_attention_heads = args.encoder_attention_heads
        if task.source_dictionary != task.target_dictionary:
            raise ValueError("T5 shares one embedding between encoder and decoder: it needs one dictionary for both")
        dictionary = task.target_dictionary
        embed_tokens = nn.Embedding(len(dictionary), args.encoder_embed_dim)
        nn.init.normal_(embed_tokens.weight, mean=0.0, std=1.0)
        model = cls(T5Encoder(args, dictionary, embed_tokens), T5Decoder(args, dictionary, embed_tokens))
        if args.share_decoder_input_output_embed:
            model.decoder.output_projection.weight = embed_tokens.weight
        else:
            nn.init.normal_(model.decoder.output_projection.weight, mean=0.0, std=args.encoder_embed_dim**-0.5)
        return model


@register_model("longt5")
class LongT5Model(T5Model):
    """LongT5 (Guo et al. 2022) as Hugging Face's LongT5ForConditionalGeneration
    computes it (module docstring); import a Hugging Face folder with
    ``mdsfair-import hf-longt5``."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = (
        "LongT5 (Guo et al. 2022): T5 with local or transient-global encoder attention, "
        "imported from Hugging Face with mdsfair-import hf-longt5"
    )

    @classmethod
    def build_model(cls, args, task):
        longt5_tglobal_base_architecture(args)
        return super().build_model(args, task)


@register_model_architecture("t5_v1_1", "t5_v1_1_base")
def t5_v1_1_base_architecture(args):
    """google/t5-v1_1-base: d_model 768, d_ff 2,048, 12 heads of 64, 12 + 12 layers."""
    DEFAULTS.fill(args)


@register_model_architecture("t5_v1_1", "t5_v1_1_small")
def t5_v1_1_small_architecture(args):
    """google/t5-v1_1-small: d_model 512, d_ff 1,024, 6 heads of 64, 8 + 8 layers."""
    DEFAULTS.fill(
        args,
        encoder_embed_dim=512,
        encoder_ffn_embed_dim=1024,
        encoder_attention_heads=6,
        encoder_layers=8,
        decoder_layers=8,
    )


@register_model_architecture("t5_v1_1", "t5_v1_1_large")
def t5_v1_1_large_architecture(args):
    """google/t5-v1_1-large: d_model 1,024, d_ff 2,816, 16 heads of 64, 24 + 24 layers."""
    DEFAULTS.fill(
        args,
        encoder_embed_dim=1024,
        encoder_ffn_embed_dim=2816,
        encoder_attention_heads=16,
        encoder_layers=24,
        decoder_layers=24,
    )


def tiny_architecture(args, **values) -> None:
    """Tiny dimensions for tests (d 32, 4 heads of 8, d_ff 64, 2 + 2 layers),
    8 buckets up to distance 16, so that the tests' sequences reach the
    logarithmic buckets (one model dimension: no decoder sizes of its own);
    ``values``: the architecture's other flags."""
    for name in ("encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads", "encoder_layers"):
        setattr(args, name, getattr(args, name, TINY_DIMENSIONS[name]))
    args.decoder_layers = getattr(args, "decoder_layers", TINY_DIMENSIONS["decoder_layers"])
    DEFAULTS.fill(
        args, attention_head_dim=8, relative_attention_num_buckets=8, relative_attention_max_distance=16, **values
    )


@register_model_architecture("t5_v1_1", "t5_v1_1_tiny")
def t5_v1_1_tiny_architecture(args):
    """:func:`tiny_architecture`."""
    tiny_architecture(args)


#: what every LongT5 release shares (google/long-t5-*'s config.json): the
#: output layer is the embedding; 16,384 source tokens, the paper's longest inputs
LONGT5 = {"share_decoder_input_output_embed": True, "max_source_positions": 16384}
#: google/long-t5-*-large: d_model 1,024, d_ff 2,816, 16 heads of 64, 24 + 24 layers
LONGT5_LARGE = {
    "encoder_embed_dim": 1024,
    "encoder_ffn_embed_dim": 2816,
    "encoder_attention_heads": 16,
    "encoder_layers": 24,
    "decoder_layers": 24,
}


@register_model_architecture("longt5", "longt5_tglobal_base")
def longt5_tglobal_base_architecture(args):
    """google/long-t5-tglobal-base: T5 v1.1 base's sizes (d_model 768, d_ff
    2,048, 12 heads of 64, 12 + 12 layers), transient-global attention with
    radius 127 and global blocks of 16."""
    DEFAULTS.fill(args, encoder_self_attention="transient-global", **LONGT5)


@register_model_architecture("longt5", "longt5_local_base")
def longt5_local_base_architecture(args):
    """google/long-t5-local-base: T5 v1.1 base's sizes, local attention with radius 127."""
    DEFAULTS.fill(args, encoder_self_attention="local", **LONGT5)


@register_model_architecture("longt5", "longt5_tglobal_large")
def longt5_tglobal_large_architecture(args):
    """google/long-t5-tglobal-large: :data:`LONGT5_LARGE`, transient-global attention."""
    DEFAULTS.fill(args, encoder_self_attention="transient-global", **LONGT5, **LONGT5_LARGE)


@register_model_architecture("longt5", "longt5_tiny")
def longt5_tiny_architecture(args):
    """:func:`tiny_architecture` with transient-global attention, radius 3
    and global blocks of 4, so that the tests' sources span many blocks (the
    model's ``_tiny``, whose sizes the model contract runs every ``longt5``
    architecture at)."""
    tiny_architecture(args, encoder_self_attention="transient-global", local_radius=3, global_block_size=4, **LONGT5)


@register_model_architecture("longt5", "longt5_local_tiny")
def longt5_local_tiny_architecture(args):
    """:func:`tiny_architecture` with local attention of radius 3."""
    tiny_architecture(args, encoder_self_attention="local", local_radius=3, **LONGT5)
