"""The model contract, run by every registered component.

As Hugging Face's ``ModelTesterMixin`` runs its checks over
``all_model_classes``, this suite runs the model contract's checks
(``tests/contract_checks.py``) over every component of the registry
(``mdsfair.modules.components``), read when the tests are collected: each
choice of each role on :data:`HOST` (the model assembled from the role
flags, at tiny dimensions), the other roles at the defaults its
architecture fills (a component that refuses BART's backbone and takes
T5's, as LongT5's encoder attentions, runs on T5's backbone and relative
positions: :func:`on_a_backbone_it_accepts`). A component registered later is run without a line of
test code; a role's default component runs in the one configuration of
defaults. The presets and every other registered architecture run the
contract in ``tests/test_model_contract.py``, parametrized from
:func:`tests.model_contract.mdsfair_architectures`.

Each configuration reads three validation clusters of the golden data-bin
(``tests/fixtures/golden/data-bin``: every side input of the data contract,
sources of 165 to 186 tokens, so the batch holds padding); the task hands
the model the side inputs its components declare. A model whose
cross-attention has a sentence approximator trains with the sparse
decoder's KL task and its encoder unfrozen, so that every parameter is in
the training loss. Checks:

* forward shapes, finite outputs; padding and batch composition change no
  example's outputs (float64);
* the task's beam search scores every hypothesis as one full pass does;
* incremental decoding with the encoder output and caches reordered as
  beam search reorders them equals full decoding (float64);
* a gradient reaches every trainable parameter;
* the save / load round trip through fairseq's Trainer and loader.

A component that refuses the combination (:meth:`Component.refusal`) is
skipped with its reason.
"""

import functools
import os
from argparse import Namespace
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import pytest

from tests import contract_checks as checks
from tests import model_contract as contract
from tests.golden_outputs import GOLDEN_DIR

#: The architecture that assembles its model from the role flags.
HOST = "multidoc_bart_tiny"
DATA = {"data-bin": os.path.join(GOLDEN_DIR, "data-bin")}
TRAIN_EXAMPLES = [0, 1, 2, 3]


def host_args(**given) -> Namespace:
    """The arguments :data:`HOST`'s architecture fills around ``given``."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    contract.mdsfair_architectures()  # registers mdsfair
    args = Namespace(**given)
    ARCH_CONFIG_REGISTRY[HOST](args)
    return args


@functools.lru_cache(maxsize=None)
def host_defaults() -> Dict[str, str]:
    """role -> the component :data:`HOST`'s architecture chooses when no flag is given."""
    from mdsfair.modules.components import ROLES

    args = host_args()
    return {role: getattr(args, role) for role in ROLES}


@dataclass(frozen=True)
class Configuration:
    """The components of one model: role -> name, every role named."""

    choices: Tuple[Tuple[str, str], ...]
    #: backbone flags (T5's, for a component that needs T5's backbone), none for BART's
    backbone: Tuple[str, ...] = ()

    @property
    def name(self) -> str:
        chosen = [f"{role}={name}" for role, name in self.choices if host_defaults()[role] != name]
        return ",".join(chosen) or "defaults(" + ",".join(name for _, name in self.choices) + ")"

    def flags(self) -> List[str]:
        from mdsfair.modules.components import flag_of

        return [item for role, name in self.choices for item in (flag_of(role), name)] + list(self.backbone)

    def family(self) -> contract.ModelFamily:
        """The sparse decoder's KL task (its encoder trained too) for a
        cross-attention with a sentence approximator, else the summarizers'."""
        from mdsfair.modules.components import component_class

        cross_attention = component_class("cross_attention", dict(self.choices)["cross_attention"])
        if hasattr(cross_attention, "approximator_parameter_names"):
            return contract.SPARSE_SUMMARIZER
        return contract.family(HOST)

    def task_flags(self) -> List[str]:
        return ["--train-encoder"] if self.family() is contract.SPARSE_SUMMARIZER else []


def component_configurations() -> List[Configuration]:
    """One configuration per registered component that is not its role's
    default (the others at their defaults), and the one of the defaults."""
    from mdsfair.modules.components import ROLES, component_names

    defaults = host_defaults()
    configurations = [Configuration(tuple(defaults.items()))]
    for role in ROLES:
        for name in component_names(role):
            if name != defaults[role]:
                configurations.append(on_a_backbone_it_accepts({**defaults, role: name}))
    return configurations


#: T5 v1.1's backbone (``mdsfair.models.presets.T5_BACKBONE``): its positions, and these flags with their argparse values
T5_POSITIONS = "t5-relative-bias"
T5_BACKBONE = {
    "--normalization": ("normalization", "rmsnorm"),
    "--feed-forward": ("feed_forward", "gated-gelu"),
    "--linear-biases": ("linear_biases", "off"),
    "--attention-scaling": ("attention_scaling", "none"),
}


def on_a_backbone_it_accepts(choices: Dict[str, str]) -> Configuration:
    """The configuration of ``choices`` on BART's backbone, or, for a
    component that refuses BART's backbone and accepts T5's (LongT5's
    encoder attentions), on T5's: its relative positions and its backbone
    flags, the other roles still at their defaults."""
    if refusal(host_args(**choices)) is None or choices["encoder_positions"] == T5_POSITIONS:
        return Configuration(tuple(choices.items()))
    on_t5 = {**choices, "encoder_positions": T5_POSITIONS}
    if refusal(host_args(**on_t5, **dict(T5_BACKBONE.values()))) is not None:
        return Configuration(tuple(choices.items()))  # refused on both: skipped with the reason
    flags = tuple(item for flag, (_, value) in T5_BACKBONE.items() for item in (flag, value))
    return Configuration(tuple(on_t5.items()), flags)


def refusal(args) -> Optional[str]:
    """Why a component of ``args`` refuses the others (:meth:`Component.refusal`), or None."""
    from mdsfair.modules.components import ROLES, component_class, flag_of

    components = {role: component_class(role, getattr(args, role))(args) for role in ROLES}
    for role, component in components.items():
        reason = component.refusal(components)
        if reason:
            return f"{flag_of(role)} {component.name} refuses this combination: {reason}"
    return None


def skip_if_refused(configuration: Configuration, args) -> None:
    reason = refusal(args)
    if reason:
        pytest.skip(f"{configuration.name}: {reason}")


CONFIGURATIONS = component_configurations()


_BUILT: Dict[Configuration, contract.ContractModel] = {}


def built(configuration: Configuration) -> contract.ContractModel:
    """The :class:`ContractModel` of ``configuration`` (cached); skips a
    refused combination with the reason."""
    if configuration not in _BUILT:
        _BUILT[configuration] = contract.ContractModel(
            HOST,
            DATA,
            *configuration.flags(),
            *configuration.task_flags(),
            model_family=configuration.family(),
        )
    built_model = _BUILT[configuration]
    skip_if_refused(configuration, built_model.cfg.model)
    return built_model


def float64_model(built_model: contract.ContractModel):
    return built_model.build_model().double().eval()


parametrized = pytest.mark.parametrize("configuration", CONFIGURATIONS, ids=[c.name for c in CONFIGURATIONS])


# ----------------------------------------------------------- the registry


def test_every_registered_component_has_a_configuration():
    """Each (role, component) of the registry runs: the role's default in
    the configuration of defaults, every other component in its own."""
    from mdsfair.modules.components import ROLES, component_names

    covered = {choice for configuration in CONFIGURATIONS for choice in configuration.choices}
    assert covered == {(role, name) for role in ROLES for name in component_names(role)}
    assert len(CONFIGURATIONS) == len(covered) - len(ROLES) + 1


@pytest.fixture()
def refusing_positions():
    """A position component that refuses every combination."""
    from mdsfair.modules.components import register_component, unregister_component
    from mdsfair.modules.position_components import PositionComponent

    host_defaults()

    @register_component("encoder_positions", "toy-refusing")
    class RefusingPositions(PositionComponent):
        def refusal(self, components):
            return "the toy refuses every combination"

    yield RefusingPositions
    unregister_component("encoder_positions", "toy-refusing")


def test_a_refused_combination_is_skipped_with_its_reason(refusing_positions):
    configuration = Configuration(tuple({**host_defaults(), "encoder_positions": "toy-refusing"}.items()))
    expected = (
        "encoder_positions=toy-refusing: --encoder-positions toy-refusing refuses this combination: "
        "the toy refuses every combination"
    )
    with pytest.raises(pytest.skip.Exception, match=expected):
        skip_if_refused(configuration, host_args(encoder_positions="toy-refusing"))
    skip_if_refused(CONFIGURATIONS[0], host_args())  # the defaults: no skip


# -------------------------------------------------------------- the checks


@parametrized
def test_forward_shapes_padding_and_batch_composition(configuration):
    built_model = built(configuration)
    checks.check_forward_shapes_padding_and_batch_composition(built_model, float64_model(built_model))


@parametrized
def test_incremental_beam_search_equals_full_decoding(configuration):
    built_model = built(configuration)
    model = float64_model(built_model)
    checks.perturb_parameters(model, seed=0)
    checks.check_incremental_beam_search_equals_full_decoding(built_model, model)


@parametrized
def test_reordered_incremental_decoding_equals_full_decoding(configuration):
    built_model = built(configuration)
    model = float64_model(built_model)
    checks.perturb_parameters(model, seed=0)
    sample = built_model.batch("valid", built_model.shortest("valid", 3), model)
    checks.check_reordered_incremental_decoding_equals_full_decoding(model, sample["net_input"])


@parametrized
def test_every_parameter_gets_a_gradient(configuration):
    built_model = built(configuration)
    model = built_model.build_model().train()
    sample = built_model.batch("train", TRAIN_EXAMPLES, model)
    checks.check_every_parameter_gets_a_gradient(model, built_model.build_criterion(), sample)


@parametrized
def test_save_and_load_round_trip(configuration, tmp_path):
    built_model = built(configuration)
    checks.check_save_and_load_round_trip(built_model, built_model.build_model(), str(tmp_path / "checkpoint.pt"))
