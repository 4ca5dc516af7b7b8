"""T-DMCA (Liu et al., ICLR 2018, "Generating Wikipedia by Summarizing Long
Sequences", Sec. 4.2.3): a decoder-only Transformer with memory-compressed
attention, ``--arch tdmca``.

The encoder is dropped: a cluster's source tokens ``x`` and its summary ``y``
form one sequence ``[x ; </s> ; y]``, and one stack of causal self-attention
layers predicts every next token of it as a language model; the loss is
taken on the summary only, as the authors' tensor2tensor code weights the
labels (``weights_prepend_inputs_to_targets``: the targets past the
separator). Generation continues the sequence after the separator.

Its layers alternate two causal self-attentions (``--layer-pattern``
``LMLML``, five layers: tensor2tensor's ``locm/redm/locm-moe/redm/locm`` of
``transformer_moe_prepend_8k``, its decoder-only hyper-parameters over
prepended inputs, without the mixture of experts):

* ``L``, local attention within blocks of 256 tokens and the previous block
  (:mod:`mdsfair.modules.local_attention`; tensor2tensor's
  ``attention_loc_block_length``);
* ``M``, memory-compressed attention over keys and values shortened by a
  strided convolution of kernel and stride 3 (tensor2tensor's
  ``attention_red_factor`` and ``conv_elems_1d``)
  (:mod:`mdsfair.modules.memory_compressed_attention`);
* ``F``, full causal attention: ``FFFFF``, a Transformer decoder (T-D), the
  baseline the memory-compressed layers are measured against.

Each layer is pre-layer-norm (tensor2tensor's ``layer_preprocess_sequence``
``n``, ``layer_postprocess_sequence`` ``da``) with a ReLU feed-forward;
token embeddings are scaled by ``sqrt(d)`` and shared with the output
projection; positions are sinusoidal (Vaswani et al. 2017), counted from the
first source token. Sizes are those Liu & Lapata (2019, Sec. 4) state for
their T-DMCA baseline (5 layers, hidden size 512, feed-forward 2,048), with
tensor2tensor's ``transformer_base`` 8 heads and dropout 0.1; not
``transformer_moe_prepend_8k``'s (hidden size 1,024, masked separable
convolutions as feed-forward blocks, a 256-expert mixture of experts in the
third layer), which this model does not build.

Inside fairseq the model is an encoder-decoder whose encoder holds no
parameters and hands the source tokens to the decoder: ``fairseq-train``,
``fairseq-generate``, the task's generators and the hub run it unchanged.
The decoder packs each row as ``[source (its real tokens) ; previous output
tokens]`` (the previous output tokens start with ``</s>``, the separator),
so padding never sits between a row's tokens and the blocks and compression
windows do not depend on the batch; it returns the outputs at the summary
positions. Incremental decoding caches each layer's keys and values
(local) or compressed slots (memory-compressed) with their positions.
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
from fairseq.modules import LayerNorm
from torch import Tensor, nn
from torch.nn import functional as F

from mdsfair.argument_types import at_least, number_between
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.tiny_dimensions import TINY_DIMENSIONS
from mdsfair.modules.activation_checkpointing import add_activation_checkpointing_args, checkpoint_layer
from mdsfair.modules.local_attention import CausalLocalSelfAttention
from mdsfair.modules.memory_compressed_attention import CausalMemoryCompressedSelfAttention
from mdsfair.modules.sinusoidal import sinusoidal_encoding

#: ``--layer-pattern`` letters: local and memory-compressed attention
LAYER_KINDS = {"L": "local", "M": "memory-compressed", "F": "full"}

#: The one source of the tdmca model's defaults (:mod:`mdsfair.models.flag_defaults`).
DEFAULTS = FlagDefaults(
    {
        "decoder_embed_dim": 512,
        "decoder_ffn_embed_dim": 2048,
        "decoder_attention_heads": 8,
        "layer_pattern": "LMLML",
        "block_length": 256,
        "compression_factor": 3,
        "dropout": 0.1,
        "attention_dropout": 0.1,
        "activation_dropout": 0.1,
        "checkpoint_activations": False,
        "offload_activations": False,
    }
)


def layer_pattern(text: str) -> str:
    """``--layer-pattern``: a non-empty string of ``L``, ``M`` and ``F``."""
    pattern = text.strip().upper()
    if not pattern or set(pattern) - set(LAYER_KINDS):
        raise ValueError(
            f"--layer-pattern takes letters L (local), M (memory-compressed) and F (full attention), got {text!r}"
        )
    return pattern


class SourcePassingEncoder(FairseqEncoder):
    """T-DMCA has no encoder: this one hands the source tokens and their
    lengths to the decoder (and reorders them for beam search)."""

    def __init__(self, dictionary, max_source_positions: int):
        super().__init__(dictionary)
        self.max_source_positions = max_source_positions

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None):
        return {"src_tokens": [src_tokens], "src_lengths": [src_tokens.ne(self.dictionary.pad()).sum(dim=1)]}

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        return {name: [value[0].index_select(0, new_order)] for name, value in encoder_out.items()}

    def max_positions(self) -> int:
        return self.max_source_positions


class TDMCALayer(nn.Module):
    """One pre-layer-norm layer: ``x + Attention(LN(x))`` then
    ``x + FFN(LN(x))`` with a local (``L``), memory-compressed (``M``) or
    full (``F``) causal self-attention."""

    def __init__(self, args, kind: str):
        super().__init__()
        dim = args.decoder_embed_dim
        if kind in ("L", "F"):
            block_length = args.block_length if kind == "L" else None
            self.self_attn = CausalLocalSelfAttention(
                dim, args.decoder_attention_heads, block_length, dropout=args.attention_dropout
            )
        else:
            self.self_attn = CausalMemoryCompressedSelfAttention(
                dim, args.decoder_attention_heads, args.compression_factor, dropout=args.attention_dropout
            )
        self.self_attn_layer_norm = LayerNorm(dim)
        self.fc1 = nn.Linear(dim, args.decoder_ffn_embed_dim)
        self.fc2 = nn.Linear(args.decoder_ffn_embed_dim, dim)
        self.final_layer_norm = LayerNorm(dim)
        self.dropout, self.activation_dropout = args.dropout, args.activation_dropout

    def forward(
        self,
        x: Tensor,
        cache: Optional[Dict[str, Tensor]] = None,
        lengths: Optional[Tensor] = None,
        position: Optional[Tensor] = None,
    ) -> Tensor:
        """Full pass (``position`` None; an empty ``cache`` is filled for the
        steps) or one incremental step at ``position``."""
        normed = self.self_attn_layer_norm(x)
        if position is None:
            attended = self.self_attn(normed, cache=cache, lengths=lengths)
        else:
            attended = self.self_attn.step(normed, position, cache)
        x = x + F.dropout(attended, p=self.dropout, training=self.training)
        hidden = F.dropout(
            F.relu(self.fc1(self.final_layer_norm(x))), p=self.activation_dropout, training=self.training
        )
        return x + F.dropout(self.fc2(hidden), p=self.dropout, training=self.training)


class TDMCADecoder(FairseqIncrementalDecoder):
    """The decoder-only stack over ``[source ; previous output tokens]``
    (see the module docstring)."""

    def __init__(self, args, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.embed_dim = args.decoder_embed_dim
        self.padding_idx = dictionary.pad()
        self.embed_scale = self.embed_dim**0.5
        self.dropout = args.dropout
        self.max_target_positions = args.max_target_positions
        self.layers = nn.ModuleList([checkpoint_layer(TDMCALayer(args, kind), args) for kind in args.layer_pattern])
        self.layer_norm = LayerNorm(self.embed_dim)

    def embed(self, tokens: Tensor, positions: Tensor) -> Tensor:
        x = self.embed_scale * self.embed_tokens(tokens)
        x = x + sinusoidal_encoding(positions, self.embed_dim).to(x.dtype)
        return F.dropout(x, p=self.dropout, training=self.training)

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
        src_tokens, src_lengths = encoder_out["src_tokens"][0], encoder_out["src_lengths"][0]
        state = self.get_incremental_state(incremental_state, "cache") if incremental_state is not None else None
        if state:
            return self.step(prev_output_tokens, src_lengths, state, incremental_state)
        batch, target_length = prev_output_tokens.shape
        # [source ; previous output tokens] packed per row from position 0
        tokens = F.pad(src_tokens, (0, target_length), value=self.padding_idx)
        target_columns = src_lengths.unsqueeze(1) + torch.arange(target_length, device=tokens.device)
        tokens = tokens.scatter(1, target_columns, prev_output_tokens)
        positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
        x = self.embed(tokens, positions)
        caches: Optional[List[Dict[str, Tensor]]] = None
        if incremental_state is not None:
            caches = [{} for _ in self.layers]
        lengths = src_lengths + target_length
        for index, layer in enumerate(self.layers):
            x = layer(x, cache=caches[index] if caches is not None else None, lengths=lengths)
        x = self.layer_norm(x)
        if caches is not None:
            state = {f"{index}.{name}": value for index, cache in enumerate(caches) for name, value in cache.items()}
            state["target_length"] = src_lengths.new_full((batch,), target_length)
            self.set_incremental_state(incremental_state, "cache", state)
        return x.gather(1, target_columns.unsqueeze(-1).expand(-1, -1, self.embed_dim))

    def step(self, prev_output_tokens, src_lengths, state, incremental_state) -> Tensor:
        """The last token of ``prev_output_tokens``, at position ``source
        length + target tokens so far``."""
        position = src_lengths + state["target_length"]
        x = self.embed(prev_output_tokens[:, -1:], position.unsqueeze(1))
        for index, layer in enumerate(self.layers):
            prefix = f"{index}."
            cache = {name[len(prefix) :]: value for name, value in state.items() if name.startswith(prefix)}
            x = layer(x, cache=cache, position=position)
            state.update({prefix + name: value for name, value in cache.items()})
        state["target_length"] = state["target_length"] + 1
        self.set_incremental_state(incremental_state, "cache", state)
        return self.layer_norm(x)

    def output_layer(self, features: Tensor) -> Tensor:
        return F.linear(features, self.embed_tokens.weight)

    def max_positions(self) -> int:
        return self.max_target_positions

    def reorder_incremental_state(self, incremental_state, new_order: Tensor) -> None:
        state = self.get_incremental_state(incremental_state, "cache")
        if state:
            reordered = {name: value.index_select(0, new_order) for name, value in state.items()}
            self.set_incremental_state(incremental_state, "cache", reordered)


@register_model("tdmca")
class TDMCAModel(MultiDocHubModel, FairseqEncoderDecoderModel):
    """T-DMCA (Liu et al. 2018): a decoder-only Transformer with local and
    memory-compressed attention. Train on ``--task multidoc_summarization``."""

    #: torch.hub entry point (hubconf.py) of this family
    hub_description = "T-DMCA (Liu et al. 2018): decoder-only Transformer with local and memory-compressed attention"

    @staticmethod
    @DEFAULTS.documented
    def add_args(parser):
        parser.add_argument("--decoder-embed-dim", type=at_least(1), metavar="N", help="model dimension d")
        parser.add_argument(
            "--decoder-ffn-embed-dim", type=at_least(1), metavar="N", help="hidden size of the feed-forward blocks"
        )
        parser.add_argument("--decoder-attention-heads", type=at_least(1), metavar="N", help="attention heads")
        parser.add_argument(
            "--layer-pattern",
            type=layer_pattern,
            metavar="PATTERN",
            help="one letter per layer, bottom first: L = local attention, M = memory-compressed attention, "
            "F = full causal attention (LMLML: tensor2tensor's T-DMCA pattern; FFFFF: a Transformer decoder T-D)",
        )
        parser.add_argument(
            "--block-length",
            type=at_least(1),
            metavar="N",
            help="tokens per block of the local attention; a query sees its block and the previous one",
        )
        parser.add_argument(
            "--compression-factor",
            type=at_least(1),
            metavar="N",
            help="kernel size and stride of the convolutions that compress the keys and values of the "
            "memory-compressed attention",
        )
        parser.add_argument("--dropout", type=number_between(0, 1, high_inclusive=False), metavar="P", help="dropout")
        parser.add_argument(
            "--attention-dropout",
            type=number_between(0, 1, high_inclusive=False),
            metavar="P",
            help="dropout of the attention probabilities",
        )
        parser.add_argument(
            "--activation-dropout",
            type=number_between(0, 1, high_inclusive=False),
            metavar="P",
            help="dropout after the feed-forward activation",
        )
        add_activation_checkpointing_args(parser)

    @classmethod
    def build_model(cls, args, task):
        tdmca_architecture(args)
        args.layer_pattern = layer_pattern(args.layer_pattern)
        if args.decoder_embed_dim % args.decoder_attention_heads:
            raise ValueError(
                f"--decoder-embed-dim {args.decoder_embed_dim} is not divisible by "
                f"--decoder-attention-heads {args.decoder_attention_heads}"
            )
        if task.source_dictionary != task.target_dictionary:
            raise ValueError("T-DMCA reads source and summary as one sequence: it needs one dictionary for both")
        args.max_source_positions = getattr(args, "max_source_positions", None) or 3000
        args.max_target_positions = getattr(args, "max_target_positions", None) or 1024
        dictionary = task.target_dictionary
        embed_tokens = nn.Embedding(len(dictionary), args.decoder_embed_dim, padding_idx=dictionary.pad())
        nn.init.normal_(embed_tokens.weight, mean=0, std=args.decoder_embed_dim**-0.5)
        nn.init.constant_(embed_tokens.weight[dictionary.pad()], 0)
        encoder = SourcePassingEncoder(dictionary, args.max_source_positions)
        return cls(encoder, TDMCADecoder(args, dictionary, embed_tokens))


@register_model_architecture("tdmca", "tdmca")
def tdmca_architecture(args):
    """T-DMCA (Liu et al. 2018): layers LMLML, blocks of 256, compression 3
    (tensor2tensor's settings), at Liu & Lapata's sizes (d 512, FFN 2,048; 8 heads)."""
    DEFAULTS.fill(args)


@register_model_architecture("tdmca", "tdmca_tiny")
def tdmca_tiny_architecture(args):
    """Tiny dimensions for tests (d 32, 4 heads, FFN 64), layers LML, blocks
    of 8 tokens, so that the tests' short sequences cross blocks."""
    for name in ("decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_attention_heads"):
        setattr(args, name, getattr(args, name, TINY_DIMENSIONS[name]))
    DEFAULTS.fill(args, layer_pattern="LML", block_length=8)
