"""What the T5 family's models (:mod:`mdsfair.models.t5`: T5 v1.1,
:mod:`mdsfair.models.longt5`: LongT5) share as the component model
(:mod:`mdsfair.models.component_model`) on T5's backbone
(:data:`mdsfair.models.presets.T5_BACKBONE`): :class:`T5Family`.

**Vocabulary.** T5's SentencePiece vocabulary has ``<pad>`` 0, ``</s>`` 1,
``<unk>`` 2 and no ``<s>``. A fairseq dictionary (``dict.txt``, as every
data-bin, task and the hub load it) always starts ``<s> <pad> </s> <unk>``,
so the imported dictionary is T5's vocabulary shifted by one: fairseq index
``i + 1`` is Hugging Face id ``i``, and index 0 is fairseq's ``<s>``, which T5
never predicts (:func:`~mdsfair.modules.transformer_layers.logits_without`:
its logit 100 below the lowest of the step, with no gradient); it is the
documents' start token where the task inserts one (HierEncDec's layout), a
row that fine-tuning learns.

**Decoding starts from** ``<pad>``, T5's ``decoder_start_token_id``: the
decoder reads the first token of every target row (fairseq's ``</s>``, which
the task's collater and both generators put there) as ``<pad>``. Since that
is fairseq's padding index, the shared embedding has no padding index
(:meth:`T5Family.build_model`): Hugging Face trains the start row, which
fairseq's ``Embedding(padding_idx=pad)`` would leave without gradient; the
padding itself is masked in the attention (and zeroed in the encoder's
input), so it contributes no gradient. The decoder masks no padding of its
own input (T5's does not): a row's padding comes after its tokens and the
attention is causal.

**The seeds' methods** combine by flags as on BART: HierEncDec's document
attention (``--encoder-self-attention document``, the relative bias within
the document rule), its document-scaled cross-attention
(``--cross-attention document-scaled``) and Manakul & Gales 2021's sparse
cross-attention (``--cross-attention sparse``, trained with ``--task
multidoc_summarization_sparse --criterion sparse_kl``; its word-level
attention on T5's projections without biases and unscaled scores, its
approximator's W^Q/W^K initialised from them, App. A.1). What cannot run on
T5's backbone is refused when the model is built, with the reason: the
components that build BART's attention (biased projections, scaled scores:
HEPOS, HAT, ...), position components other than the relative bias
(HierEncDec's restarted positions read a learned table; T5 has none), a
component that computes heads of ``d_model / heads`` (the document
attention, the document-scaled and sparse cross-attentions) when
``--attention-head-dim`` says otherwise.

**Initialisation** (a model trained from scratch) is Hugging Face's
``T5PreTrainedModel._init_weights`` with ``initializer_factor`` 1
(:func:`initialize_as_t5`; Mesh TensorFlow's, which T5's unscaled scores
rely on: the query's ``(d_model d_kv)^-0.5`` takes the place of the
scores' ``d_kv^-0.5``), not BART's ``N(0, 0.02)`` everywhere.

**Checkpoints of the former T5 model** (its own layers, before T5 was the
component model) load: their configuration is upgraded
(:func:`former_t5_configuration`) and their parameters renamed
(:func:`former_t5_parameter_name`) as they are read.
"""

import logging
import re
from typing import Any, Dict, Mapping

import torch
from torch import nn

from mdsfair.checkpoints.config_upgrades import register_config_upgrade
from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.hub import MultiDocHubModel
from mdsfair.models.presets import T5_BACKBONE, t5_dimensions
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.t5_layers import T5LayerNorm

logger = logging.getLogger(__name__)


class T5Family(MultiDocHubModel, ComponentBARTModel):
    """What T5 v1.1 and LongT5 share: the decoder's start and absent
    tokens, the trainable start row, the former model's checkpoints."""

    @classmethod
    def build_model(cls, args, task):
        """The component model; its shared embedding without a padding
        index, so that the row of ``<pad>``, T5's decoder start, trains.
        Position components other than T5's relative bias are refused."""
        chosen = getattr(args, "encoder_positions", None)
        if chosen not in (None, T5_BACKBONE["encoder_positions"]):
            raise ValueError(
                f"--encoder-positions {chosen} cannot be used with the {getattr(args, 'arch', None) or 'T5'} "
                "architecture: T5's positions are the relative bias added to every self-attention "
                "(t5-relative-bias) and its checkpoints hold no position table, so a learned table (learned, "
                "HierEncDec's document-restart) would read untrained rows and another encoding (sinusoidal, "
                "document-aware) is not the one the weights expect; HierEncDec's document attention and "
                "document-scaled cross-attention combine with the relative bias"
            )
        model = super().build_model(args, task)
        model.encoder.embed_tokens.padding_idx = None
        return model

    @classmethod
    def decoder_options(cls, args, dictionary):
        """T5's decoder: it starts from ``<pad>``, never predicts fairseq's
        ``<s>`` and masks no padding of its own input (a row's padding comes
        after its tokens, and the attention is causal)."""
        return {"start_index": dictionary.pad(), "absent_index": dictionary.bos(), "masks_input_padding": False}

    def initialize_backbone(self) -> None:
        """Hugging Face's T5 initialisation (:func:`initialize_as_t5`), in
        place of BART's, before the components' own (the sparse
        approximator's W^Q/W^K then start as the T5-initialised projections)."""
        initialize_as_t5(self)

    def upgrade_state_dict_named(self, state_dict, name):
        """The former T5 model's parameter names as this model's
        (:func:`former_t5_parameter_name`), with the stacks' ``version``
        (fairseq drops the final layer norm of a stack saved without one),
        then the component model's upgrades."""
        prefix = name + "." if name != "" else ""
        if f"{prefix}encoder.position_bias.relative_attention_bias.weight" in state_dict:
            for key in [key for key in state_dict if key.startswith(prefix)]:
                state_dict[prefix + former_t5_parameter_name(key[len(prefix) :])] = state_dict.pop(key)
            for stack in ("encoder", "decoder"):
                state_dict.setdefault(f"{prefix}{stack}.version", getattr(self, stack).version.clone())
        super().upgrade_state_dict_named(state_dict, name)


@torch.no_grad()
def initialize_as_t5(model, factor: float = 1.0) -> None:
    """Hugging Face's ``T5PreTrainedModel._init_weights`` (transformers
    5.24, ``initializer_factor`` = ``factor``) on the component model's
    parameters, each drawn from ``N(0, std^2)`` with its own std:

    * the shared token embedding and an untied output layer (``lm_head``): ``factor``;
    * every attention of the layers: query ``factor (d_model d_kv)^-0.5``, key and value
      ``factor d_model^-0.5`` (their input's width: the encoder's for the cross-attention),
      output ``factor (heads d_kv)^-0.5``;
    * the feed-forward: ``fc_gate`` and ``fc1`` (``wi_0``, ``wi_1``) ``factor d_model^-0.5``,
      ``fc2`` (``wo``) ``factor d_ff^-0.5``;
    * the relative-bias tables (LongT5's global one too): ``factor d_model^-0.5``;
    * the RMS norms' weights ``factor``; biases, where ``--linear-biases on`` adds them, zero.

    Parameters of the components' own (the sparse approximator and its
    sentence encoder) keep theirs."""
    d_model = model.encoder.embed_tokens.embedding_dim

    def normal(linear: nn.Linear, std: float) -> None:
        nn.init.normal_(linear.weight, mean=0.0, std=std)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)

    nn.init.normal_(model.encoder.embed_tokens.weight, mean=0.0, std=factor)
    decoder = model.decoder
    if decoder.embed_tokens.weight is not model.encoder.embed_tokens.weight:
        nn.init.normal_(decoder.embed_tokens.weight, mean=0.0, std=factor)
    if decoder.output_projection.weight is not decoder.embed_tokens.weight:
        nn.init.normal_(decoder.output_projection.weight, mean=0.0, std=factor)
    for layer in (*model.encoder.layers, *decoder.layers):
        for attention in (layer.self_attn, getattr(layer, "encoder_attn", None)):
            if attention is None:
                continue
            normal(attention.q_proj, factor * (attention.q_proj.in_features * attention.head_dim) ** -0.5)
            normal(attention.k_proj, factor * attention.k_proj.in_features**-0.5)
            normal(attention.v_proj, factor * attention.v_proj.in_features**-0.5)
            normal(attention.out_proj, factor * attention.out_proj.in_features**-0.5)
        for linear in (layer.fc1, getattr(layer, "fc_gate", None), layer.fc2):
            if linear is not None:
                normal(linear, factor * linear.in_features**-0.5)
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and name.endswith(
            ("relative_attention_bias", "global_relative_position_bias")
        ):
            nn.init.normal_(module.weight, mean=0.0, std=factor * d_model**-0.5)
        elif isinstance(module, T5LayerNorm):
            nn.init.constant_(module.weight, factor)


#: The former T5 model's tables (``<stack>.position_bias.*``) -> this model's, by prefix after the stack.
FORMER_TABLE_NAMES = (
    ("position_bias.global_relative_attention_bias.", "global_relative_position_bias."),
    ("position_bias.", "relative_position_bias."),
)


def former_t5_parameter_name(former: str) -> str:
    """This model's name of a parameter of the former T5 model: the
    feed-forward's linears sit in the layer (fairseq's ``fc1``/``fc2``, plus
    ``fc_gate``), not in its ``ffn``; the stacks' bias tables are
    ``relative_position_bias`` and LongT5's global one
    ``global_relative_position_bias`` (:data:`FORMER_TABLE_NAMES`)."""
    name = re.sub(r"^((?:en|de)coder\.layers\.\d+\.)ffn\.", r"\1", former)
    stack, _, rest = name.partition(".")
    for former_table, table in FORMER_TABLE_NAMES:
        if rest.startswith(former_table):
            return f"{stack}.{table}{rest[len(former_table) :]}"
    return name


@register_config_upgrade
def former_t5_configuration(saved: Mapping[str, Any], path: str) -> Dict[str, Any]:
    """The component model's flags for a checkpoint of the former T5 model
    (its configuration has ``t5_feed_forward``): the feed-forward
    (``--feed-forward gated-gelu``, or fairseq's with ``--activation-fn
    relu``), the RMS norms' epsilon, its one dropout on the attention
    probabilities and the feed-forward too, and the output layer untied
    unless it was the embedding; ``{}`` for any other checkpoint."""
    if "t5_feed_forward" not in saved or "feed_forward" in saved:
        return {}
    values: Dict[str, Any] = {
        "feed_forward": "gated-gelu" if saved["t5_feed_forward"] == "gated-gelu" else "fairseq",
        "untie_output_embedding": not saved.get("share_decoder_input_output_embed"),
    }
    if saved["t5_feed_forward"] == "relu":
        values["activation_fn"] = "relu"
    if saved.get("layer_norm_eps") is not None:
        values["rms_norm_eps"] = saved["layer_norm_eps"]
    if saved.get("dropout") is not None:
        values["attention_dropout"] = values["activation_dropout"] = saved["dropout"]
    logger.info("%s: a checkpoint of the former T5 model: loaded as the component model with %s", path, values)
    return values


def tiny_architecture(args, defaults, **values) -> None:
    """Tiny dimensions for tests (``mdsfair.models.tiny_dimensions``: d 32,
    4 heads of 8, d_ff 64, 2 + 2 layers), 8 buckets up to distance 16, so
    that the tests' sequences reach the logarithmic buckets; ``values``: the
    architecture's other flags."""
    set_tiny_dimensions(args)
    defaults.fill(
        args, attention_head_dim=8, relative_attention_num_buckets=8, relative_attention_max_distance=16, **values
    )
    t5_dimensions(args, 32, 64, 4, 2)
