"""Components of the multi-document encoder-decoder, one call shape per role.

mdsfair's BART-based systems differ in three places only, each a *role*
(:data:`ROLES`, each chosen by its flag): the self-attention of every encoder
layer (``--encoder-self-attention``), the encoder's position embedding
(``--encoder-positions``) and the cross-attention of every decoder layer
(``--cross-attention``). The registered components of each role, their
papers, flags and side inputs are listed in ``docs/components.md``, a table
generated from this registry (:mod:`mdsfair.component_table`).

A component is a class registered with :func:`register_component` under its
role and name. It declares, by the data contract's names
(``docs/data_contract.md``: ``src_doc_ids``, ``src_sent_ids``, ...), the side
inputs it reads (:meth:`Component.side_inputs`): the task hands a model exactly
the union of its components' declarations, and the model refuses a missing
required input or one that none of its components declares, by name. Its own
flags are the fields of its typed configuration (:attr:`Component.config_class`,
a :class:`ComponentConfig` dataclass whose fields, written with
:func:`component_flag`, carry each flag's help and the paper's default): the
model's parser gains one flag per field, and a model's architecture fills the
defaults of every component registered when it runs, so a component registered
by a user's package after :func:`mdsfair.register` has its defaults too.
:meth:`Component.refusal` says why it cannot work with the other components
chosen, if it cannot.

The encoder and decoder layers that hold the modules
(:mod:`mdsfair.modules.transformer_layers`) write the residual, norm and
feed-forward block once, on the backbone of :class:`BackboneConfig` (BART's
by default, or T5's: RMSNorm, the gated GELU, no biases, unscaled scores),
whose fields are flags of the model as the components' are. A new attention kind is one component class plus
its registration; ``tests/test_components.py`` registers a toy one inside
the test and runs it through the model contract.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Type

from torch import Tensor

from mdsfair._autoimport import import_submodules_ending_with
from mdsfair.argument_types import at_least

#: The roles, each with the model flag that picks its component (argparse dest).
ROLES: Tuple[str, ...] = ("encoder_self_attention", "encoder_positions", "cross_attention")

_REGISTRY: Dict[str, Dict[str, Type["Component"]]] = {role: {} for role in ROLES}


def flag_of(dest: str) -> str:
    """The flag of an argparse ``dest`` (a role, a component's field): ``--dest-with-dashes``."""
    return "--" + dest.replace("_", "-")


def component_flag(default: Any = None, help: str = "", **argparse_keywords: Any):
    """A field of a :class:`ComponentConfig` that is a flag of every model
    built from components: ``--field-name`` (underscores as dashes) with
    ``help`` and argparse's ``type``, ``choices``, ``action``, ``metavar`` as
    given. ``default`` is the paper's value, which the model's architecture
    fills when the flag is not given (and ``--help`` appends); None is no fixed
    value (``help`` then says what an unset flag means)."""
    return field(default=default, metadata={"help": help, "argparse": argparse_keywords})


@dataclass
class ComponentConfig:
    """A component's typed configuration: one field per flag of the component
    (:func:`component_flag`), read from the model's arguments when the
    component is created (:meth:`from_namespace`). The base has no field: a
    component without flags of its own."""

    @classmethod
    def defaults(cls) -> Dict[str, Any]:
        """The fields with a fixed default (argparse ``dest`` -> the paper's value)."""
        return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not None}

    @classmethod
    def flags(cls) -> Tuple[str, ...]:
        """The component's flags as typed on the command line."""
        return tuple(flag_of(f.name) for f in dataclasses.fields(cls))

    @classmethod
    def add_args(cls, parser, skip: Tuple[str, ...] = ()) -> None:
        """One flag per field (but those named in ``skip``), with no argparse
        default: an unset flag stays None until the architecture fills it, so a
        value typed on the command line is told apart from a default."""
        for config_field in dataclasses.fields(cls):
            if config_field.name not in skip:
                parser.add_argument(
                    flag_of(config_field.name), help=config_field.metadata["help"], **config_field.metadata["argparse"]
                )

    @classmethod
    def from_namespace(cls, args) -> "ComponentConfig":
        """The configuration in the model's arguments (None where unset)."""
        return cls(**{f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)})


#: ``--normalization`` choices: fairseq's LayerNorm, or T5's RMSNorm (no mean subtracted, no bias)
NORMALIZATIONS = ("layernorm", "rmsnorm")
#: ``--feed-forward`` choices: fairseq's fc1, --activation-fn, fc2, or T5 v1.1's gated GELU
FEED_FORWARDS = ("fairseq", "gated-gelu")
#: ``--linear-biases`` choices: biases in the attention projections and the feed-forward, or none (T5)
LINEAR_BIASES = ("on", "off")
#: ``--attention-scaling`` choices: scores scaled by ``d_head^-0.5`` (Vaswani et al. 2017, Eq. 1), or not (T5)
ATTENTION_SCALINGS = ("inverse-sqrt", "none")


@dataclass
class BackboneConfig(ComponentConfig):
    """The backbone of the component model's layers: the choices, beside the
    three roles, in which the Transformers the components run on differ. Each
    default is BART's, so an architecture that names none of them is BART's
    backbone; T5 v1.1 (Raffel et al. 2020, Sec. 2.1; the v1.1 changes of its
    released checkpoints) is RMSNorm, the gated GELU, no biases and unscaled
    scores (with ``--encoder-positions t5-relative-bias``). Before or after
    each block is fairseq's ``--encoder-normalize-before`` /
    ``--decoder-normalize-before``; the embeddings' scale fairseq's
    ``--no-scale-embedding``."""

    normalization: Optional[str] = component_flag(
        "layernorm",
        "the layers' and stacks' normalisation: layernorm (fairseq's LayerNorm, BART) or rmsnorm (T5's "
        "T5LayerNorm: y = w * x / sqrt(mean(x^2) + eps), no mean subtracted, no bias)",
        choices=NORMALIZATIONS,
    )
    rms_norm_eps: Optional[float] = component_flag(
        1e-6, "epsilon of --normalization rmsnorm (T5's layer_norm_epsilon)", type=float
    )
    feed_forward: Optional[str] = component_flag(
        "fairseq",
        "the feed-forward block: fairseq (fc2(activation(fc1 x)), --activation-fn) or gated-gelu (T5 v1.1: "
        "fc2(gelu_tanh(fc_gate x) * fc1 x), Shazeer 2020, Eq. 6; --activation-fn is not read)",
        choices=FEED_FORWARDS,
    )
    linear_biases: Optional[str] = component_flag(
        "on",
        "biases in the attention projections and the feed-forward layers: on (BART) or off (T5)",
        choices=LINEAR_BIASES,
    )
    attention_scaling: Optional[str] = component_flag(
        "inverse-sqrt",
        "attention scores: inverse-sqrt scales the queries by head_dim^-0.5 (BART), none does not (T5, whose "
        "initialisation absorbs the scale)",
        choices=ATTENTION_SCALINGS,
    )
    untie_output_embedding: bool = component_flag(
        False,
        "the decoder's output layer is a matrix of its own, not the token embedding, also when "
        "--share-all-embeddings shares the token embedding between the stacks (T5 v1.1)",
        action="store_true",
    )
    attention_head_dim: Optional[int] = component_flag(
        None,
        "width of one attention head (T5's d_kv): the query, key and value projections map d_model to heads x N "
        "and the output projection back (google/t5-v1_1-small: 6 heads of 64 on d_model 512); unset: d_model / "
        "heads (BART)",
        type=at_least(1),
        metavar="N",
    )
    stack_output_dropout: bool = component_flag(
        False,
        "--dropout on each stack's output after its final layer norm (T5: Hugging Face's T5Stack applies its "
        "dropout after final_layer_norm); BART and PEGASUS have none",
        action="store_true",
    )

    @classmethod
    def of(cls, args) -> "BackboneConfig":
        """The backbone in the model's arguments, BART's value where one is
        unset (a checkpoint or a model written before these flags)."""
        config = cls.from_namespace(args)
        for config_field in dataclasses.fields(cls):
            if getattr(config, config_field.name) is None:
                setattr(config, config_field.name, config_field.default)
        return config

    @property
    def linear_bias(self) -> bool:
        return self.linear_biases == "on"

    def attention_width(self, embed_dim: int, heads: int) -> int:
        """The width of an attention's heads together: ``heads x --attention-head-dim``,
        or ``embed_dim`` when the flag is unset."""
        return embed_dim if self.attention_head_dim is None else heads * self.attention_head_dim

    def widened_stacks(self, args) -> List[str]:
        """The stacks of ``args`` whose heads together ``--attention-head-dim``
        makes other than the model's width, each said with its flags."""
        return [
            f"--{stack}-attention-heads {heads} x --attention-head-dim {self.attention_head_dim} != "
            f"--{stack}-embed-dim {embed_dim}"
            for stack in ("encoder", "decoder")
            for embed_dim, heads in [
                (getattr(args, f"{stack}_embed_dim", None), getattr(args, f"{stack}_attention_heads", None))
            ]
            if embed_dim is not None and heads is not None and self.attention_width(embed_dim, heads) != embed_dim
        ]

    @property
    def is_barts(self) -> bool:
        """Whether every choice is BART's (:meth:`defaults`)."""
        return all(getattr(self, name) == value for name, value in self.defaults().items())


def register_component(role: str, name: str):
    """Class decorator: make ``cls`` the component ``name`` of ``role``. A
    flag of its configuration that another registered component declares
    differently is refused (the model's parser holds each flag once)."""
    if role not in _REGISTRY:
        raise ValueError(f"unknown component role {role!r}; roles: {ROLES}")

    def register(cls):
        if name in _REGISTRY[role] and _REGISTRY[role][name] is not cls:
            raise ValueError(f"{flag_of(role)} {name!r} is already registered ({_REGISTRY[role][name].__name__})")
        reserved = set(ROLES) | {"max_encoder_positions"} | {f.name for f in dataclasses.fields(BackboneConfig)}
        for config_field in dataclasses.fields(cls.config_class):
            if config_field.name in reserved:
                raise ValueError(f"{cls.__name__}: {flag_of(config_field.name)} is a flag of the component model")
            for other in component_classes():
                same = {f.name: f for f in dataclasses.fields(other.config_class)}.get(config_field.name)
                if other is not cls and same is not None and same is not config_field:
                    raise ValueError(
                        f"{cls.__name__} ({cls.__module__}): its flag {flag_of(config_field.name)} is already "
                        f"declared by {other.__name__} ({other.__module__}, {flag_of(other.role)} {other.name})"
                    )
        cls.role, cls.name = role, name
        _REGISTRY[role][name] = cls
        return cls

    return register


def import_component_modules(package_name: str, package_file: str) -> List[str]:
    """Register the components of a package: import every ``*_components.py``
    module in its folder and sub-packages, so that their
    :func:`register_component` classes run with no list of them kept by hand.
    A user's ``--user-dir`` package calls it from its ``__init__.py``
    (``import_component_modules(__name__, __file__)``, after
    ``mdsfair.register()``; ``docs/components.md``). Returns the modules' names."""
    return import_submodules_ending_with(package_name, package_file, "_components.py")


def unregister_component(role: str, name: str) -> None:
    """Remove a registration (a test's toy component)."""
    _REGISTRY[role].pop(name, None)


def component_names(role: str) -> Tuple[str, ...]:
    return tuple(_REGISTRY[role])


def component_classes():
    """Every registered component class, role by role."""
    return [cls for role in ROLES for cls in _REGISTRY[role].values()]


def component_class(role: str, name: str) -> Type["Component"]:
    try:
        return _REGISTRY[role][name]
    except KeyError:
        raise ValueError(
            f"{flag_of(role)} {name!r} is not a registered component; choose one of {', '.join(component_names(role))}"
        ) from None


class Component:
    """Base of every component; see the module docstring.

    A component object lives on the model (it is not an ``nn.Module``: its
    parameters belong to the modules it builds) and is created from the
    model's arguments.
    """

    role: ClassVar[str]
    name: ClassVar[str]
    #: this component's flags, their help and paper-faithful defaults
    config_class: ClassVar[Type[ComponentConfig]] = ComponentConfig
    #: where it comes from (the system, the paper and its section or equations), for the
    #: generated tables of ``docs/components.md`` and ARCHITECTURE.md
    paper: ClassVar[str] = ""
    #: what it does, in a few words, for the same tables
    summary: ClassVar[str] = ""
    #: the data-contract inputs it may read, each with when (the tables' "side inputs")
    side_input_notes: ClassVar[Dict[str, str]] = {}
    #: the modules that hold its computation beside its own (dotted names)
    implemented_in: ClassVar[Tuple[str, ...]] = ()
    #: reads every token's document (``src_doc_ids``, else one document per ``<s>``-opened run)
    uses_documents: ClassVar[bool] = False
    #: needs every document to open with ``<s>``, its start-of-document token
    needs_document_start_tokens: ClassVar[bool] = False
    #: builds its attention with the backbone's biases and lets the layer set its
    #: scaling (:class:`BackboneConfig`), so it runs on T5's backbone as on BART's
    follows_backbone: ClassVar[bool] = False
    #: runs with heads of ``--attention-head-dim`` when they are not d_model / heads
    #: (its attention is fairseq's ``MultiheadAttention`` the layer widens, or it builds none)
    takes_head_width: ClassVar[bool] = False

    def __init__(self, args):
        self.args = args
        self.config = self.config_class.from_namespace(args)

    @classmethod
    def add_args(cls, parser) -> None:
        """The component's own flags, one per field of :attr:`config_class`."""
        cls.config_class.add_args(parser)

    @classmethod
    def flag_defaults(cls) -> Dict[str, Any]:
        """The paper's defaults of the component's flags (argparse ``dest`` -> value)."""
        return cls.config_class.defaults()

    def side_inputs(self) -> Dict[str, bool]:
        """Data-contract inputs this component reads: name -> required."""
        return {}

    def refusal(self, components: Dict[str, "Component"]) -> Optional[str]:
        """Why this component cannot work with ``components`` (role -> component), or None."""
        return None

    def build_encoder_modules(self, encoder) -> None:
        """Modules the encoder holds for this component (their parameters are
        the encoder's: ``encoder.<name>``), computed once per source."""

    def on_build_model(self, model, task) -> None:
        """Hook after the model is built (task-dependent settings, checks)."""

    def after_init(self, model) -> None:
        """Hook after BART's weight initialization (own initializations)."""

    def upgrade_state_dict(self, model, state_dict: Dict[str, Tensor], prefix: str) -> None:
        """Hook when a checkpoint is loaded (create or extend what it lacks)."""

    def __repr__(self):
        return f"{type(self).__name__}({flag_of(self.role)} {self.name})"
