"""The component model's flags under a T5 architecture: refused, with the reason.

The seeds' methods are components of the component model
(:mod:`mdsfair.models.component_model`, ARCHITECTURE.md "Systems as
components"): HierEncDec's document attention, restarted document positions
and document-scaled cross-attention (Shen et al. 2023, Sec. 4.1-4.2, Eq.
3-5), the sparse decoder's sentence-level cross-attention (Manakul & Gales
2021, Eq. 3-11), DAPE's document-aware positions and the others of the
registry (:mod:`mdsfair.modules.components`), and the flags of its backbone
(``--normalization``, ``--linear-biases``, ...). T5 (:mod:`mdsfair.models.t5`)
is a model of its own: its layers are T5's (:mod:`mdsfair.modules.t5_layers`),
which hold no component, so none of these flags can change what it computes.
fairseq's parser would stop at such a flag with ``unrecognized arguments``
and a torch.hub override would be dropped without a word; instead T5's
parser reads every flag of the component model it does not declare itself,
as the component model reads it (:func:`add_refused_component_args`, hidden
from ``--help``: they are not T5's options), and the model refuses each one
given, saying why and what to use (:func:`refuse_component_flags`), before
anything is built.

The component model itself expresses T5 v1.1's backbone by flags (RMSNorm,
the gated GELU, no biases, unscaled scores, an untied output layer,
``--encoder-positions t5-relative-bias``; :class:`~mdsfair.modules.components.BackboneConfig`),
and the seeds' document attention and document-scaled cross-attention run on
it (``tests/test_t5_backbone.py``: on the weights of this model renamed, it
gives this model's logits and hypotheses). That is where a user who wants
them on T5 goes (:data:`INSTEAD`); no architecture of the component model
restores an ``mdsfair-import hf-t5`` checkpoint yet.

Why each role has no counterpart in this model's own layers:

* ``--encoder-positions``: T5 has no position embedding to replace. Its only
  position signal is the bucketed relative bias of each stack (Raffel et al.
  2020, Sec. 2.1), read from the offset ``j - i`` of key and query.
  Restarting positions at every document under that bias would compute the
  offsets from the positions within the documents: token ``k`` of one
  document and token ``k`` of another would be 0 apart, the offset of a
  token to itself, and the documents would read each other as if they lay on
  top of one another; DAPE's document encoding is added to absolute position
  embeddings, which T5 does not have.
* ``--encoder-self-attention``: the components build BART-shaped attention
  (biased projections, scores scaled by ``d ** -0.5``) that takes no
  relative position bias; T5's attention has neither bias nor scaling and
  adds the stack's position bias in every layer.
* ``--cross-attention``: the same for the decoder's attention over the
  source; T5's cross-attention is T5's own.
"""

import argparse
import dataclasses
from typing import Callable, Dict, Sequence, Tuple

from mdsfair.modules.components import ROLES, BackboneConfig, component_classes, component_names, flag_of

#: The role name :func:`component_model_flags` gives the component model's backbone flags.
BACKBONE = "backbone"

#: Why a role's components do not run on T5's layers (module docstring).
ROLE_REASONS = {
    BACKBONE: (
        "T5's layers are T5 v1.1's own (RMSNorm, no biases, unscaled scores, --t5-feed-forward for the "
        "feed-forward, its output layer its own or the embedding by --share-decoder-input-output-embed); "
        "the backbone flags choose the component model's"
    ),
    "encoder_positions": (
        "T5 has no position embedding, only the relative position bias of each stack, read from the offset between "
        "key and query; restarted positions under it would put token k of every document 0 apart from token k of "
        "every other, the offset of a token to itself"
    ),
    "encoder_self_attention": (
        "T5's encoder layers hold T5's attention (no biases, no score scaling, the relative position bias added in "
        "every layer); the components build BART's and have no T5 layer yet"
    ),
    "cross_attention": (
        "T5's decoder layers hold T5's cross-attention (no biases, no score scaling); the components build BART's "
        "and have no T5 layer yet"
    ),
}

#: What a user who wants the seeds' methods runs instead.
INSTEAD = (
    "the five systems' methods run on the component model: --arch multidoc_bart_base (or hierencdec_bart_base, "
    "sparse_bart_base) with the same flags, restored from an mdsfair-import hf-bart checkpoint; on T5 v1.1's "
    "backbone add --encoder-positions t5-relative-bias --normalization rmsnorm --feed-forward gated-gelu "
    "--linear-biases off --attention-scaling none --untie-output-embedding --no-scale-embedding "
    "--encoder-normalize-before --decoder-normalize-before, with --encoder-self-attention full or document "
    "(LongT5's local or transient-global) and "
    "--cross-attention full or document-scaled (docs/importing.md; no architecture of it restores an "
    "mdsfair-import hf-t5 checkpoint yet)"
)


def component_model_flags() -> Dict[str, Tuple[str, str]]:
    """Every flag of the component model by its argparse ``dest``: the role
    flags (``--cross-attention``), the backbone's (``--normalization``) and
    every registered component's own (``--top-r``), each with its role
    (:data:`BACKBONE` for the backbone's) and what it is (``"a component of
    --cross-attention"``, ``"a flag of --cross-attention sparse"``)."""
    flags = {role: (role, f"a component of {flag_of(role)}") for role in ROLES}
    for field in dataclasses.fields(BackboneConfig):
        flags[field.name] = (BACKBONE, "a flag of the component model's backbone")
    for cls in component_classes():
        for field in dataclasses.fields(cls.config_class):
            flags.setdefault(field.name, (cls.role, f"a flag of {flag_of(cls.role)} {cls.name}"))
    return flags


def component_model_fields() -> Dict[str, dataclasses.Field]:
    """The dataclass field of every flag of :func:`component_model_flags` but the role flags."""
    configs = [BackboneConfig] + [cls.config_class for cls in component_classes()]
    return {field.name: field for config in configs for field in dataclasses.fields(config)}


def add_refused_component_args(parser) -> None:
    """The component model's flags that ``parser`` (T5's) lacks, each parsed
    as the component model parses it (its choices, type or switch), with its
    help hidden: they are accepted only for :func:`refuse_component_flags`."""
    fields = component_model_fields()
    for dest in component_model_flags():
        if flag_of(dest) in parser._option_string_actions:
            continue  # a flag T5 declares itself
        if dest in ROLES:
            parser.add_argument(flag_of(dest), choices=component_names(dest), help=argparse.SUPPRESS)
        else:
            parser.add_argument(flag_of(dest), help=argparse.SUPPRESS, **fields[dest].metadata["argparse"])


def refusal_message(arch: str, given: Dict[str, object]) -> str:
    """Why ``arch`` (a T5 architecture) takes none of the ``given`` flags of
    the component model (argparse dest -> value), each with its role's
    reason (:data:`ROLE_REASONS`), and what to use instead."""
    flags = component_model_flags()
    parts = []
    for dest, value in given.items():
        role, what = flags[dest]
        shown = flag_of(dest) if value is True else f"{flag_of(dest)} {value}"
        parts.append(f"{shown} ({what}): {ROLE_REASONS.get(role, 'T5 holds no component of the component model')}")
    return (
        f"--arch {arch} is T5, not the component model, and takes none of its flags: {'; '.join(parts)}. "
        f"Instead, {INSTEAD}"
    )


def refuse_component_flags(args, own: Tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` (:func:`refusal_message`) when ``args`` holds a
    flag of the component model; ``own``: the flags (argparse dests) that T5
    declares itself under the same name (LongT5's ``--encoder-self-attention``),
    left to T5, whose parser checks them (:func:`own_role_choice`)."""
    given = {}
    for dest in component_model_flags():
        value = getattr(args, dest, None)
        if dest not in own and value is not None and value is not False:
            given[dest] = value
    if given:
        raise ValueError(refusal_message(getattr(args, "arch", "t5_v1_1"), given))


def own_role_choice(role: str, own: Sequence[str]) -> Callable[[str], str]:
    """The argparse ``type`` of a role flag that T5 declares itself with its
    ``own`` choices (LongT5's ``--encoder-self-attention``): a component of
    the component model that is none of them is refused with the reason
    (:func:`refusal_message`) rather than as an invalid choice."""

    def choice(value: str) -> str:
        if value not in own and value in component_names(role):
            raise argparse.ArgumentTypeError(refusal_message("t5_v1_1 / longt5", {role: value}))
        return value

    return choice
