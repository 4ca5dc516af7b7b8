"""The components' flags and registry plumbing of the component model
(:mod:`mdsfair.models.component_model`): the defaults of every flag
(:func:`component_table`, :func:`component_defaults`), the flags on a parser
(:func:`add_component_args`), the components ``args`` choose
(:func:`build_components`, refusing combinations that cannot work) and the
side inputs they declare (:func:`side_input_declarations`). The components
themselves are registered in :mod:`mdsfair.modules.components`.
"""

import dataclasses
from typing import Dict

from mdsfair.argument_types import at_least
from mdsfair.models.flag_defaults import FlagDefaults, derived
from mdsfair.modules.components import (
    ROLES,
    BackboneConfig,
    component_class,
    component_classes,
    component_names,
    flag_of,
)

#: The components of BART itself; the presets and architectures name what differs.
ROLE_DEFAULTS = {"encoder_self_attention": "full", "encoder_positions": "learned", "cross_attention": "full"}


def component_table() -> Dict[str, object]:
    """The roles' defaults, the paper defaults of every component registered
    now (:meth:`~mdsfair.modules.components.Component.flag_defaults`), and
    ``--max-encoder-positions`` (default: the task's ``--max-source-positions``)."""
    table = dict(ROLE_DEFAULTS)
    table.update(BackboneConfig.defaults())
    for cls in component_classes():
        table.update(cls.flag_defaults())
    table["max_encoder_positions"] = derived(
        "the model's --max-source-positions", lambda args: getattr(args, "max_source_positions", None) or 1024
    )
    return table


def component_defaults() -> FlagDefaults:
    """The component model's defaults (:func:`component_table`), read from the
    registry each time they are used: when an architecture fills its arguments
    and when a parser is built, so a component registered after this module
    was imported (a user's ``--user-dir`` package) has its defaults filled."""
    return FlagDefaults(component_table)


def add_component_args(parser) -> None:
    """The role flags and every registered component's own flags (each once:
    components of one configuration class, such as ``learned`` and
    ``document-restart``, share their flags)."""
    for role in ROLES:
        parser.add_argument(
            flag_of(role),
            choices=component_names(role),
            help=f"{role.replace('_', ' ')} component (mdsfair/modules/components.py)",
        )
    BackboneConfig.add_args(parser)
    added = {field.name for field in dataclasses.fields(BackboneConfig)}
    for cls in component_classes():
        cls.config_class.add_args(parser, skip=tuple(added))
        added.update(field.name for field in dataclasses.fields(cls.config_class))
    parser.add_argument(
        "--max-encoder-positions",
        type=at_least(1),
        help=(
            "rows of the encoder's learned position table (16384 under the led architectures, 4096 under "
            "primera and hierencdec, as the released models); the task's --max-source-positions may not exceed it"
        ),
    )


def build_components(args) -> Dict[str, object]:
    """role -> component object for ``args``; a combination that cannot
    work is refused with the reason."""
    components = {role: component_class(role, getattr(args, role))(args) for role in ROLES}
    backbone = BackboneConfig.of(args)
    if not backbone.linear_bias or backbone.attention_scaling == "none":
        for component in components.values():
            if component.role != "encoder_positions" and not component.follows_backbone:
                raise ValueError(
                    f"{flag_of(component.role)} {component.name} builds BART's attention (biased projections, "
                    f"scores scaled by head_dim^-0.5) and does not follow --linear-biases {backbone.linear_biases} "
                    f"--attention-scaling {backbone.attention_scaling}; on T5's backbone choose "
                    "--encoder-self-attention full, document, local or transient-global and --cross-attention full, "
                    "document-scaled or sparse"
                )
    widened = backbone.widened_stacks(args)
    for component in components.values() if widened else ():
        if not component.takes_head_width:
            raise ValueError(
                f"{flag_of(component.role)} {component.name} takes heads of d_model / heads, and "
                f"{widened[0]}: choose --encoder-self-attention full, --cross-attention full and "
                "--encoder-positions t5-relative-bias, or leave --attention-head-dim unset"
            )
    for component in components.values():
        reason = component.refusal(components)
        if reason:
            raise ValueError(
                f"{flag_of(component.role)} {component.name} cannot be combined with "
                f"{', '.join(f'{flag_of(r)} {c.name}' for r, c in components.items() if r != component.role)}: "
                f"{reason}"
            )
    return components


def side_input_declarations(components: Dict[str, object]) -> Dict[str, bool]:
    """Union of the components' side inputs: name -> required (by any)."""
    declared: Dict[str, bool] = {}
    for component in components.values():
        for name, required in component.side_inputs().items():
            declared[name] = declared.get(name, False) or required
    return declared
