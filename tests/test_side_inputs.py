"""The side inputs of a batch: their one table (``mdsfair/data/side_inputs.py``),
its collation, the one check of a batch, the documented copy of the table, and
the typed source context the decoder reads (``mdsfair/modules/source_structure.py``)."""

import os
import re

import pytest
import torch

from mdsfair.data.manifest import STRUCTURE_STREAMS
from mdsfair.data.side_data import SideDataSpec
from mdsfair.data.side_inputs import (
    PARAGRAPH_MATRIX,
    SIDE_INPUTS,
    STRUCTURE_INPUTS,
    TOKEN_ALIGNED,
    check_side_inputs,
    collate_side_inputs,
    side_input_of_side_data,
    side_input_table,
)
from mdsfair.modules.source_structure import SourceContext

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_table_names_every_structure_stream_and_spells_its_keys():
    assert tuple(side_input.stream for side_input in STRUCTURE_INPUTS) == STRUCTURE_STREAMS
    with open(os.path.join(REPO_ROOT, "mdsfair/data/side_inputs.py"), encoding="utf-8") as handle:
        source = handle.read()
    for name in SIDE_INPUTS:  # a search for the key finds the row that makes it
        assert f'"{name}"' in source, name


def test_the_data_contract_holds_the_table():
    with open(os.path.join(REPO_ROOT, "docs/data_contract.md"), encoding="utf-8") as handle:
        page = handle.read()
    documented = re.search(r"<!-- side-inputs:table -->\n\n(.*?)\n\n<!-- /side-inputs:table -->", page, re.S)
    assert documented is not None and documented.group(1) == side_input_table()


def test_collation_pads_each_stream_with_its_value():
    structures = [
        {"doc": torch.tensor([0, 0, 1]), "para": torch.tensor([0, 1, 2]), "sent": torch.tensor([0, 1, 2])},
        {"doc": torch.tensor([0]), "para": torch.tensor([0]), "sent": torch.tensor([0])},
    ]
    specs = [
        SideDataSpec("dep_rel", "token", "int8"),
        SideDataSpec("graph_similarity", "paragraph_matrix", "float64"),
        SideDataSpec("topics", "token", "int32"),  # a producer of a user's own
    ]
    side_data = [
        {"dep_rel": torch.tensor([4, 5, 6]), "graph_similarity": torch.ones(3, 3), "topics": torch.tensor([1, 2, 3])},
        {"dep_rel": torch.tensor([7]), "graph_similarity": torch.ones(1, 1), "topics": torch.tensor([9])},
    ]
    collated = collate_side_inputs(structures, side_data, specs)
    assert list(collated) == [
        "src_doc_ids",
        "src_para_ids",
        "src_sent_ids",
        "src_dep_rel",
        "src_graph_similarity",
        "src_topics",
    ]
    assert collated["src_doc_ids"].tolist() == [[0, 0, 1], [0, -1, -1]]
    assert collated["src_dep_rel"].tolist() == [[4, 5, 6], [7, -1, -1]]
    assert collated["src_graph_similarity"][1].tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert collated["src_topics"].tolist() == [[1, 2, 3], [9, -1, -1]]
    assert side_input_of_side_data(specs[2]).shape == TOKEN_ALIGNED
    assert side_input_of_side_data(SideDataSpec("links", "paragraph_matrix", "float64")).shape == PARAGRAPH_MATRIX


def test_one_check_names_every_failure_with_its_shapes():
    src_tokens = torch.ones(2, 5, dtype=torch.long)
    declared = {"src_doc_ids": False, "src_sent_ids": True, "src_graph_similarity": False}
    aligned = torch.zeros(2, 5, dtype=torch.long)
    check_side_inputs(src_tokens, {"src_sent_ids": aligned}, declared, "the model")
    with pytest.raises(ValueError, match=r"^side input src_para_ids not declared by any component of this model"):
        check_side_inputs(src_tokens, {"src_sent_ids": aligned, "src_para_ids": aligned}, declared, "the model")
    with pytest.raises(ValueError, match=r"^missing side input src_sent_ids \(needed by sparse"):
        check_side_inputs(src_tokens, {}, declared, "the model", {"src_sent_ids": ["sparse"]})
    with pytest.raises(ValueError, match=r"^src_doc_ids \[2, 4\] is not aligned to src_tokens \[2, 5\]"):
        check_side_inputs(src_tokens, {"src_sent_ids": aligned, "src_doc_ids": aligned[:, :4]}, declared, "m")
    with pytest.raises(ValueError, match=r"^src_graph_similarity \[2, 3, 4\] is not \[B, P, P\]"):
        check_side_inputs(
            src_tokens, {"src_sent_ids": aligned, "src_graph_similarity": torch.zeros(2, 3, 4)}, declared, "m"
        )
    with pytest.raises(ValueError) as refused:  # every failure of the batch, one message each
        check_side_inputs(src_tokens, {"src_doc_ids": aligned[:1]}, declared, "the model")
    missing, misaligned = refused.value.args[0].splitlines()
    assert missing.startswith("missing side input src_sent_ids (needed by the model;")
    assert misaligned.startswith("src_doc_ids [1, 5] is not aligned to src_tokens [2, 5]")


def test_the_source_context_reorders_every_tensor_with_the_hypotheses():
    context = SourceContext(document_ids=torch.tensor([[0, 0, 1], [0, 1, 1]]), sentence_states=torch.randn(2, 4, 3))
    order = torch.tensor([1, 1, 0])
    reordered = context.index_select(order)
    assert torch.equal(reordered.document_ids, context.document_ids[order])
    assert torch.equal(reordered.sentence_states, context.sentence_states[order])
    assert reordered.sentence_ids is None and reordered.sentence_padding_mask is None


def test_the_sparse_context_reorders_rows_not_sources():
    from mdsfair.modules.cross_attention_components import SparseSourceContext
    from mdsfair.modules.sentence_saliency import sentence_layout

    sentence_ids = torch.tensor([[0, 0, 1, 1, 2], [0, 1, 1, -1, -1]])
    context = SparseSourceContext(sentence_ids=sentence_ids, layout=sentence_layout(sentence_ids))
    expanded = context.index_select(torch.tensor([0, 0, 1, 1]))
    reordered = expanded.index_select(torch.tensor([2, 3, 0]))
    assert reordered.sentence_ids is sentence_ids  # one copy per source
    assert reordered.hypothesis_source_index.tolist() == [1, 1, 0]
    assert reordered.rows_context().rows.source_index.tolist() == [1, 1, 0]
