"""Hugging Face BART's configuration and weights <-> fairseq BART's, for
mdsfair's BART importer and exporter (:mod:`mdsfair.importers.hf_bart`, whose
module docstring lists the cases: embedding scale folded, tied or untied
head, ``final_logits_bias``); the architecture's shape read from
``config.json``."""

import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from mdsfair.importers import ImportRefused
from mdsfair.importers.config_checks import EncoderDecoderSizes, read_encoder_decoder_sizes

# Hugging Face activation name -> fairseq --activation-fn. ``gelu`` is the
# erf GELU in both; ``gelu_new`` / ``gelu_pytorch_tanh`` are the tanh
# approximation, fairseq's ``gelu_accurate``.
ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "gelu_new": "gelu_accurate",
    "gelu_pytorch_tanh": "gelu_accurate",
}

# Per-layer parameter modules, identical names in both libraries.
ATTENTION = ("k_proj", "v_proj", "q_proj", "out_proj")
ENCODER_LAYER_MODULES = tuple(f"self_attn.{p}" for p in ATTENTION) + (
    "self_attn_layer_norm",
    "fc1",
    "fc2",
    "final_layer_norm",
)
DECODER_LAYER_MODULES = (
    tuple(f"self_attn.{p}" for p in ATTENTION)
    + ("self_attn_layer_norm",)
    + tuple(f"encoder_attn.{p}" for p in ATTENTION)
    + ("encoder_attn_layer_norm", "fc1", "fc2", "final_layer_norm")
)

# Legacy config fields of transformers < 4 that changed what BART computes;
# BART's values are the defaults, anything else is another model.
LEGACY_BART_FIELDS = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": True,
    "static_position_embeddings": False,
    "add_bias_logits": False,
}


# -------------------------------------------------------------------- config


#: BART's one position table size, for the encoder's table and the decoder's.
BART_POSITION_KEYS = {"encoder": "max_position_embeddings", "decoder": "max_position_embeddings"}


@dataclass
class BartShape:
    """What a BART configuration fixes, in fairseq's terms."""

    embed_dim: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_embed_dim: int
    decoder_ffn_embed_dim: int
    max_positions: int
    activation_fn: str
    scale_embedding: bool
    tied_output: bool
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    encoder_layerdrop: float = 0.0
    decoder_layerdrop: float = 0.0
    notes: List[str] = field(default_factory=list)
    sizes: Optional[EncoderDecoderSizes] = None  # the configuration's sizes, by key, for check_encoder_decoder_weights

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.embed_dim) if self.scale_embedding else 1.0


def bart_shape(
    config: Dict, path: str, position_keys: Dict[str, str] = BART_POSITION_KEYS, position_offset: int = 2
) -> BartShape:
    """Check a Hugging Face ``config.json`` (already read from ``path``) is
    BART and return its shape; refuse what fairseq's BART cannot compute.
    Its sizes are read by :func:`mdsfair.importers.config_checks.read_encoder_decoder_sizes`
    (``position_keys``: the key of each part's position table, which holds
    ``position_offset`` rows more), for the importer to compare with the
    weights before converting them."""
    model_type = config.get("model_type")
    if model_type != "bart":
        raise ImportRefused(
            f"{path}: model_type is {model_type!r}, not 'bart'; only BART checkpoints convert to fairseq's bart "
            "architectures (mBART, PEGASUS, LED, Marian and others differ in layer norms, positions or vocabulary)"
        )
    if config.get("extra_pos_embeddings", 2) != 2:
        raise ImportRefused(
            f"{path}: extra_pos_embeddings={config['extra_pos_embeddings']}; BART's position tables have 2 offset rows"
        )
    for name, bart_value in LEGACY_BART_FIELDS.items():
        if name in config and bool(config[name]) != bart_value:
            raise ImportRefused(
                f"{path}: {name}={json.dumps(config[name])} is not BART's ({json.dumps(bart_value)}); "
                "fairseq's bart architectures are post-LayerNorm with an embedding LayerNorm and no extra "
                "final LayerNorm or logits bias"
            )
    for name, fairseq_id in (
        ("bos_token_id", 0),
        ("pad_token_id", 1),
        ("eos_token_id", 2),
        ("decoder_start_token_id", 2),
    ):
        value = config.get(name, fairseq_id)
        if value is not None and value != fairseq_id:
            raise ImportRefused(
                f"{path}: {name}={value}, but fairseq's BART uses {fairseq_id} "
                "(<s>=0, <pad>=1, </s>=2; the decoder starts with </s>)"
            )
    activation = config.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise ImportRefused(
            f"{path}: activation_function {activation!r} has no fairseq equivalent (supported: {', '.join(ACTIVATIONS)})"
        )
    sizes = read_encoder_decoder_sizes(config, path, position_keys, position_offset=position_offset)
    try:
        shape = BartShape(
            embed_dim=sizes.value("width"),
            encoder_layers=sizes.value("encoder_layers"),
            decoder_layers=sizes.value("decoder_layers"),
            encoder_attention_heads=sizes.value("encoder_heads"),
            decoder_attention_heads=sizes.value("decoder_heads"),
            encoder_ffn_embed_dim=sizes.value("encoder_ffn"),
            decoder_ffn_embed_dim=sizes.value("decoder_ffn"),
            max_positions=sizes.value("decoder_positions"),
            activation_fn=ACTIVATIONS[activation],
            scale_embedding=bool(config.get("scale_embedding", False)),
            tied_output=bool(config.get("tie_word_embeddings", True)),
            dropout=float(config.get("dropout", 0.1)),
            attention_dropout=float(config.get("attention_dropout", 0.0)),
            activation_dropout=float(config.get("activation_dropout", 0.0)),
            encoder_layerdrop=float(config.get("encoder_layerdrop", 0.0)),
            decoder_layerdrop=float(config.get("decoder_layerdrop", 0.0)),
            sizes=sizes,
        )
    except (TypeError, ValueError) as error:
        raise ImportRefused(f"{path}: a dropout is not a number ({error})") from None
    return shape


# ------------------------------------------------------------------- weights


def layer_keys(module: str) -> Tuple[str, str]:
    return f"{module}.weight", f"{module}.bias"


def hf_prefix(state: Dict) -> str:
    """``model.`` for BartForConditionalGeneration (and PageSumModel), ``''`` for BartModel."""
    return "model." if any(key.startswith("model.") for key in state) else ""


def fairseq_state_from_hf(
    state: Dict,
    shape: BartShape,
    source: str,
    ignored: Iterable[str] = (),
) -> "OrderedDict":
    """fairseq ``bart`` state dict from a Hugging Face BART state dict.

    ``ignored`` names keys the caller converts itself (PageSum's ``lin``).
    Every other key must be a BART weight; anything else is refused, so a
    checkpoint of another architecture cannot pass unnoticed.
    """
    import torch

    prefix = hf_prefix(state)
    used = set(ignored)

    def take(key: str) -> "torch.Tensor":
        full = prefix + key
        if full not in state:
            raise ImportRefused(f"{source}: {full} is missing")
        used.add(full)
        return state[full]

    def optional(key: str) -> Optional["torch.Tensor"]:
        if key in state:
            used.add(key)
            return state[key]
        return None

    # Token embeddings. Hugging Face ties encoder, decoder and lm_head to
    # ``shared`` when tie_word_embeddings is set (every released BART); without
    # it (transformers >= 5) each is its own parameter, read from its own key.
    shared_name = prefix + "shared.weight"
    names = {"encoder": prefix + "encoder.embed_tokens.weight", "decoder": prefix + "decoder.embed_tokens.weight"}
    available = [n for n in (shared_name, *names.values()) if n in state]
    if not available:
        raise ImportRefused(f"{source}: no token embedding ({shared_name}, {', '.join(names.values())})")
    used.update(available)
    fallback = state[available[0]]
    embeddings = {part: state.get(name, state.get(shared_name, fallback)) for part, name in names.items()}
    lm_head = optional("lm_head.weight")
    if shape.tied_output:
        for name in available + (["lm_head.weight"] if lm_head is not None else []):
            if not torch.equal(state[name], fallback):
                raise ImportRefused(
                    f"{source}: {name} differs from {available[0]} although config.json ties them "
                    "(tie_word_embeddings=true); Hugging Face versions disagree on which one such a file means"
                )
        output_projection = None
    else:
        if lm_head is None:
            raise ImportRefused(
                f"{source}: lm_head.weight is missing and config.json does not tie it (tie_word_embeddings=false)"
            )
        output_projection = lm_head
    for name, tensor in [
        *embeddings.items(),
        *([("lm_head", output_projection)] if output_projection is not None else []),
    ]:
        if tensor.shape != fallback.shape:
            raise ImportRefused(
                f"{source}: the {name} embedding {tuple(tensor.shape)} differs in shape from {tuple(fallback.shape)}"
            )
    if fallback.size(1) != shape.embed_dim:
        raise ImportRefused(
            f"{source}: the embedding has width {fallback.size(1)}, config d_model is {shape.embed_dim}"
        )

    bias = optional("final_logits_bias")
    if bias is not None and bias.abs().max().item() != 0:
        raise ImportRefused(
            f"{source}: final_logits_bias is nonzero (max |b| = {bias.abs().max().item():.3g}); fairseq's BART "
            "output projection has no bias, so these logits cannot be reproduced"
        )

    scale = shape.embed_scale
    out = OrderedDict()
    for part, modules, layers in (
        ("encoder", ENCODER_LAYER_MODULES, shape.encoder_layers),
        ("decoder", DECODER_LAYER_MODULES, shape.decoder_layers),
    ):
        out[f"{part}.version"] = torch.Tensor([3])
        if shape.tied_output and part == "decoder":
            out["decoder.embed_tokens.weight"] = out["encoder.embed_tokens.weight"]  # one tensor: shared
        else:
            out[f"{part}.embed_tokens.weight"] = embeddings[part] * scale if shape.scale_embedding else embeddings[part]
        positions = take(f"{part}.embed_positions.weight")
        if positions.size(0) != shape.max_positions + 2:
            raise ImportRefused(
                f"{source}: {prefix}{part}.embed_positions.weight has {positions.size(0)} rows; BART's learned positions "
                f"have max_position_embeddings + 2 = {shape.max_positions + 2} (two offset rows)"
            )
        out[f"{part}.embed_positions.weight"] = positions
        for key in layer_keys(f"{part}.layernorm_embedding"):
            out[key] = take(key)
        for layer in range(layers):
            for module in modules:
                for key in layer_keys(f"{part}.layers.{layer}.{module}"):
                    out[key] = take(key)

    if output_projection is not None:
        out["decoder.output_projection.weight"] = output_projection
    else:
        out["decoder.output_projection.weight"] = out["decoder.embed_tokens.weight"]
        if shape.scale_embedding:
            # logits = h W^T with W scaled by s: scale h by 1/s through the last
            # operation before the projection (post-LN: the last layer's final LayerNorm).
            last = f"decoder.layers.{shape.decoder_layers - 1}.final_layer_norm"
            out[f"{last}.weight"] = out[f"{last}.weight"] / scale
            out[f"{last}.bias"] = out[f"{last}.bias"] / scale

    for name in (prefix + "encoder.version", prefix + "decoder.version", "encoder.version", "decoder.version"):
        if name in state:
            used.add(name)
    unexpected = sorted(set(state) - used)
    if unexpected:
        shown = ", ".join(unexpected[:6]) + (" ..." if len(unexpected) > 6 else "")
        raise ImportRefused(
            f"{source}: {len(unexpected)} weights are not BART's and would be lost: {shown} "
            "(the layer counts in config.json may not match the file, or the model is another architecture)"
        )
    return out


# ------------------------------------------------------------------- export


HF_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "tanh": "tanh", "gelu_accurate": "gelu_new", "gelu_fast": "gelu_new"}


def cfg_value(cfg, name, default=None):
    value = getattr(cfg, name, default) if not isinstance(cfg, dict) else cfg.get(name, default)
    return default if value is None else value


def check_exportable(model_cfg, path: str) -> None:
    """Refuse a checkpoint Hugging Face's BART cannot compute."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    arch = cfg_value(model_cfg, "_name") or cfg_value(model_cfg, "arch")
    model_class = ARCH_MODEL_REGISTRY.get(arch)
    from fairseq.models.bart import BARTModel

    if model_class is not BARTModel:
        raise ImportRefused(
            f"{path}: arch {arch!r} is not a plain fairseq bart architecture; only bart_* checkpoints export to "
            "Hugging Face BART (the mdsfair models compute something BART does not)"
        )
    problems = []
    for name, required in (
        ("encoder_normalize_before", False),
        ("decoder_normalize_before", False),
        ("layernorm_embedding", True),
        ("encoder_learned_pos", True),
        ("decoder_learned_pos", True),
        ("no_token_positional_embeddings", False),
        ("cross_self_attention", False),
    ):
        if bool(cfg_value(model_cfg, name, required)) != required:
            problems.append(f"{name}={cfg_value(model_cfg, name)}")
    if cfg_value(model_cfg, "adaptive_softmax_cutoff"):
        problems.append("adaptive softmax")
    embed_dim = cfg_value(model_cfg, "encoder_embed_dim")
    for name in ("decoder_embed_dim", "decoder_output_dim", "decoder_input_dim"):
        if cfg_value(model_cfg, name, embed_dim) != embed_dim:
            problems.append(f"{name}={cfg_value(model_cfg, name)} != encoder_embed_dim {embed_dim}")
    if cfg_value(model_cfg, "activation_fn", "gelu") not in HF_ACTIVATIONS:
        problems.append(f"activation_fn={cfg_value(model_cfg, 'activation_fn')}")
    if problems:
        raise ImportRefused(f"{path}: not expressible as Hugging Face BART: {', '.join(problems)}")


#: The keys of a fairseq encoder-decoder's embeddings and output projection.
EMBEDDING_KEYS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight")


def fairseq_embeddings(state: Dict) -> Tuple[object, object, object, bool]:
    """The encoder embedding, decoder embedding and output projection of a
    fairseq encoder-decoder state dict (a missing one is the one before it,
    as fairseq shares them), and whether the three are one matrix
    (Hugging Face's ``tie_word_embeddings``)."""
    import torch

    encoder_embedding = state["encoder.embed_tokens.weight"]
    decoder_embedding = state.get("decoder.embed_tokens.weight", encoder_embedding)
    projection = state.get("decoder.output_projection.weight", decoder_embedding)
    tied = torch.equal(encoder_embedding, decoder_embedding) and torch.equal(projection, decoder_embedding)
    return encoder_embedding, decoder_embedding, projection, tied


def hf_state_from_fairseq(state: Dict, path: str) -> Tuple["OrderedDict", bool, Dict[str, int]]:
    """Hugging Face ``BartForConditionalGeneration`` state dict from a fairseq
    bart state dict; returns it, whether the head is tied, and the layer counts."""
    import torch

    encoder_embedding, decoder_embedding, projection, tied = fairseq_embeddings(state)
    out = OrderedDict()
    out["model.shared.weight"] = encoder_embedding
    if not tied:
        # tie_word_embeddings=false: Hugging Face (>= 5) reads each embedding from its own key.
        out["model.encoder.embed_tokens.weight"] = encoder_embedding
        out["model.decoder.embed_tokens.weight"] = decoder_embedding
        out["lm_head.weight"] = projection
    used = {*EMBEDDING_KEYS, "encoder.version", "decoder.version"}
    layers = {}
    for part, modules in (("encoder", ENCODER_LAYER_MODULES), ("decoder", DECODER_LAYER_MODULES)):
        count = 1 + max((int(k.split(".")[2]) for k in state if k.startswith(f"{part}.layers.")), default=-1)
        layers[part] = count
        keys = [f"{part}.embed_positions.weight", *layer_keys(f"{part}.layernorm_embedding")]
        for layer in range(count):
            for module in modules:
                keys += layer_keys(f"{part}.layers.{layer}.{module}")
        for key in keys:
            if key not in state:
                raise ImportRefused(f"{path}: {key} is missing")
            out["model." + key] = state[key]
            used.add(key)
    unexpected = sorted(set(state) - used)
    if unexpected:
        raise ImportRefused(f"{path}: weights Hugging Face BART has no place for: {', '.join(unexpected[:6])}")
    out["final_logits_bias"] = torch.zeros(1, encoder_embedding.size(0), dtype=encoder_embedding.dtype)
    return out, tied, layers
