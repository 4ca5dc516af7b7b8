"""Components configure themselves (issue 43): each component's flags are the
fields of its typed configuration, the defaults are read from the registry
when an architecture fills its arguments (so a component registered after
``mdsfair.register()`` has its defaults), and an ablation flag that would
replace a component its architecture does not have is refused, naming the
flag and the architecture."""

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Optional

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_INV_REGISTRY, MODEL_REGISTRY

from mdsfair.argument_types import UsageError
from mdsfair.models.component_flags import add_component_args
from mdsfair.models.component_model import ComponentBARTModel
from mdsfair.models.dape_transformer import DAPE_ABLATIONS
from mdsfair.models.presets import HIERENCDEC_ABLATIONS, apply_built_ablations
from mdsfair.modules.components import (
    ROLES,
    ComponentConfig,
    component_classes,
    component_flag,
    register_component,
    unregister_component,
)
from mdsfair.modules.cross_attention_components import FullCrossAttention

#: The ablation flags of each model whose architectures are presets of components.
ABLATIONS_OF_MODEL = {"hierencdec_bart": HIERENCDEC_ABLATIONS, "dape_transformer": DAPE_ABLATIONS}


def parsed_model_args(model_name: str, argv=()) -> argparse.Namespace:
    """``argv`` parsed as fairseq parses a model's flags (an unset flag is absent)."""
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    MODEL_REGISTRY[model_name].add_args(parser)
    return parser.parse_args(list(argv))


def filled(arch: str, argv=()) -> argparse.Namespace:
    """The arguments of ``arch`` after its architecture function, from ``argv``
    (conftest.py registered mdsfair for the session)."""
    args = parsed_model_args(next(m for m, archs in ARCH_MODEL_INV_REGISTRY.items() if arch in archs), argv)
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


# ------------------------------------------------------- typed configurations


@pytest.mark.parametrize("component", component_classes(), ids=lambda cls: f"{cls.role}:{cls.name}")
def test_each_component_flag_comes_from_its_configuration_with_help_and_default(component):
    parser = argparse.ArgumentParser()
    add_component_args(parser)
    actions = {action.dest: action for action in parser._actions}
    config_fields = dataclasses.fields(component.config_class)
    for config_field in config_fields:
        action = actions[config_field.name]
        assert action.help and config_field.metadata["help"] == action.help, config_field.name
        assert action.default in (None, False), config_field.name  # unset until the architecture fills it
    assert component.flag_defaults() == {f.name: f.default for f in config_fields if f.default is not None}
    args = filled("multidoc_bart_tiny", [f"--{component.role.replace('_', '-')}", component.name])
    config = component.config_class.from_namespace(args)
    for name, default in component.flag_defaults().items():
        assert getattr(config, name) == default, name


def test_a_flag_declared_by_two_components_differently_is_refused():
    @dataclass
    class WindowConfig(ComponentConfig):
        attention_window: Optional[int] = component_flag(7, "another meaning of the window", type=int)

    class Clash(FullCrossAttention):
        config_class = WindowConfig

    with pytest.raises(ValueError, match="--attention-window is already declared by LongformerSelfAttentionComponent"):
        register_component("cross_attention", "clashing-window")(Clash)
    assert "clashing-window" not in {cls.name for cls in component_classes()}


@pytest.fixture()
def late_component():
    """A component registered after mdsfair.register() and after every model
    module was imported, with a flag and its default."""

    @dataclass
    class TopDocumentsConfig(ComponentConfig):
        top_k_documents: Optional[int] = component_flag(2, "documents each query reads", type=int, metavar="K")

    @register_component("cross_attention", "late-top-documents")
    class LateTopDocuments(FullCrossAttention):
        config_class = TopDocumentsConfig

    yield LateTopDocuments
    unregister_component("cross_attention", "late-top-documents")


@pytest.mark.parametrize("arch", ["multidoc_bart_tiny", "hierencdec_bart_tiny", "led_tiny", "sparse_bart_tiny"])
def test_a_component_registered_late_has_its_flag_default_filled_by_every_architecture(late_component, arch):
    args = filled(arch, ["--cross-attention", "late-top-documents"])
    assert args.top_k_documents == 2
    assert filled(arch, ["--top-k-documents", "3"]).top_k_documents == 3  # a given value wins
    parser = argparse.ArgumentParser()
    MODEL_REGISTRY[next(m for m, a in ARCH_MODEL_INV_REGISTRY.items() if arch in a)].add_args(parser)
    helps = {action.dest: action.help for action in parser._actions}
    assert helps["top_k_documents"] == "documents each query reads (default: 2)"


# ------------------------------------------------------------------ ablations


def ablation_cases():
    for model_name, ablations in ABLATIONS_OF_MODEL.items():
        for arch in ARCH_MODEL_INV_REGISTRY[model_name]:
            for ablation in ablations:
                yield pytest.param(arch, ablation, id=f"{arch}-{ablation.flag}")


def test_every_ablation_flag_of_a_component_model_is_in_an_ablation_table():
    """The whole class: a ``--no-*`` flag a component-built model adds to its
    base's flags is one of its tabled ablations (so each is tested below)."""
    from fairseq.models.bart import BARTModel
    from fairseq.models.transformer import TransformerModel

    for model_name, cls in sorted(MODEL_REGISTRY.items()):
        if not cls.__module__.startswith("mdsfair.") or not (
            issubclass(cls, ComponentBARTModel) or model_name in ABLATIONS_OF_MODEL
        ):
            continue
        base, model = argparse.ArgumentParser(), argparse.ArgumentParser()
        (BARTModel if issubclass(cls, ComponentBARTModel) else TransformerModel).add_args(base)
        add_component_args(base)
        cls.add_args(model)
        own = {action.dest for action in model._actions} - {action.dest for action in base._actions}
        tabled = {ablation.flag for ablation in ABLATIONS_OF_MODEL.get(model_name, ())}
        assert {name for name in own if name.startswith("no_")} == tabled, model_name


@pytest.mark.parametrize("arch, ablation", list(ablation_cases()))
def test_an_ablation_replaces_its_component_or_is_refused_where_the_preset_lacks_it(arch, ablation):
    plain = filled(arch)
    flag = f"--{ablation.flag.replace('_', '-')}"
    if getattr(plain, ablation.role) == ablation.component:
        ablated = filled(arch, [flag])
        assert getattr(ablated, ablation.role) == ablation.replacement_for(ablated)
        for role in set(ROLES) - {ablation.role}:
            assert getattr(ablated, role) == getattr(plain, role), role
        return
    with pytest.raises(UsageError) as refused:
        filled(arch, [flag])
    message = str(refused.value)
    assert "\n" not in message and flag in message and f"--arch {arch}" in message, message
    assert getattr(plain, ablation.role) in message


def test_primera_hierencdec_keeps_primeras_attention_under_no_hierarchical_encoder():
    """The issue's case: the flag no longer swaps PRIMERA's Longformer attention
    for full attention, on the command line nor on a checkpoint's arguments."""
    with pytest.raises(UsageError, match="--no-hierarchical-encoder does not apply to --arch primera_hierencdec: "):
        filled("primera_hierencdec", ["--no-hierarchical-encoder"])
    checkpoint_args = filled("primera_hierencdec_tiny")
    checkpoint_args.arch, checkpoint_args.no_hierarchical_encoder = "primera_hierencdec_tiny", True
    with pytest.raises(UsageError, match="encoder self attention is longformer"):
        apply_built_ablations(checkpoint_args, HIERENCDEC_ABLATIONS)
    assert checkpoint_args.encoder_self_attention == "longformer"
    # on HierEncDec's own arguments the flag still switches its part off at build time
    hierencdec_args = filled("hierencdec_bart_tiny")
    hierencdec_args.no_hierarchical_encoder = True
    apply_built_ablations(hierencdec_args, HIERENCDEC_ABLATIONS)
    assert hierencdec_args.encoder_self_attention == "full"


# ------------------------------------------- a component in a user's package

#: A researcher's package, loaded with ``fairseq-train --user-dir``: its
#: ``__init__.py`` registers mdsfair, then every ``*_components.py`` module of
#: the package (docs/components.md, "Your own components").
USER_PACKAGE_INIT = '''"""My components for mdsfair."""
import mdsfair
from mdsfair.modules.components import import_component_modules

mdsfair.register()
import_component_modules(__name__, __file__)
'''

#: A component in a module no file names: BART's cross-attention with a softmax
#: temperature (the scores divided by --cross-attention-temperature), default 2.
USER_COMPONENT_MODULE = '''"""Cross-attention with a softmax temperature."""
from dataclasses import dataclass
from typing import Optional

from mdsfair.modules.components import ComponentConfig, component_flag, register_component
from mdsfair.modules.cross_attention_components import FullCrossAttention


@dataclass
class TemperatureConfig(ComponentConfig):
    cross_attention_temperature: Optional[float] = component_flag(
        2.0, "softmax temperature of the cross-attention scores", type=float
    )


@register_component("cross_attention", "tempered")
class TemperedCrossAttention(FullCrossAttention):
    """softmax(q k^T / (sqrt(d_head) * temperature))."""

    config_class = TemperatureConfig

    def build(self, layer, embed_dim, cfg):
        attention = super().build(layer, embed_dim, cfg)
        attention.scaling = attention.scaling / self.config.cross_attention_temperature
        return attention
'''


@pytest.mark.slow
def test_a_component_of_a_user_dir_package_trains_with_its_default(tmp_path):
    """fairseq-train --user-dir on a package of the user's (not mdsfair): its
    component is a choice of --cross-attention, the architecture fills its
    flag's default, and the checkpoint records it and builds with it."""
    import importlib
    import os
    import sys

    from fairseq import checkpoint_utils

    from tests.utils import fairseq_cli, make_tiny_data_bin, short_training

    package = tmp_path / "user" / "my_components"
    (package / "attention").mkdir(parents=True)
    (package / "__init__.py").write_text(USER_PACKAGE_INIT, encoding="utf-8")
    (package / "attention" / "__init__.py").write_text("", encoding="utf-8")
    (package / "attention" / "tempered_components.py").write_text(USER_COMPONENT_MODULE, encoding="utf-8")
    data_bin = make_tiny_data_bin(str(tmp_path / "data"), train=8, valid=2, test=2, vocab_size=200)
    save_dir = str(tmp_path / "checkpoints")
    model_flags = ["--task", "multidoc_summarization", "--arch", "multidoc_bart_tiny", "--cross-attention", "tempered"]
    fairseq_cli(
        "fairseq_cli.train",
        [data_bin, "--user-dir", str(package), *model_flags, *short_training(save_dir, updates=2)],
    )
    checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
    saved = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)["cfg"]["model"]
    assert (saved.cross_attention, saved.cross_attention_temperature) == ("tempered", 2.0)

    sys.path.insert(0, str(package.parent))
    try:
        importlib.import_module("my_components")
        models, _, _ = checkpoint_utils.load_model_ensemble_and_task([checkpoint])
        attention = models[0].decoder.layers[0].encoder_attn
        assert attention.scaling == pytest.approx(attention.head_dim**-0.5 / 2.0)
    finally:
        sys.path.remove(str(package.parent))
        unregister_component("cross_attention", "tempered")
        for name in [name for name in sys.modules if name.split(".")[0] == "my_components"]:
            del sys.modules[name]
