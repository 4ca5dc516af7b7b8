"""One source for every default (``mdsfair.models.flag_defaults``): each model's
table is what its ``--help`` shows and what its architectures fill in."""

import argparse
import importlib

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_INV_REGISTRY, MODEL_REGISTRY

from mdsfair.models.flag_defaults import FlagDefaults, derived


def test_fill_keeps_given_values_and_takes_the_architecture_value_before_the_table():
    table = FlagDefaults({"window": 1024, "heads": 8, "decoder_heads": derived("the encoder's", lambda a: a.heads)})
    args = argparse.Namespace(window=None, heads=4)
    table.fill(args, window=512)
    assert (args.window, args.heads, args.decoder_heads) == (512, 4, 4)
    args = argparse.Namespace(window=16)
    table.fill(args, window=512)
    assert (args.window, args.heads, args.decoder_heads) == (16, 8, 8)


def test_fill_refuses_an_architecture_value_for_a_flag_not_in_the_table():
    with pytest.raises(KeyError, match="windw"):
        FlagDefaults({"window": 1024}).fill(argparse.Namespace(), windw=512)


def test_help_text_reads_the_table():
    table = FlagDefaults({"window": 1024, "flag": False, "heads": derived("the encoder's heads", lambda a: 1)})
    assert table.help("window", "window size") == "window size (default: 1024)"
    assert table.help("flag", "a switch") == "a switch (default: off)"
    assert table.help("heads", "heads") == "heads (default: the encoder's heads)"


def test_documented_add_args_appends_each_tabled_default_once_with_the_outer_table():
    """``@DEFAULTS.documented``: the flags a decorated ``add_args`` adds, its
    base's included, end with the table's default; a decorated base
    re-annotated by a derived table shows the derived default once."""
    base = FlagDefaults({"window": 1024})
    derived_table = base.extended(window=512, heads=8)

    @base.documented
    def base_args(parser):
        parser.add_argument("--window", type=int, help="window size")
        parser.add_argument("--other", help="not in the table")

    @derived_table.documented
    def derived_args(parser):
        base_args(parser)
        parser.add_argument("--heads", type=int, help="heads")

    helps = {action.dest: action.help for action in _added(base_args)}
    assert helps == {"window": "window size (default: 1024)", "other": "not in the table"}
    helps = {action.dest: action.help for action in _added(derived_args)}
    assert helps == {"window": "window size (default: 512)", "other": "not in the table", "heads": "heads (default: 8)"}


def _added(add_args):
    parser = argparse.ArgumentParser()
    first = len(parser._actions)
    add_args(parser)
    return parser._actions[first:]


def mdsfair_models_with_tables():
    models = []
    for name, cls in sorted(MODEL_REGISTRY.items()):
        if not cls.__module__.startswith("mdsfair."):
            continue
        table = getattr(importlib.import_module(cls.__module__), "DEFAULTS", None)
        if isinstance(table, FlagDefaults):
            models.append(name)
    return models


def test_the_led_model_has_a_table():
    assert "led" in mdsfair_models_with_tables()


@pytest.mark.parametrize("model_name", mdsfair_models_with_tables())
def test_help_shows_each_tabled_flag_default_and_every_architecture_sets_every_flag(model_name):
    cls = MODEL_REGISTRY[model_name]
    table = importlib.import_module(cls.__module__).DEFAULTS
    parser = argparse.ArgumentParser()
    cls.add_args(parser)
    helps = {action.dest: action.help or "" for action in parser._actions}
    for name in table:
        if name in helps:  # flags of the model's own add_args (others come from the task or a base model)
            assert helps[name].endswith(f"(default: {table.describe(name)})"), (name, helps[name])
    for arch in ARCH_MODEL_INV_REGISTRY[model_name]:
        args = parser.parse_args([])
        ARCH_CONFIG_REGISTRY[arch](args)
        unset = [name for name in table if getattr(args, name, None) is None]
        assert not unset, (arch, unset)
