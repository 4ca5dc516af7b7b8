"""The tables of components in docs/components.md and ARCHITECTURE.md are
generated from the registry (``python -m mdsfair.component_table --write``,
issue 43): they equal it, each component says where it comes from, and what
the tables say of its side inputs and modules holds."""

import argparse
import dataclasses
import importlib
from dataclasses import dataclass
from typing import Optional

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY

from mdsfair.component_table import (
    DOCUMENTS,
    END,
    START,
    component_table,
    differing_documents,
    mdsfair_components,
    with_table,
)
from mdsfair.models.multidoc_bart import MultiDocBARTModel
from mdsfair.modules.components import (
    ComponentConfig,
    component_classes,
    component_flag,
    register_component,
    unregister_component,
)
from mdsfair.modules.cross_attention_components import FullCrossAttention
from tests.utils import REPO_ROOT


def test_the_documents_tables_are_the_registrys():
    assert differing_documents(REPO_ROOT, write=False) == [], "run python -m mdsfair.component_table --write"


def test_every_component_of_mdsfair_is_in_the_tables():
    names = {(cls.role, cls.name) for cls in mdsfair_components()}
    assert names == {(cls.role, cls.name) for cls in component_classes() if cls.__module__.startswith("mdsfair.")}
    for with_modules in set(DOCUMENTS.values()):
        table = component_table(with_modules)
        for cls in mdsfair_components():
            assert f"| `{cls.name}` | {cls.paper}" in table, cls.name


@pytest.mark.parametrize("component", mdsfair_components(), ids=lambda cls: f"{cls.role}:{cls.name}")
def test_what_the_table_says_of_a_component_holds(component):
    assert component.paper and component.summary
    for module in component.implemented_in:
        importlib.import_module(module)
    # every side input the component reads under any choice of its flags is in its notes
    choice_fields = [f for f in dataclasses.fields(component.config_class) if "choices" in f.metadata["argparse"]]
    settings = [[]] + [
        [f"--{f.name.replace('_', '-')}", choice] for f in choice_fields for choice in f.metadata["argparse"]["choices"]
    ]
    for setting in settings:
        parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)  # as fairseq's model flags
        MultiDocBARTModel.add_args(parser)
        args = parser.parse_args([f"--{component.role.replace('_', '-')}", component.name, *setting])
        ARCH_CONFIG_REGISTRY["multidoc_bart_tiny"](args)
        read = set(component(args).side_inputs())
        assert read <= set(component.side_input_notes), (setting, read)


def test_a_registered_component_is_a_row_of_the_table_and_mdsfairs_own_tables_leave_it_out():
    @dataclass
    class ToyConfig(ComponentConfig):
        toy_table_width: Optional[int] = component_flag(3, "a toy flag", type=int)

    @register_component("cross_attention", "toy-table-row")
    class ToyRow(FullCrossAttention):
        config_class = ToyConfig
        paper = "a test"
        summary = "BART's cross-attention"
        side_input_notes = {"src_doc_ids": "optional"}

    try:
        table = component_table(False, component_classes())
        assert (
            "|  | `toy-table-row` | a test: BART's cross-attention | `--toy-table-width` | `src_doc_ids` (optional) |"
            in (table)
        )
        assert "toy-table-row" not in component_table(True)
    finally:
        unregister_component("cross_attention", "toy-table-row")


def test_a_document_without_its_markers_is_refused_and_the_table_replaces_what_stood_between_them():
    with pytest.raises(ValueError, match="page one: needs one"):
        with_table("no markers here\n", "| table |\n", "page one")
    text = f"intro\n{START}\nold rows\n{END}\noutro\n"
    assert with_table(text, "| new |\n", "page one") == f"intro\n{START}\n\n| new |\n\n{END}\noutro\n"
