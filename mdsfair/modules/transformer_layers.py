"""The one encoder layer and the one decoder layer of mdsfair's
encoder-decoders: the residual, layer-norm and feed-forward block of
fairseq's ``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase``
(post- or pre-norm, parameter names unchanged), written once, around any
self-attention or cross-attention component (:mod:`mdsfair.modules.components`).

* :class:`ComponentEncoderLayer` ``(x, encoder_padding_mask, attention_context)``:
  the self-attention component builds ``self_attn`` and runs it on the
  context it prepared once per batch (a document layout, a global mask);
* :class:`ComponentDecoderLayer`: causal self-attention as fairseq's
  (:class:`DecoderSelfAttention`), then the cross-attention component's
  ``attend`` with the context it prepared once per decoder pass, then the
  feed-forward; returns ``(x, attention, extra)``;
* :class:`DecoderSelfAttention` and :class:`OutputProjection`: fairseq's
  ``MultiheadAttention`` (which also takes a bias per head, T5's relative
  position bias, :mod:`mdsfair.modules.biased_self_attention`) and the
  decoder's ``nn.Linear`` output projection, as classes of their own: the
  generation speed-ups of :mod:`mdsfair.generation.fast` replace exactly
  these (and no other attention or linear layer) when a generator asks for them;
* the backbone (:class:`~mdsfair.modules.components.BackboneConfig`, BART's
  unless the flags say otherwise): LayerNorm or T5's RMSNorm
  (:class:`~mdsfair.modules.t5_layers.T5LayerNorm`) in every norm of the
  layers and stacks (:func:`use_backbone_norms`), the feed-forward
  ``fc2(activation(fc1 x))`` or T5 v1.1's gated GELU
  ``fc2(gelu_tanh(fc_gate x) * fc1 x)``
  (:func:`~mdsfair.modules.t5_layers.gated_gelu`), biases in the attention
  projections and feed-forward or none, and the scores scaled by
  ``d_head^-0.5`` or not (:meth:`BackboneLayer.configure_attention`);
* :func:`wrap_layer`: activation checkpointing and FSDP wrapping, as fairseq's
  own layer builders do;
* :func:`logits_without`: the logits of a vocabulary imported with a token
  the model never predicts (fairseq's ``<s>`` in PEGASUS's dictionary).
"""

from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.modules import MultiheadAttention
from fairseq.modules.quant_noise import quant_noise
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor, nn

from mdsfair.modules.activation_checkpointing import activation_checkpointing, checkpoint_layer
from mdsfair.modules.biased_self_attention import BackboneAttention, biased_self_attention
from mdsfair.modules.components import BackboneConfig
from mdsfair.modules.t5_layers import T5LayerNorm, gated_gelu

#: The norms of fairseq's layers (the decoder's ``attn_ln`` and ``ffn_layernorm``
#: under --scale-attn / --scale-fc) and of its stacks, by attribute name.
LAYER_NORMS = ("self_attn_layer_norm", "encoder_attn_layer_norm", "attn_ln", "ffn_layernorm", "final_layer_norm")
STACK_NORMS = ("layernorm_embedding", "layer_norm")


def use_backbone_norms(module: nn.Module, names, backbone: BackboneConfig) -> None:
    """``module``'s norms ``names`` (those it has) as the backbone's: under
    ``--normalization rmsnorm`` each LayerNorm becomes T5's RMSNorm of the
    same width (weight 1, ``--rms-norm-eps``); under ``layernorm`` they stay."""
    if backbone.normalization != "rmsnorm":
        return
    for name in names:
        norm = getattr(module, name, None)
        if norm is not None:
            setattr(module, name, T5LayerNorm(norm.weight.numel(), backbone.rms_norm_eps))


def wrap_layer(layer, cfg, structured: bool = False):
    """Activation checkpointing (``structured``: tensors inside tuples and
    NamedTuples of the arguments and outputs are recorded; see
    :func:`mdsfair.modules.activation_checkpointing.checkpoint_layer`) and
    FSDP wrapping, as fairseq's own builders do."""
    layer = checkpoint_layer(layer, cfg, structured=structured)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not activation_checkpointing(cfg) else 0)


def embed_source(encoder, src_tokens: Tensor, token_embedding: Optional[Tensor], positions: Optional[Tensor]):
    """fairseq's encoder embedding with the positions given: ``embed_scale``
    times the token embedding, plus ``positions`` (``[B, T, C]``, or None),
    layer norm, dropout and quantization noise as the encoder has them.
    Returns ``(x, token embedding)``, as ``forward_embedding``."""
    if token_embedding is None:
        token_embedding = encoder.embed_tokens(src_tokens)
    x = embed = encoder.embed_scale * token_embedding
    if positions is not None:
        x = embed + positions.type_as(embed)
    if encoder.layernorm_embedding is not None:
        x = encoder.layernorm_embedding(x)
    x = encoder.dropout_module(x)
    if encoder.quant_noise is not None:
        x = encoder.quant_noise(x)
    return x, embed


def with_model_width(attention: MultiheadAttention, embed_dim: int, source_dim: int) -> MultiheadAttention:
    """``attention``, a fairseq ``MultiheadAttention`` built at the width of
    its heads together (``heads x d_kv``, T5's ``inner_dim``), with
    projections from and to a model of width ``embed_dim``: the query from
    ``embed_dim``, the key and value from ``source_dim`` (the encoder's for a
    cross-attention), each to ``heads x d_kv``, and the output back to
    ``embed_dim`` (Raffel et al. 2020; T5 v1.1 small: 6 heads of 64 on
    d_model 512), newly initialised as fairseq initialises its own. fairseq's
    computation reads its widths from the projections once its check that
    queries are ``embed_dim`` wide is off; PyTorch's fused call, which
    assumes ``heads x d_kv = embed_dim``, is then never taken."""
    width = attention.embed_dim
    bias = attention.q_proj.bias is not None
    attention.q_proj = nn.Linear(embed_dim, width, bias=bias)
    attention.k_proj = nn.Linear(source_dim, width, bias=bias)
    attention.v_proj = nn.Linear(source_dim, width, bias=bias)
    attention.out_proj = nn.Linear(width, embed_dim, bias=attention.out_proj.bias is not None)
    attention.kdim = attention.vdim = source_dim
    attention._set_skip_embed_dim_check()
    attention.reset_parameters()
    return attention


class BackboneLayer:
    """What the encoder layer and the decoder layer build as the backbone
    says (``self.backbone``, set before fairseq's ``__init__``): the
    feed-forward's layers with or without biases, the gate of the gated
    GELU, the norms, and the attention's scaling."""

    backbone: BackboneConfig

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        return quant_noise(nn.Linear(input_dim, output_dim, bias=self.backbone.linear_bias), q_noise, qn_block_size)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.build_fc1(input_dim, output_dim, q_noise, qn_block_size)

    def build_backbone_modules(self) -> None:
        """After fairseq's ``__init__``: T5 v1.1's gate ``fc_gate`` (Hugging
        Face's ``wi_0``; ``fc1`` is its ``wi_1``) under ``--feed-forward
        gated-gelu``, and the norms (:func:`use_backbone_norms`)."""
        if self.backbone.feed_forward == "gated-gelu":
            self.fc_gate = self.build_fc1(
                self.fc1.in_features, self.fc1.out_features, self.quant_noise, self.quant_noise_block_size
            )
        use_backbone_norms(self, LAYER_NORMS, self.backbone)

    def attention_width(self, embed_dim: int, heads: int) -> int:
        """The width the layer builds its attentions at: ``heads x
        --attention-head-dim``, or ``embed_dim`` (:meth:`BackboneConfig.attention_width`)."""
        return self.backbone.attention_width(embed_dim, heads)

    def configure_attention(
        self, attention: nn.Module, embed_dim: Optional[int] = None, source_dim: Optional[int] = None
    ) -> nn.Module:
        """``attention`` (a fairseq ``MultiheadAttention``) with the scores
        unscaled under ``--attention-scaling none`` (``scaling`` 1); built at
        a width of its heads other than the layer's ``embed_dim`` (``--attention-head-dim``),
        it reads ``embed_dim``-wide queries and ``source_dim``-wide keys and values
        (:func:`with_model_width`)."""
        if embed_dim is not None and getattr(attention, "embed_dim", embed_dim) != embed_dim:
            attention = with_model_width(attention, embed_dim, source_dim or embed_dim)
        if self.backbone.attention_scaling == "none":
            attention.scaling = 1.0
        return attention

    def feed_forward_hidden(self, x: Tensor) -> Tensor:
        """The feed-forward's hidden layer: ``activation(fc1 x)``, or
        ``gelu_tanh(fc_gate x) * fc1 x`` (gated GELU)."""
        if self.backbone.feed_forward == "gated-gelu":
            return gated_gelu(x, self.fc_gate, self.fc1)
        return self.activation_fn(self.fc1(x))


class ComponentEncoderLayer(BackboneLayer, TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention is a component's, on the
    backbone of the model's arguments."""

    def __init__(self, cfg, self_attention, layer_index: int):
        self.self_attention_component = self_attention
        self.layer_index = layer_index
        self.backbone = BackboneConfig.of(self_attention.args)
        super().__init__(cfg)
        self.build_backbone_modules()

    def build_self_attention(self, embed_dim, cfg):
        width = self.attention_width(embed_dim, cfg.encoder.attention_heads)
        return self.configure_attention(self.self_attention_component.build(self, width, cfg), embed_dim)

    def forward(
        self,
        x: Tensor,
        encoder_padding_mask: Optional[Tensor],
        attention_context=None,
        position_bias: Optional[Tensor] = None,
    ):
        """``x [T, B, C]``; ``encoder_padding_mask [B, T]`` (None without
        padding); ``attention_context``: what the component prepared for the
        batch; ``position_bias [B * H, T, T]``: what the position component
        adds to every layer's scores (T5's relative bias), or None."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        # only a component that takes a position bias is handed one (a user's attend need not know the keyword)
        bias = {} if position_bias is None else {"position_bias": position_bias}
        x = self.self_attention_component.attend(
            self.self_attn, x, encoder_padding_mask, attention_context, self.layer_index, **bias
        )
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.fc2(self.activation_dropout_module(self.feed_forward_hidden(x)))
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class DecoderSelfAttention(BackboneAttention):
    """The decoder layer's causal self-attention: fairseq's
    ``MultiheadAttention`` (Vaswani et al. 2017, Sec. 3.2.2), with its
    key/value cache in the incremental state and reordered with the beams.
    A mask per head (``attn_mask [B * H, T, S]``: T5's causal relative
    position bias plus the future mask) and a backbone without biases or
    scaling run :func:`~mdsfair.modules.biased_self_attention.biased_self_attention`
    (the same cache), which fairseq's computation does not take."""

    def own_attention(
        self, query, key, key_padding_mask, incremental_state, need_weights, attn_mask, need_head_weights
    ):
        if need_head_weights:
            raise ValueError(
                "the decoder's self-attention with a mask per head or T5's backbone takes no need_head_weights"
            )
        return biased_self_attention(self, query, key_padding_mask, attn_mask, incremental_state, need_weights)


#: How far below a step's lowest logit a token the model never predicts lies.
ABSENT_TOKEN_MARGIN = 100.0


def logits_without(logits: Tensor, index: int) -> Tensor:
    """``logits [..., V]`` with the token ``index`` set ``ABSENT_TOKEN_MARGIN``
    below the lowest logit of its step, with no gradient: a probability under
    ``e^-100`` of the least likely token's, below float64's resolution of the
    others' log-probabilities, so their softmax is the vocabulary's without
    that token (a dictionary imported from Hugging Face has fairseq's ``<s>``
    in front of the model's own tokens), and finite, so a loss that sums
    every log-probability (label smoothing) stays finite."""
    lowest = logits.detach().min(dim=-1, keepdim=True).values - ABSENT_TOKEN_MARGIN
    return logits.index_copy(-1, torch.tensor([index], device=logits.device), lowest)


class OutputProjection(nn.Linear):
    """The decoder's output projection to the vocabulary (the logits of
    every target position): ``nn.Linear``, tied to the token embedding or
    its own, as fairseq builds it."""


class ComponentDecoderLayer(BackboneLayer, TransformerDecoderLayerBase):
    """fairseq's decoder layer whose cross-attention is a component's, on
    the backbone of the model's arguments."""

    def __init__(self, cfg, cross_attention):
        self.cross_attention_component = cross_attention
        self.backbone = BackboneConfig.of(cross_attention.args)
        super().__init__(cfg)
        self.build_backbone_modules()
        if self.c_attn is not None:
            raise ValueError("--scale-heads is not supported by mdsfair's component decoder layer")
        if self.cross_self_attention:
            raise ValueError("--cross-self-attention is not supported by mdsfair's component decoder layer")

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        """fairseq's self-attention, built as ``TransformerDecoderLayerBase``
        builds it (same arguments, same parameters), with the backbone's
        biases and scaling."""
        return self.configure_attention(
            DecoderSelfAttention(
                self.attention_width(embed_dim, cfg.decoder.attention_heads),
                cfg.decoder.attention_heads,
                dropout=cfg.attention_dropout,
                bias=self.backbone.linear_bias,
                add_bias_kv=add_bias_kv,
                add_zero_attn=add_zero_attn,
                self_attention=not cfg.cross_self_attention,
                q_noise=self.quant_noise,
                qn_block_size=self.quant_noise_block_size,
                xformers_att_config=cfg.decoder.xformers_att_config,
            ),
            embed_dim,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        width = self.attention_width(embed_dim, cfg.decoder.attention_heads)
        return self.configure_attention(
            self.cross_attention_component.build(self, width, cfg), embed_dim, cfg.encoder.embed_dim
        )

    def after_cross_attention(self, x: Tensor, cross_context, incremental_state) -> Tensor:
        """A sub-layer between the cross-attention block and the
        feed-forward block (HAT-BART's attention over the sentence states,
        :mod:`mdsfair.modules.hat_attention`); none here."""
        return x

    def forward(
        self,
        x: Tensor,
        encoder_states: Tensor,
        encoder_padding_mask: Optional[Tensor],
        cross_context=None,
        incremental_state=None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        alignment_heads: Optional[int] = None,
    ):
        """Self-attention, the component's cross-attention, feed-forward.
        Returns ``(x, attention, extra)``: ``attention`` the cross-attention
        weights ``[B, T, S]`` averaged over the first ``alignment_heads``
        heads when ``need_attn``, ``extra`` what the component reports per
        layer (the sparse decoder's sentence saliencies), or None."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(
            query=x,
            key=x,
            value=x,
            key_padding_mask=self_attn_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            attn_mask=self_attn_mask,
        )
        if self.attn_ln is not None:
            x = self.attn_ln(x)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        x, attention, extra = self.cross_attention_component.attend(
            self.encoder_attn,
            x,
            encoder_states,
            encoder_padding_mask,
            cross_context,
            incremental_state=incremental_state,
            need_attn=need_attn,
            alignment_heads=alignment_heads,
            # fairseq's layer asks its attention for weights in evaluation too (self.need_attn),
            # which selects the attention's computation: kept, so BART's numbers are bitwise BART's
            need_weights=need_attn or (not self.training and self.need_attn),
        )
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        x = self.after_cross_attention(x, cross_context, incremental_state)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout_module(self.feed_forward_hidden(x))
        if self.ffn_layernorm is not None:
            x = self.ffn_layernorm(x)
        x = self.dropout_module(self.fc2(x))
        if self.w_resid is not None:
            residual = self.w_resid * residual
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, attention, extra
