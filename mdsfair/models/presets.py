"""Presets of the component model (:mod:`mdsfair.models.component_model`):
the component choices and flag values that make HierEncDec, LED/PRIMERA and
the sparse decoder, shared by their architectures and by the combinations.

An architecture fills only what the user left unset (``None`` or absent), so
a value given on the command line or stored in a checkpoint wins
(:meth:`mdsfair.models.flag_defaults.FlagDefaults.fill`); a contradiction
between a system's ablation flag and an explicit component choice is refused.
"""

from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture

from mdsfair.models.component_model import component_defaults
from mdsfair.models.flag_defaults import FlagDefaults
from mdsfair.models.tiny_dimensions import set_tiny_dimensions

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
#: The sparse decoder (Manakul & Gales 2021).
SPARSE_DECODER = {"cross_attention": "sparse"}


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


def hierencdec_ablations(args) -> None:
    """HierEncDec's Table 3 ablation flags as component choices."""
    if getattr(args, "no_hierarchical_encoder", False):
        choose(args, "encoder_self_attention", "full", "--no-hierarchical-encoder")
    if getattr(args, "no_position_restart", False):
        choose(args, "encoder_positions", "learned", "--no-position-restart")
    if getattr(args, "no_hierarchical_decoder", False):
        choose(args, "cross_attention", "full", "--no-hierarchical-decoder")


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
