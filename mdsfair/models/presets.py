"""Presets of the component model (:mod:`mdsfair.models.component_model`):
the component choices and flag values that make HierEncDec, LED/PRIMERA and
the sparse decoder, shared by their architectures and by the combinations.

An architecture fills only what the user left unset (``None`` or absent), so
a value given on the command line or stored in a checkpoint wins
(:meth:`mdsfair.models.flag_defaults.FlagDefaults.fill`); the defaults of the
components are read from the registry when the architecture runs
(:func:`mdsfair.models.component_flags.component_defaults`).

A system's ablation flag (:class:`Ablation`: HierEncDec's Table 3, DAPE's
Table III) replaces one component of the system's preset with BART's (or the
Transformer's). It is refused, naming the flag and the architecture, where the
preset does not have that component (``primera_hierencdec
--no-hierarchical-encoder``: PRIMERA's encoder has no document attention to
switch off, and replacing its Longformer attention would silently make another
system), and where it contradicts an explicit component choice.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, Sequence, Union

from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture

from mdsfair.argument_types import UsageError
from mdsfair.models.component_flags import component_defaults
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.tiny_dimensions import set_tiny_dimensions
from mdsfair.modules.components import flag_of

#: HierEncDec (Shen et al. 2023): every part of the hierarchy on (Table 3 row 0).
HIERENCDEC = {
    "encoder_self_attention": "document",  # Sec. 4.1
    "encoder_positions": "document-restart",  # Sec. 4.1.1
    "cross_attention": "document-scaled",  # Sec. 4.2, Eq. 3-5
}
#: LED's encoder (allenai/led-*-16384): Longformer attention, 16,384 learned
#: positions, window 1,024, the first token global.
LED_ENCODER = {
    "encoder_self_attention": "longformer",
    "encoder_positions": "learned",
    "max_encoder_positions": 16384,
    "attention_window": "1024",
    "global_attention": "first",
}
#: PRIMERA's encoder (allenai/PRIMERA): 4,096 positions, window 512, <s> and every <doc-sep> global.
PRIMERA_ENCODER = {
    **LED_ENCODER,
    "max_encoder_positions": 4096,
    "attention_window": "512",
    "global_attention": "doc-sep",
}
#: LoBART(4k)'s encoder (Manakul & Gales, ACL 2021): local attention of width 1,024, no
#: global token, 4,096 positions, BART's table copied as the authors' code does on load
#: (the sparse decoder paper, Sec. 2: "that of LoBART is 4096 with attention width of 1024").
LOBART_ENCODER = {
    "encoder_self_attention": "longformer",
    "encoder_positions": "learned",
    "max_encoder_positions": 4096,
    "attention_window": "1024",
    "global_attention": "none",
    "position_tiling": "mirror",
}
#: The sparse decoder (Manakul & Gales 2021).
SPARSE_DECODER = {"cross_attention": "sparse"}
#: PEGASUS's backbone (Zhang et al. 2020; the fields of Hugging Face's PegasusConfig in
#: google/pegasus-large and its fine-tuned checkpoints): pre-norm layers with a final layer
#: norm in both stacks, no embedding layer norm, token embeddings scaled by sqrt(d_model),
#: ReLU, dropout 0.1 on the sub-layers, the attention and the activation, one embedding
#: for both stacks and the output, sinusoidal (not learned) positions in both stacks.
PEGASUS_BACKBONE = {
    "encoder_normalize_before": True,
    "decoder_normalize_before": True,
    "layernorm_embedding": False,
    "no_scale_embedding": False,
    "activation_fn": "relu",
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.1,
    "encoder_learned_pos": False,
    "decoder_learned_pos": False,
    "share_all_embeddings": True,
    "share_decoder_input_output_embed": True,
}
#: PEGASUS's encoder positions (the decoder's are the family's: mdsfair.models.pegasus).
PEGASUS_ENCODER = {"encoder_positions": "pegasus-sinusoidal"}
#: T5 v1.1's backbone (Raffel et al. 2020, Sec. 2.1, and the v1.1 changes of its released
#: checkpoints; google/t5-v1_1-*'s config.json as Hugging Face's T5ForConditionalGeneration reads
#: it): no position embedding but a relative bias per head and bucketed offset (32 buckets up to
#: distance 128) in every self-attention, pre-norm layers with RMSNorm (eps 1e-6) and a final norm
#: in both stacks followed by dropout, no embedding layer norm, unscaled token embeddings shared by
#: both stacks, the gated-GELU feed-forward, no biases, unscaled scores, heads of 64, dropout 0.1 on
#: the embeddings, sub-layers, attention probabilities and feed-forward. T5 v1.1 unties the output
#: layer from the embedding (``untie_output_embedding``); LongT5 keeps it tied.
T5_BACKBONE = {
    "encoder_positions": "t5-relative-bias",
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "normalization": "rmsnorm",
    "rms_norm_eps": 1e-6,
    "feed_forward": "gated-gelu",
    "linear_biases": "off",
    "attention_scaling": "none",
    "attention_head_dim": 64,
    "stack_output_dropout": True,
    "encoder_normalize_before": True,
    "decoder_normalize_before": True,
    "layernorm_embedding": False,
    "no_scale_embedding": True,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.1,
    "share_all_embeddings": True,
    "share_decoder_input_output_embed": True,
}
#: PRIMERA's encoder with HierEncDec's document positions and cross-attention
#: (``primera_hierencdec``): the documents' ``<s>`` are the global tokens.
PRIMERA_HIERENCDEC = {
    **PRIMERA_ENCODER,
    "global_attention": "documents",
    "encoder_positions": HIERENCDEC["encoder_positions"],
    "cross_attention": HIERENCDEC["cross_attention"],
}


@dataclass(frozen=True)
class Ablation:
    """An ablation flag of a system: ``flag`` (argparse dest) replaces the
    system's component ``component`` of ``role`` by ``replacement`` (a name, or
    a function of the arguments giving it)."""

    flag: str
    role: str
    component: str
    replacement: Union[str, Callable[[Any], str]]

    def replacement_for(self, args) -> str:
        return self.replacement(args) if callable(self.replacement) else self.replacement

    def refusal(self, arch: str, component: str) -> str:
        """Why the flag means nothing under ``arch``, whose ``role`` is ``component``."""
        role = self.role.replace("_", " ")
        return (
            f"{flag_of(self.flag)} does not apply to --arch {arch}: it replaces the {role} {self.component}, "
            f"and {arch}'s {role} is {component} (choose another with {flag_of(self.role)})"
        )


#: HierEncDec's Table 3 ablation flags: each switches its part back to BART's component.
HIERENCDEC_ABLATIONS = (
    Ablation("no_hierarchical_encoder", "encoder_self_attention", HIERENCDEC["encoder_self_attention"], "full"),
    Ablation("no_position_restart", "encoder_positions", HIERENCDEC["encoder_positions"], "learned"),
    Ablation("no_hierarchical_decoder", "cross_attention", HIERENCDEC["cross_attention"], "full"),
)


def family_defaults(**values) -> FlagDefaults:
    """The component table with a family's values."""
    return component_defaults().extended(**values)


def choose(args, role: str, value: str, because: str) -> None:
    """``args.<role> = value`` (asked for by the flag ``because``) unless set
    to something else, which is refused."""
    current = getattr(args, role, None)
    if current is None:
        setattr(args, role, value)
    elif current != value:
        raise ValueError(f"--{role.replace('_', '-')} {current} contradicts {because}")


def apply_ablations(args, arch: str, preset: Dict[str, str], ablations: Sequence[Ablation]) -> None:
    """The ablation flags set in ``args`` as component choices, when the
    architecture ``arch`` fills its arguments: a flag whose component the
    architecture's ``preset`` (role -> component) does not have is refused
    (:class:`~mdsfair.argument_types.UsageError`, one line naming the flag and
    ``arch``), and one contradicting an explicit choice too (:func:`choose`)."""
    for ablation in ablations:
        if not getattr(args, ablation.flag, False):
            continue
        component = preset.get(ablation.role)
        if component != ablation.component:
            raise UsageError(ablation.refusal(arch, component))
        choose(args, ablation.role, ablation.replacement_for(args), flag_of(ablation.flag))


def apply_built_ablations(args, ablations: Sequence[Ablation]) -> None:
    """The ablation flags set in ``args`` when the model is built from
    arguments whose components were filled before (a checkpoint's): a flag
    replaces its component, is satisfied by its replacement, and is refused
    where the arguments hold another component (the flag means nothing there)."""
    for ablation in ablations:
        if not getattr(args, ablation.flag, False):
            continue
        current = getattr(args, ablation.role, None)
        replacement = ablation.replacement_for(args)
        if current in (None, ablation.component):
            setattr(args, ablation.role, replacement)
        elif current != replacement:
            raise UsageError(ablation.refusal(getattr(args, "arch", None) or "(this model)", current))


def hierencdec_source_positions(args) -> None:
    """4,096 source positions (Sec. 5.3, after Xiao et al. 2022; BART's own
    is 1,024); the target keeps BART's 1,024."""
    args.max_source_positions = getattr(args, "max_source_positions", 4096)


def bart_dimensions(args, size: str) -> None:
    """BART's base or large settings, or the tiny test dimensions
    (:mod:`mdsfair.models.tiny_dimensions`) on BART-base's."""
    if size == "tiny":
        set_tiny_dimensions(args)
    (bart_large_architecture if size == "large" else bart_base_architecture)(args)


def t5_dimensions(args, d_model: int, d_ff: int, heads: int, layers: int) -> None:
    """T5's sizes (``d_model``, ``d_ff``, heads and layers) in the encoder, the
    decoder's the encoder's unless given (one model dimension; Hugging Face's
    ``num_decoder_layers`` defaults to ``num_layers``), values already given
    kept; then BART-large's remaining settings (1,024 target positions; the
    family fills its table before, so that BART's architecture keeps its values)."""
    for name, value in (
        ("embed_dim", d_model),
        ("ffn_embed_dim", d_ff),
        ("attention_heads", heads),
        ("layers", layers),
    ):
        encoder_value = getattr(args, f"encoder_{name}", None) or value
        setattr(args, f"encoder_{name}", encoder_value)
        setattr(args, f"decoder_{name}", getattr(args, f"decoder_{name}", None) or encoder_value)
    bart_large_architecture(args)


def pegasus_dimensions(args, size: str) -> None:
    """google/pegasus-large's sizes (d_model 1,024, 16 + 16 layers, 16 heads,
    feed-forward 4,096, 1,024 positions per stack: BART-large's apart from
    the layers) or the tiny test dimensions; values already given are kept.
    The family fills :data:`PEGASUS_BACKBONE` (its table) before, so that
    BART's architecture keeps those values."""
    if size == "large":
        args.encoder_layers = getattr(args, "encoder_layers", 16)
        args.decoder_layers = getattr(args, "decoder_layers", 16)
    bart_dimensions(args, size)
